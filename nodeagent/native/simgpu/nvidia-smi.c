/*
 * nvidia-smi stand-in for the SIMULATED GPU: prints the familiar table from NVML. Linked
 * against libnvidia-ml.so.1, so inside a container with the interception core preloaded it
 * shows the slice, exactly as the real nvidia-smi would.
 */
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>
#include <stdio.h>

int main(void) {
    nvmlReturn_t r = nvmlInit_v2();
    if (r != NVML_SUCCESS) {
        fprintf(stderr, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                        "driver: %s (simulated nvidia-smi)\n", nvmlErrorString(r));
        return 9;
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
