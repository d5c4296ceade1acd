/* simgpu's NVML, shared between its files: the device handles and the argument checks. */
#ifndef SIMGPU_NVML_H
#define SIMGPU_NVML_H

#include "simstate.h"

#define SIM_API __attribute__((visibility("default")))

struct nvmlDevice_st {
    int index; /* visible ordinal */
};
extern struct nvmlDevice_st sim_nvml_handles[SIM_MAX_DEV];
extern int sim_nvml_inited;

#define NEED_INIT()                                                                            \
    do {                                                                                       \
        if (!sim_nvml_inited) return NVML_ERROR_UNINITIALIZED;                                 \
    } while (0)
/* A GPU that fell off the bus (SIMULATED: simgpu-fault lose) answers no device query. */
#define DEV_OF(h)                                                                              \
    int idx = (h) ? (h)->index : -1;                                                           \
    if (idx < 0 || idx >= sim_ndev) return NVML_ERROR_INVALID_ARGUMENT;                        \
    if (sim_host_lost(sim_host[idx])) return NVML_ERROR_GPU_IS_LOST

#endif
