/*
 * NVML family: inside the container, nvidia-smi and pynvml see the slice: total = the slice,
 * used = what this container holds, free = the rest. A missing config refuses NVML too.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <string.h>

#include "tranche.h"

static int nvml_dev_index(nvmlDevice_t device) {
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    if (!tr_real[TR_nvmlDeviceGetUUID] ||
        REAL_FN(nvmlDeviceGetUUID)(device, uuid, sizeof uuid) != NVML_SUCCESS)
        return -1;
    return tr_dev_index_by_uuid(uuid);
}

/* Clamped both ways: never more than the card, and free never wraps when used > limit. */
static void slice_view(int idx, unsigned long long *total, unsigned long long *used,
                       unsigned long long *free) {
    uint64_t limit = idx >= 0 ? tr_cfg.devices[idx].memory_bytes : 0;
    if (limit > *total) limit = *total;
    uint64_t u = idx >= 0 ? atomic_load(&tr_region()->devices[idx].mem_used) : 0;
    *total = limit;
    *used = u;
    *free = u < limit ? limit - u : 0;
}

TR_EXPORT nvmlReturn_t nvmlInit_v2(void) {
    if (tr_guard) return REAL_FN(nvmlInit_v2)();
    if (!tr_ready()) return NVML_ERROR_NO_PERMISSION;
    return tr_real[TR_nvmlInit_v2] ? REAL_FN(nvmlInit_v2)() : NVML_ERROR_LIBRARY_NOT_FOUND;
}

TR_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    if (tr_guard) return REAL_FN(nvmlInitWithFlags)(flags);
    if (!tr_ready()) return NVML_ERROR_NO_PERMISSION;
    return tr_real[TR_nvmlInitWithFlags] ? REAL_FN(nvmlInitWithFlags)(flags)
                                         : NVML_ERROR_LIBRARY_NOT_FOUND;
}

TR_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    if (tr_guard) return REAL_FN(nvmlDeviceGetMemoryInfo)(device, memory);
    if (!tr_ready()) return NVML_ERROR_NO_PERMISSION;
    nvmlReturn_t r = REAL_FN(nvmlDeviceGetMemoryInfo)(device, memory);
    if (r == NVML_SUCCESS && memory)
        slice_view(nvml_dev_index(device), &memory->total, &memory->used, &memory->free);
    return r;
}

TR_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    if (tr_guard) return REAL_FN(nvmlDeviceGetMemoryInfo_v2)(device, memory);
    if (!tr_ready()) return NVML_ERROR_NO_PERMISSION;
    nvmlReturn_t r = REAL_FN(nvmlDeviceGetMemoryInfo_v2)(device, memory);
    if (r == NVML_SUCCESS && memory) {
        slice_view(nvml_dev_index(device), &memory->total, &memory->used, &memory->free);
        memory->reserved = 0;
    }
    return r;
}
