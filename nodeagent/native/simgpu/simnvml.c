/*
 * SIMULATED libnvidia-ml.so.1 (simgpu): the NVML subset that pynvml and the nvidia-smi
 * stand-in use. Memory use and utilisation come from the shared simgpu state file.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "simnvml.h"

struct nvmlDevice_st sim_nvml_handles[SIM_MAX_DEV];
int sim_nvml_inited;
#define handles sim_nvml_handles
#define inited sim_nvml_inited

SIM_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (sim_init() != 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    for (int i = 0; i < sim_ndev; i++) handles[i].index = i;
    inited = 1;
    return NVML_SUCCESS;
}
SIM_API nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
SIM_API nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }
SIM_API nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

SIM_API const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported (simgpu)";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost (simgpu: SIMULATED fault, simgpu-fault lose)";
    default: return "Unknown Error (simgpu)";
    }
}

SIM_API nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) {
    snprintf(v, len, "%s", SIM_DRIVER_VERSION);
    return NVML_SUCCESS;
}
SIM_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len) {
    snprintf(v, len, "12.550.00-simgpu");
    return NVML_SUCCESS;
}
SIM_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    *v = 12090;
    return NVML_SUCCESS;
}
SIM_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) {
    return nvmlSystemGetCudaDriverVersion(v);
}

SIM_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
    NEED_INIT();
    *n = (unsigned)sim_ndev;
    return NVML_SUCCESS;
}
SIM_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return nvmlDeviceGetCount_v2(n); }

SIM_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *h) {
    NEED_INIT();
    if (i >= (unsigned)sim_ndev || !h) return NVML_ERROR_INVALID_ARGUMENT;
    *h = &handles[i];
    return NVML_SUCCESS;
}
SIM_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *h) {
    return nvmlDeviceGetHandleByIndex_v2(i, h);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *h) {
    NEED_INIT();
    for (int i = 0; i < sim_ndev; i++) {
        if (uuid && strcmp(uuid, sim_cfg[i].uuid) == 0) {
            *h = &handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* A string answer, refused like the real library when the caller's buffer cannot hold it. */
static nvmlReturn_t copy_out(char *dst, unsigned int len, const char *src) {
    if (strlen(src) >= len) return NVML_ERROR_INSUFFICIENT_SIZE;
    snprintf(dst, len, "%s", src);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int *i) {
    NEED_INIT();
    DEV_OF(h);
    *i = (unsigned)idx;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned int len) {
    NEED_INIT();
    DEV_OF(h);
    return copy_out(name, len, sim_cfg[idx].name);
}

SIM_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned int len) {
    NEED_INIT();
    DEV_OF(h);
    return copy_out(uuid, len, sim_cfg[idx].uuid);
}

SIM_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned int *m) {
    NEED_INIT();
    DEV_OF(h);
    *m = (unsigned)sim_host[idx];
    return NVML_SUCCESS;
}

/* A simulated bus per GPU (SIM_PCI_BUS): the kernel log's Xid lines name GPUs by it. */
SIM_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t *pci) {
    NEED_INIT();
    DEV_OF(h);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    pci->bus = SIM_PCI_BUS(sim_host[idx]);
    pci->pciDeviceId = 0x1DB610DEu; /* V100 PCIe 32 GB, NVIDIA */
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_FMT, 0u, pci->bus, 0u);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT, 0u,
             pci->bus, 0u);
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t h, int *ma, int *mi) {
    NEED_INIT();
    DEV_OF(h);
    *ma = sim_cfg[idx].cc_major;
    *mi = sim_cfg[idx].cc_minor;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, nvmlMemory_t *m) {
    NEED_INIT();
    DEV_OF(h);
    uint64_t used = atomic_load(&SIM_DEV(idx)->used), total = sim_cfg[idx].memory_bytes;
    m->total = total;
    m->used = used;
    m->free = used < total ? total - used : 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, nvmlMemory_v2_t *m) {
    NEED_INIT();
    DEV_OF(h);
    uint64_t used = atomic_load(&SIM_DEV(idx)->used), total = sim_cfg[idx].memory_bytes;
    m->total = total;
    m->reserved = 0;
    m->used = used;
    m->free = used < total ? total - used : 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, nvmlUtilization_t *u) {
    NEED_INIT();
    DEV_OF(h);
    u->gpu = sim_utilisation(idx);
    u->memory = 0;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t h, unsigned int *n) {
    NEED_INIT();
    DEV_OF(h);
    *n = (unsigned)sim_cfg[idx].sm_count * 64u;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned int *n,
                                                             nvmlProcessInfo_t *infos) {
    NEED_INIT();
    DEV_OF(h);
    if (!n) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned found = 0;
    for (int i = 0; i < SIM_MAX_SLOTS; i++) {
        uint64_t used = atomic_load(&sim_state->slots[i].used[sim_host[idx]]);
        /* Live processes only, as the driver lists them, by host pid */
        uint32_t pid = used && sim_slot_alive(i) ? sim_slot_pid(i) : 0;
        if (!pid || !used) continue;
        if (infos && found < *n)
            infos[found] = (nvmlProcessInfo_t){.pid = pid, .usedGpuMemory = used,
                                               .gpuInstanceId = 0xFFFFFFFFu,
                                               .computeInstanceId = 0xFFFFFFFFu};
        found++;
    }
    nvmlReturn_t r = (infos && found <= *n) || found == 0 ? NVML_SUCCESS
                                                          : NVML_ERROR_INSUFFICIENT_SIZE;
    *n = found;
    return r;
}

/* Per-process utilisation with NVML's signature: one sample per process that ran kernels on
 * the device, newer than lastSeenTimeStamp (CLOCK_REALTIME µs), smUtil in percent over the
 * sample (at least 100 ms; simstate.c). Asked with utilization NULL (or too small a count):
 * NVML_ERROR_INSUFFICIENT_SIZE and the count needed. Pids are host pids, as for memory. */
SIM_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h,
                                                     nvmlProcessUtilizationSample_t *utilization,
                                                     unsigned int *processSamplesCount,
                                                     unsigned long long lastSeenTimeStamp) {
    NEED_INIT();
    DEV_OF(h);
    if (!processSamplesCount) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned found = 0;
    for (int i = 0; i < SIM_MAX_SLOTS; i++) {
        if (!atomic_load(&sim_state->slots[i].pid)) continue;
        uint64_t at = 0;
        int pct = sim_proc_utilisation(i, idx, &at);
        if (pct < 0 || at <= lastSeenTimeStamp) continue;
        uint32_t pid = sim_slot_pid(i);
        if (!pid) continue;
        if (utilization && found < *processSamplesCount)
            utilization[found] = (nvmlProcessUtilizationSample_t){
                .pid = pid, .timeStamp = at, .smUtil = (unsigned)pct};
        found++;
    }
    /* As NVML: no sample newer than lastSeenTimeStamp is NVML_ERROR_NOT_FOUND. */
    nvmlReturn_t r = found == 0                                          ? NVML_ERROR_NOT_FOUND
                     : (utilization && found <= *processSamplesCount) ? NVML_SUCCESS
                                                                       : NVML_ERROR_INSUFFICIENT_SIZE;
    *processSamplesCount = found;
    return r;
}
