/*
 * The pre-3.2 (v1) memory queries, cuMemGetInfo and cuDeviceTotalMem, answered from their _v2
 * calls and clamped to 32 bits. One body, included by the interception core (whose _v2 calls
 * report the slice view) and by simgpu (whose _v2 calls report the simulated card), so the two
 * narrow the same way. Each includer exports its own cuMemGetInfo/cuDeviceTotalMem calling these.
 */
#ifndef TRANCHE_LEGACY32_H
#define TRANCHE_LEGACY32_H

#include <cuda.h> /* includers define __CUDA_API_VERSION_INTERNAL first */
#include <limits.h>
#include <stddef.h>

static inline unsigned int tr_clamp32(size_t v) {
    return v > UINT_MAX ? UINT_MAX : (unsigned int)v;
}

static inline CUresult tr_legacy_mem_get_info(unsigned int *free, unsigned int *total) {
    size_t f = 0, t = 0;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS) {
        if (free) *free = tr_clamp32(f);
        if (total) *total = tr_clamp32(t);
    }
    return r;
}

static inline CUresult tr_legacy_device_total_mem(unsigned int *bytes, CUdevice dev) {
    size_t b = 0;
    CUresult r = cuDeviceTotalMem_v2(&b, dev);
    if (r == CUDA_SUCCESS && bytes) *bytes = tr_clamp32(b);
    return r;
}

#endif
