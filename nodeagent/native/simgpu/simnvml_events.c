/*
 * SIMULATED NVML events (simgpu): nvmlEventSetCreate / nvmlDeviceRegisterEvents /
 * nvmlDeviceGetSupportedEventTypes / nvmlEventSetWait(_v2) / nvmlEventSetFree with NVML's own
 * signatures, so pynvml's calls work unchanged. The events are the ones simgpu-fault raised in
 * the shared state's ring (XID critical errors, single/double-bit ECC errors); a set sees the
 * events raised after it was created, on the devices and types registered, in order.
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "simnvml.h"

#define SIM_EVENT_TYPES                                                                        \
    (nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError |                          \
     nvmlEventTypeDoubleBitEccError)

struct nvmlEventSet_st {
    unsigned long long types[SIM_MAX_DEV]; /* registered types per visible ordinal */
    uint64_t next;                         /* the next event number this set delivers */
};

SIM_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    NEED_INIT();
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (!s) return NVML_ERROR_MEMORY;
    s->next = atomic_load(&sim_faults->published);
    *set = s;
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t h, unsigned long long *types) {
    NEED_INIT();
    DEV_OF(h);
    if (!types) return NVML_ERROR_INVALID_ARGUMENT;
    *types = SIM_EVENT_TYPES;
    return NVML_SUCCESS;
}

/* As NVML: a type the device cannot report refuses the whole registration. */
SIM_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t h, unsigned long long types,
                                              nvmlEventSet_t set) {
    NEED_INIT();
    DEV_OF(h);
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~(unsigned long long)SIM_EVENT_TYPES) return NVML_ERROR_NOT_SUPPORTED;
    set->types[idx] |= types;
    return NVML_SUCCESS;
}

/* The visible ordinal of host device `host` in this process; -1 if it is not visible. */
static int visible(uint32_t host) {
    for (int i = 0; i < sim_ndev; i++)
        if ((uint32_t)sim_host[i] == host) return i;
    return -1;
}

/* The next event for `set`, if one was raised; 1 when `data` was filled. */
static int take(nvmlEventSet_t set, nvmlEventData_t *data) {
    uint64_t published = atomic_load(&sim_faults->published);
    if (published - set->next > SIM_EVENT_RING) set->next = published - SIM_EVENT_RING;
    for (; set->next < published; set->next++) {
        sim_event_t e = sim_faults->ring[set->next % SIM_EVENT_RING];
        int idx = visible(e.dev);
        if (idx < 0 || !(set->types[idx] & e.type)) continue;
        *data = (nvmlEventData_t){.device = &sim_nvml_handles[idx], .eventType = e.type,
                                  .eventData = e.data, .gpuInstanceId = 0xFFFFFFFFu,
                                  .computeInstanceId = 0xFFFFFFFFu};
        set->next++;
        return 1;
    }
    return 0;
}

SIM_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                         unsigned int timeoutms) {
    NEED_INIT();
    if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t deadline = sim_now() + (uint64_t)timeoutms * 1000000ull;
    for (;;) {
        /* Read before looking: an event raised after this wakes (or skips) the wait below. */
        uint32_t seen = (uint32_t)atomic_load(&sim_faults->published);
        if (take(set, data)) return NVML_SUCCESS;
        uint64_t now = sim_now();
        if (now >= deadline) return NVML_ERROR_TIMEOUT;
        sim_wait_event(seen, deadline - now);
    }
}

SIM_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data,
                                      unsigned int timeoutms) {
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

SIM_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    NEED_INIT();
    free(set);
    return NVML_SUCCESS;
}
