/*
 * nvidia-smi stand-in for the SIMULATED GPU: prints the familiar table from NVML. Linked
 * against libnvidia-ml.so.1, so inside a container with the interception core preloaded it
 * shows the slice, exactly as the real nvidia-smi would.
 *
 * Scripts also get the real tool's query form, printed exactly as the real one prints it (no
 * SIMULATED label there: scripts parse it; the driver version still says simgpu):
 *   nvidia-smi --query-gpu=uuid,name,memory.total,memory.used,memory.free,driver_version
 *              --format=csv[,noheader][,nounits] [-i INDEX]
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fields[] = {"uuid", "name", "memory.total", "memory.used", "memory.free",
                                     "driver_version"};
enum { F_UUID, F_NAME, F_MEM_TOTAL, F_MEM_USED, F_MEM_FREE, F_DRIVER, F_COUNT };

/* Prints one field of device h into out; memory in MiB, " MiB" unless nounits. */
static void field_value(int f, nvmlDevice_t h, int nounits, char *out, size_t len) {
    char s[96] = "[N/A]";
    nvmlMemory_t m = {0};
    switch (f) {
    case F_UUID: nvmlDeviceGetUUID(h, s, sizeof s); break;
    case F_NAME: nvmlDeviceGetName(h, s, sizeof s); break;
    case F_DRIVER: nvmlSystemGetDriverVersion(s, sizeof s); break;
    default:
        if (nvmlDeviceGetMemoryInfo(h, &m) == NVML_SUCCESS) {
            unsigned long long v = f == F_MEM_TOTAL ? m.total : f == F_MEM_USED ? m.used : m.free;
            snprintf(s, sizeof s, "%llu%s", v >> 20, nounits ? "" : " MiB");
        }
    }
    snprintf(out, len, "%s", s);
}

/* --query-gpu: one csv line per device (or only device `only`), as the real tool prints. */
static int query(const char *list, const char *format, long only) {
    int want[F_COUNT], nwant = 0;
    for (const char *p = list; *p && nwant < F_COUNT;) {
        size_t n = strcspn(p, ",");
        int f = -1;
        for (int i = 0; i < F_COUNT; i++)
            if (strlen(fields[i]) == n && strncmp(fields[i], p, n) == 0) f = i;
        if (f < 0) {
            printf("Field \"%.*s\" is not a valid field to query.\n\n", (int)n, p);
            return 2;
        }
        want[nwant++] = f;
        p += n + (p[n] == ',');
    }
    if (!format || strncmp(format, "csv", 3) != 0) {
        printf("Format must be specified with --format=csv (simulated nvidia-smi)\n");
        return 2;
    }
    unsigned n = 0;
    nvmlDeviceGetCount_v2(&n);
    if (only >= (long)n) {
        printf("No devices were found\n");
        return 6;
    }
    int noheader = strstr(format, "noheader") != NULL, nounits = strstr(format, "nounits") != NULL;
    if (!noheader) {
        for (int i = 0; i < nwant; i++)
            printf("%s%s%s", i ? ", " : "", fields[want[i]],
                   want[i] >= F_MEM_TOTAL && want[i] <= F_MEM_FREE ? " [MiB]" : "");
        printf("\n");
    }
    for (unsigned d = 0; d < n; d++) {
        nvmlDevice_t h;
        if ((only >= 0 && d != (unsigned long)only) ||
            nvmlDeviceGetHandleByIndex_v2(d, &h) != NVML_SUCCESS)
            continue;
        for (int i = 0; i < nwant; i++) {
            char v[128];
            field_value(want[i], h, nounits, v, sizeof v);
            printf("%s%s", i ? ", " : "", v);
        }
        printf("\n");
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *list = NULL, *format = NULL;
    long only = -1;
    int list_gpus = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-L") == 0 || strcmp(argv[i], "--list-gpus") == 0) list_gpus = 1;
        else if (strncmp(argv[i], "--query-gpu=", 12) == 0) list = argv[i] + 12;
        else if (strncmp(argv[i], "--format=", 9) == 0) format = argv[i] + 9;
        else if (strncmp(argv[i], "--id=", 5) == 0) only = strtol(argv[i] + 5, NULL, 10);
        else if (strcmp(argv[i], "-i") == 0 && i + 1 < argc) only = strtol(argv[++i], NULL, 10);
    }
    nvmlReturn_t r = nvmlInit_v2();
    if (r != NVML_SUCCESS) {
        fprintf(stderr, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                        "driver: %s (simulated nvidia-smi)\n", nvmlErrorString(r));
        return 9;
    }
    if (list) {
        int rc = query(list, format, only);
        nvmlShutdown();
        return rc;
    }
    if (list_gpus) { /* -L: one line per device this process may see, as the real tool */
        unsigned count = 0;
        nvmlDeviceGetCount_v2(&count);
        for (unsigned i = 0; i < count; i++) {
            nvmlDevice_t h;
            char name[96] = "?", uuid[96] = "?";
            if (nvmlDeviceGetHandleByIndex_v2(i, &h) != NVML_SUCCESS) continue;
            nvmlDeviceGetName(h, name, sizeof name);
            nvmlDeviceGetUUID(h, uuid, sizeof uuid);
            printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
        }
        nvmlShutdown();
        return 0;
    }
    char drv[96] = "?";
    int cuda = 0;
    unsigned n = 0;
    nvmlSystemGetDriverVersion(drv, sizeof drv);
    nvmlSystemGetCudaDriverVersion(&cuda);
    nvmlDeviceGetCount_v2(&n);
    printf("+-----------------------------------------------------------------------------+\n");
    printf("| NVIDIA-SMI (SIMULATED GPU, simgpu)  Driver Version: %-14.14s CUDA %2d.%-2d |\n",
           drv, cuda / 1000, (cuda % 1000) / 10);
    printf("|-------------------------------+----------------------+----------------------|\n");
    printf("| GPU  Name                     |         Memory-Usage | GPU-Util             |\n");
    printf("|===============================+======================+======================|\n");
    for (unsigned i = 0; i < n; i++) {
        nvmlDevice_t h;
        char name[96] = "?";
        nvmlMemory_t m = {0};
        nvmlUtilization_t u = {0};
        if (nvmlDeviceGetHandleByIndex_v2(i, &h) != NVML_SUCCESS) continue;
        nvmlDeviceGetName(h, name, sizeof name);
        nvmlDeviceGetMemoryInfo(h, &m);
        nvmlDeviceGetUtilizationRates(h, &u);
        printf("| %3u  %-24.24s | %8lluMiB / %5lluMiB | %3u%%                 |\n", i, name,
               m.used >> 20, m.total >> 20, u.gpu);
    }
    printf("+-------------------------------+----------------------+----------------------+\n");
    nvmlShutdown();
    return 0;
}
