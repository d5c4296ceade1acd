/* What escape.c and holes.c share: an entry point reached the way HOW says (direct, dlsym or
 * getproc), and the device memory NVML says this process holds (the physical truth the core's
 * accounting is checked against). Include after common.h. */
#ifndef TEST_REACH_H
#define TEST_REACH_H

#include <dlfcn.h>
#include <nvml.h>
#include <unistd.h>

static const char *how = "direct"; /* main() sets it from argv */

/* The entry point `name` (exact exported name) / `base` at `version`, the way HOW finds it. */
static void *entry(const char *name, const char *base, int version, void *direct) {
    if (!strcmp(how, "direct")) return direct;
    if (!strcmp(how, "dlsym")) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        return h ? dlsym(h, name) : NULL;
    }
    void *p = NULL;
    CUdriverProcAddressQueryResult st;
    if (cuGetProcAddress_v2(base, &p, version, 0, &st) != CUDA_SUCCESS) return NULL;
    return p;
}

/* Bytes this process holds on device `index` by NVML; -1 when NVML cannot say. */
static long long nvml_process_bytes(unsigned index) {
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!h) return -1;
    nvmlReturn_t (*init)(void) = (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2");
    nvmlReturn_t (*byidx)(unsigned, nvmlDevice_t *) =
        (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2");
    nvmlReturn_t (*procs)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *) =
        (nvmlReturn_t(*)(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *))dlsym(
            h, "nvmlDeviceGetComputeRunningProcesses_v3");
    nvmlDevice_t d;
    nvmlProcessInfo_t info[64];
    unsigned n = 64;
    if (!init || !byidx || !procs || init() != NVML_SUCCESS || byidx(index, &d) != NVML_SUCCESS ||
        procs(d, &n, info) != NVML_SUCCESS)
        return -1;
    for (unsigned i = 0; i < n; i++)
        if (info[i].pid == (unsigned)getpid()) return (long long)info[i].usedGpuMemory;
    return 0;
}

#endif
