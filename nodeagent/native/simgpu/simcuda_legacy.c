/*
 * SIMULATED legacy and newer entry points that a real driver still exports: the pre-3.2 (v1)
 * memory and context calls with 32-bit sizes and pointers, cuCtxCreate_v3/_v4, and graph
 * memory-allocation nodes. Like a real driver they take device memory for real, so a test that
 * reaches them around the interception core sees the memory really leave the card. v1 device
 * pointers are the low 32 bits of simgpu's host-backed addresses: the memory is held, the
 * pointer is not usable (no program built since CUDA 3.2 uses these entry points). Also here:
 * stream capture (an async allocation while capturing becomes a graph memory node) and green
 * contexts, both of which take device memory outside the ordinary allocation calls.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "simcuda.h"

static unsigned int clamp32(size_t v) { return v > UINT_MAX ? UINT_MAX : (unsigned int)v; }

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
        if (pPitch) *pPitch = clamp32(pitch);
    }
    return r;
}

/* A truncated pointer names no allocation: refused like a real driver refuses a bad one. */
SIM_API CUresult cuMemFree(CUdeviceptr_v1 dptr) { return cuMemFree_v2((CUdeviceptr)dptr); }

SIM_API CUresult cuMemGetInfo(unsigned int *free, unsigned int *total) {
    size_t f = 0, t = 0;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS) {
        if (free) *free = clamp32(f);
        if (total) *total = clamp32(t);
    }
    return r;
}

SIM_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    size_t b = 0;
    CUresult r = cuDeviceTotalMem_v2(&b, dev);
    if (r == CUDA_SUCCESS && bytes) *bytes = clamp32(b);
    return r;
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

/* ---- Graph memory nodes: a real driver backs them with device memory from the graph memory
 * pool. simgpu takes it when the node is added and gives it back when the graph is destroyed. */

struct sim_graph {
    _Atomic uint64_t alloc_bytes;
    int dev;
};

static CUresult add_alloc_node(CUgraphNode *node, CUgraph g, CUDA_MEM_ALLOC_NODE_PARAMS *p) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!node || !g || !p || p->bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    int dev = p->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE
                  ? p->poolProps.location.id
                  : sim_cur->dev;
    if (dev < 0 || dev >= sim_ndev) return CUDA_ERROR_INVALID_DEVICE;
    if (sim_mem_take(dev, p->bytesize) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    void *mem = sim_host_map(p->bytesize);
    if (!mem) {
        sim_mem_give(dev, p->bytesize);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    struct sim_graph *sg = (struct sim_graph *)g;
    sg->dev = dev;
    atomic_fetch_add(&sg->alloc_bytes, p->bytesize);
    p->dptr = (CUdeviceptr)(uintptr_t)mem;
    *node = (CUgraphNode)calloc(1, 16);
    return *node ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                        size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *p) {
    (void)deps, (void)ndeps;
    return add_alloc_node(node, g, p);
}

static CUresult add_node(CUgraphNode *node, CUgraph g, CUgraphNodeParams *p) {
    if (!node || !g || !p) return CUDA_ERROR_INVALID_VALUE;
    if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        CUDA_MEM_ALLOC_NODE_PARAMS a = {.poolProps = p->alloc.poolProps,
                                        .bytesize = p->alloc.bytesize};
        CUresult r = add_alloc_node(node, g, &a);
        if (r == CUDA_SUCCESS) p->alloc.dptr = a.dptr;
        return r;
    }
    *node = (CUgraphNode)calloc(1, 16);
    return *node ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                size_t ndeps, CUgraphNodeParams *p) {
    (void)deps, (void)ndeps;
    return add_node(node, g, p);
}

SIM_API CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                   const CUgraphEdgeData *edges, size_t ndeps,
                                   CUgraphNodeParams *p) {
    (void)deps, (void)edges, (void)ndeps;
    return add_node(node, g, p);
}

/* Called by cuGraphDestroy: the graph's allocation nodes give their memory back. */
void sim_graph_release(CUgraph g) {
    struct sim_graph *sg = (struct sim_graph *)g;
    uint64_t b = atomic_exchange(&sg->alloc_bytes, 0);
    if (b) sim_mem_give(sg->dev, b);
}

/* ---- Stream capture: between cuStreamBeginCapture and cuStreamEndCapture nothing runs; an
 * async allocation on the capturing stream becomes a memory-allocation node of the captured
 * graph (taken from the device like the nodes above), and the stream's pool does not grow. */

SIM_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
    (void)mode;
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    /* The legacy and per-thread default streams cannot be captured here. */
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct CUstream_st *st = sim_stream(s);
    if (st->capture) return CUDA_ERROR_ILLEGAL_STATE;
    return cuGraphCreate(&st->capture, 0);
}

SIM_API CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    struct CUstream_st *st = sim_stream(s);
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    if (!st || !st->capture) return CUDA_ERROR_ILLEGAL_STATE;
    *g = st->capture;
    st->capture = NULL;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *st = sim_stream(s);
    *status = st && st->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *status) {
    return cuStreamIsCapturing(s ? s : CU_STREAM_PER_THREAD, status);
}

CUresult sim_capture_alloc(struct CUstream_st *st, CUdeviceptr *dptr, size_t size, int dev) {
    CUgraphNode node;
    CUDA_MEM_ALLOC_NODE_PARAMS p = {0};
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = dev;
    p.bytesize = size;
    CUresult r = add_alloc_node(&node, st->capture, &p);
    if (r == CUDA_SUCCESS && dptr) *dptr = p.dptr;
    return r;
}

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
    free(g);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxFromGreenCtx(CUcontext *pctx, CUgreenCtx g) {
    if (!pctx || !g) return CUDA_ERROR_INVALID_VALUE;
    *pctx = &g->ctx;
    return CUDA_SUCCESS;
}
