/* Internals of the SIMULATED libcuda.so.1 (simgpu). */
#ifndef SIMCUDA_H
#define SIMCUDA_H

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdint.h>

#include "simstate.h"

#define SIM_API __attribute__((visibility("default")))

struct CUctx_st {
    int dev;
    int primary;
    _Atomic uint64_t tail; /* end of the latest work queued from this context */
    size_t limits[5];      /* cuCtxSetLimit values (0: the default), see simcuda_share.c */
    uint64_t limit_bytes;  /* device memory those limits reserve beyond the defaults */
};

struct CUevent_st {
    _Atomic uint64_t time; /* ns; 0 = never recorded */
    struct CUstream_st *stream;
    uint64_t seq;          /* stream op count when recorded */
    uint64_t recorded;     /* host time of the record call */
    int movable;           /* recorded on an idle stream: may still move to the next start */
};

struct CUstream_st {
    struct CUctx_st *ctx;
    CUgraph capture; /* the graph being captured into, or NULL */
    _Atomic uint64_t tail;
    _Atomic uint64_t ops;
    struct CUevent_st *_Atomic last_event;
};

struct CUfunc_st {
    char name[128];
};

struct CUmod_st {
    int loaded;
};

struct CUgraphExec_st {
    uint64_t dur;
    uint64_t bytes[SIM_MAX_DEV]; /* what its allocation nodes take from the graph memory pool */
    int mapped;                  /* backed (uploaded or launched) and not yet destroyed */
};

struct CUmemPoolHandle_st {
    int dev;
    int host; /* located in host memory: takes no device memory */
    uint64_t reserved, in_use, threshold;
};

struct CUarray_st {
    int dev;
    uint64_t bytes;
    void *mem;
};

struct CUmipmappedArray_st {
    int dev;
    uint64_t bytes;
};

extern __thread struct CUctx_st *sim_cur __attribute__((tls_model("initial-exec")));
/* A context goes away (destroy, primary release to zero, reset): what its limits reserved
 * goes back to the card and they return to their defaults (simcuda_share.c). */
void sim_ctx_limits_drop(struct CUctx_st *c);
int sim_ready(void);
struct CUstream_st *sim_stream(CUstream s);
CUresult sim_check_ctx(void);

/* Host-backed device memory (simcuda_mem.c). */
void *sim_host_map(uint64_t size);
void sim_host_unmap(void *p, uint64_t size);
/* Size and device of the live allocation starting at p (cuMemAlloc family); 0, or -1. */
int sim_alloc_size(uint64_t p, uint64_t *size, int *dev);
/* Run a "kernel" on stream s (simcuda.c); on a capturing stream it becomes a kernel node. */
CUresult sim_run_kernel(CUstream s, void **params);
/* Stream capture (simcuda_graph.c): an async allocation or free on a capturing stream becomes
 * a memory node of the captured graph, as in a real driver; nothing is taken until launch. */
CUresult sim_capture_alloc(struct CUstream_st *st, CUdeviceptr *dptr, size_t size, int dev);
CUresult sim_capture_free(struct CUstream_st *st, CUdeviceptr p);
void sim_capture_kernel(struct CUstream_st *st, uint64_t dur);

#endif
