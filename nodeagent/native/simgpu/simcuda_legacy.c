/*
 * SIMULATED legacy and newer entry points that a real driver still exports: the pre-3.2 (v1)
 * memory and context calls with 32-bit sizes and pointers, cuCtxCreate_v3/_v4, and graph
 * memory-allocation nodes. Like a real driver they take device memory for real, so a test that
 * reaches them around the interception core sees the memory really leave the card. v1 device
 * pointers are the low 32 bits of simgpu's host-backed addresses: the memory is held, the
 * pointer is not usable (no program built since CUDA 3.2 uses these entry points).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>

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
