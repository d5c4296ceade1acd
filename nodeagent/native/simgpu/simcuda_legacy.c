/*
 * SIMULATED legacy and newer entry points that a real driver still exports: the pre-3.2 (v1)
 * memory and context calls with 32-bit sizes and pointers and cuCtxCreate_v3/_v4. Like a real driver they take device memory for real, so a test that
 * reaches them around the interception core sees the memory really leave the card. v1 device
 * pointers are the low 32 bits of simgpu's host-backed addresses: the memory is held, the
 * pointer is not usable (no program built since CUDA 3.2 uses these entry points). Also here:
 * green contexts, which take device memory outside the ordinary allocation calls. Graphs,
 * stream capture and graph memory are in simcuda_graph.c.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "simcuda.h"
#include "legacy32.h"

SIM_API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) {
    CUdeviceptr p;
    CUresult r = cuMemAlloc_v2(&p, bytesize);
    if (r == CUDA_SUCCESS && dptr) *dptr = (CUdeviceptr_v1)p;
    return r;
}

SIM_API CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch, unsigned int w,
                                 unsigned int h, unsigned int elem) {
    CUdeviceptr p;
    size_t pitch = 0;
    CUresult r = cuMemAllocPitch_v2(&p, &pitch, w, h, elem);
    if (r == CUDA_SUCCESS) {
        if (dptr) *dptr = (CUdeviceptr_v1)p;
        if (pPitch) *pPitch = tr_clamp32(pitch);
    }
    return r;
}

/* A truncated pointer names no allocation: refused like a real driver refuses a bad one. */
SIM_API CUresult cuMemFree(CUdeviceptr_v1 dptr) { return cuMemFree_v2((CUdeviceptr)dptr); }

SIM_API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total) {
    return tr_legacy_mem_get_info(free, total);
}

SIM_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    return tr_legacy_device_total_mem(bytes, dev);
}

SIM_API CUresult cuArrayCreate(CUarray *h, const CUDA_ARRAY_DESCRIPTOR_v1 *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY_DESCRIPTOR d2 = {d->Width, d->Height, d->Format, d->NumChannels};
    return cuArrayCreate_v2(h, &d2);
}

SIM_API CUresult cuArray3DCreate(CUarray *h, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d2 = {d->Width, d->Height, d->Depth, d->Format, d->NumChannels,
                                  d->Flags};
    return cuArray3DCreate_v2(h, &d2);
}

SIM_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    return cuCtxCreate_v2(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n,
                                unsigned int flags, CUdevice dev) {
    if (n < 0 || (n > 0 && !params)) return CUDA_ERROR_INVALID_VALUE;
    return cuCtxCreate_v2(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                                CUdevice dev) {
    (void)params; /* NULL is allowed: a plain context */
    return cuCtxCreate_v2(pctx, flags, dev);
}

SIM_API CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }
SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    return cuDevicePrimaryCtxRelease_v2(dev);
}
SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

/* ---- Green contexts (CUDA 12.4+): a context over a share of the SMs. Like a real one it
 * holds context memory of its own on the device; the SM split itself is not simulated. */

struct CUdevResourceDesc_st {
    unsigned int sm_count;
};

struct CUgreenCtx_st {
    struct CUctx_st ctx;
};

SIM_API CUresult cuDeviceGetDevResource(CUdevice dev, CUdevResource *res, CUdevResourceType type) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= sim_ndev) return CUDA_ERROR_INVALID_DEVICE;
    if (!res || type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_VALUE;
    memset(res, 0, sizeof *res);
    res->type = type;
    res->sm.smCount = (unsigned int)sim_cfg[dev].sm_count;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *desc, CUdevResource *res,
                                           unsigned int n) {
    if (!desc || !res || n == 0) return CUDA_ERROR_INVALID_VALUE;
    struct CUdevResourceDesc_st *d = calloc(1, sizeof *d);
    if (!d) return CUDA_ERROR_OUT_OF_MEMORY;
    for (unsigned int i = 0; i < n; i++) d->sm_count += res[i].sm.smCount;
    *desc = d;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
                                  unsigned int flags) {
    (void)flags;
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= sim_ndev) return CUDA_ERROR_INVALID_DEVICE;
    if (!phCtx || !desc) return CUDA_ERROR_INVALID_VALUE;
    struct CUgreenCtx_st *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    if (sim_mem_take(dev, sim_cfg[dev].context_bytes) != 0) {
        free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    g->ctx.dev = dev;
    *phCtx = g;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGreenCtxDestroy(CUgreenCtx g) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!g) return CUDA_ERROR_INVALID_HANDLE;
    sim_sleep_until(atomic_load(&g->ctx.tail));
    sim_mem_give(g->ctx.dev, sim_cfg[g->ctx.dev].context_bytes);
    sim_ctx_limits_drop(&g->ctx);
    free(g);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxFromGreenCtx(CUcontext *pctx, CUgreenCtx g) {
    if (!pctx || !g) return CUDA_ERROR_INVALID_VALUE;
    *pctx = &g->ctx;
    return CUDA_SUCCESS;
}
