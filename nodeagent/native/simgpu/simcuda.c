/*
 * SIMULATED libcuda.so.1: init, devices, contexts, streams, events, modules and launches.
 * A "kernel" occupies its device for the number of nanoseconds passed as its first parameter
 * (a uint64_t), on one FIFO timeline per device shared by every process through the state
 * file. Events take the time their stream reaches them, as on a real GPU.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simcuda.h"

/* Initial-exec TLS, as a real driver's current context is a plain thread-local read: the
 * interception core asks for it on every launch, and so its cost is the driver's, not a
 * stand-in's dynamic TLS lookup. */
__thread struct CUctx_st *sim_cur __attribute__((tls_model("initial-exec")));
static int inited;
static struct CUctx_st primary[SIM_MAX_DEV];
static int primary_refs[SIM_MAX_DEV];
static struct CUstream_st default_stream[SIM_MAX_DEV];
static __thread struct CUstream_st thread_stream[SIM_MAX_DEV];

int sim_ready(void) { return inited; }

CUresult sim_check_ctx(void) {
    if (!inited) return CUDA_ERROR_NOT_INITIALIZED;
    return sim_cur ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

struct CUstream_st *sim_stream(CUstream s) {
    if (!sim_cur) return NULL;
    if (s == CU_STREAM_PER_THREAD) {
        struct CUstream_st *t = &thread_stream[sim_cur->dev];
        t->ctx = sim_cur;
        return t;
    }
    if (s == NULL || s == CU_STREAM_LEGACY) {
        struct CUstream_st *d = &default_stream[sim_cur->dev];
        d->ctx = sim_cur;
        return d;
    }
    return (struct CUstream_st *)s;
}

SIM_API CUresult cuInit(unsigned int flags) {
    (void)flags;
    if (sim_init() != 0) return CUDA_ERROR_NO_DEVICE;
    for (int i = 0; i < sim_ndev; i++) primary[i].dev = i, primary[i].primary = 1;
    inited = 1;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = CUDA_VERSION;
    return CUDA_SUCCESS;
}

#define NEED_INIT()                                                                            \
    do {                                                                                       \
        if (!inited) return CUDA_ERROR_NOT_INITIALIZED;                                        \
    } while (0)
#define VALID_DEV(d)                                                                           \
    do {                                                                                       \
        if ((d) < 0 || (d) >= sim_ndev) return CUDA_ERROR_INVALID_DEVICE;                      \
    } while (0)

SIM_API CUresult cuDeviceGetCount(int *n) {
    NEED_INIT();
    *n = sim_ndev;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    NEED_INIT();
    VALID_DEV(ordinal);
    *d = ordinal;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    NEED_INIT();
    VALID_DEV(d);
    snprintf(name, (size_t)len, "%s", sim_cfg[d].name);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) {
    NEED_INIT();
    VALID_DEV(d);
    memcpy(u->bytes, sim_cfg[d].uuid_bytes, 16);
    return CUDA_SUCCESS;
}
SIM_API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) __attribute__((alias("cuDeviceGetUuid")));

SIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    NEED_INIT();
    VALID_DEV(d);
    *bytes = sim_cfg[d].memory_bytes;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice d) {
    NEED_INIT();
    VALID_DEV(d);
    *major = sim_cfg[d].cc_major;
    *minor = sim_cfg[d].cc_minor;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
    NEED_INIT();
    VALID_DEV(d);
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = sim_cfg[d].cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = sim_cfg[d].cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = sim_cfg[d].sm_count; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1380000; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = d + 1; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: *v = 32; break;
    default: *v = 0; break;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d) {
    NEED_INIT();
    VALID_DEV(d);
    snprintf(id, (size_t)len, "00000000:%02X:00.0", d + 1);
    return CUDA_SUCCESS;
}

/* ---- Contexts: each one holds context_mib of device memory, as a real context does. */

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice d) {
    NEED_INIT();
    VALID_DEV(d);
    if (primary_refs[d] == 0 && sim_mem_take(d, sim_cfg[d].context_bytes) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    primary_refs[d]++;
    *pctx = &primary[d];
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    NEED_INIT();
    VALID_DEV(d);
    if (primary_refs[d] == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--primary_refs[d] == 0) {
        sim_mem_give(d, sim_cfg[d].context_bytes);
        sim_ctx_limits_drop(&primary[d]);
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
    NEED_INIT();
    VALID_DEV(d);
    if (primary_refs[d] > 0) sim_mem_give(d, sim_cfg[d].context_bytes);
    sim_ctx_limits_drop(&primary[d]);
    primary_refs[d] = 0;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active) {
    NEED_INIT();
    VALID_DEV(d);
    *flags = 0;
    *active = primary_refs[d] > 0;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice d, unsigned int flags) {
    (void)flags;
    NEED_INIT();
    VALID_DEV(d);
    return CUDA_SUCCESS;
}

/* Destroyed contexts are kept for reuse, so a new context (of any device) gets the address
 * of the last one destroyed, as a real driver's allocator may hand it out: tests show the core
 * does not mistake the new context for the old one. */
static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st *ctx_free[64];
static int nctx_free;

static struct CUctx_st *ctx_new(void) {
    pthread_mutex_lock(&ctx_mu);
    struct CUctx_st *c = nctx_free ? ctx_free[--nctx_free] : NULL;
    pthread_mutex_unlock(&ctx_mu);
    if (c) memset(c, 0, sizeof *c);
    return c ? c : calloc(1, sizeof *c);
}

static void ctx_delete(struct CUctx_st *c) {
    pthread_mutex_lock(&ctx_mu);
    if (nctx_free < 64) ctx_free[nctx_free++] = c, c = NULL;
    pthread_mutex_unlock(&ctx_mu);
    free(c);
}

SIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice d) {
    (void)flags;
    NEED_INIT();
    VALID_DEV(d);
    struct CUctx_st *c = ctx_new();
    if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
    if (sim_mem_take(d, sim_cfg[d].context_bytes) != 0) {
        ctx_delete(c);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->dev = d;
    sim_cur = c;
    *pctx = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxDestroy_v2(CUcontext c) {
    NEED_INIT();
    if (!c || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
    sim_sleep_until(atomic_load(&c->tail));
    sim_mem_give(c->dev, sim_cfg[c->dev].context_bytes);
    sim_ctx_limits_drop(c);
    if (sim_cur == c) sim_cur = NULL;
    ctx_delete(c);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext c) {
    NEED_INIT();
    sim_cur = c;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetCurrent(CUcontext *c) {
    NEED_INIT();
    *c = sim_cur;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext c) { return cuCtxSetCurrent(c); }

SIM_API CUresult cuCtxPopCurrent_v2(CUcontext *c) {
    NEED_INIT();
    if (c) *c = sim_cur;
    sim_cur = NULL;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice(CUdevice *d) {
    CUresult r = sim_check_ctx();
    if (r == CUDA_SUCCESS) *d = sim_cur->dev;
    return r;
}

SIM_API CUresult cuCtxSynchronize(void) {
    CUresult r = sim_check_ctx();
    if (r == CUDA_SUCCESS) sim_sleep_until(atomic_load(&sim_cur->tail));
    return r;
}

/* ---- Streams and events. */

SIM_API CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
    (void)flags;
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    struct CUstream_st *st = calloc(1, sizeof *st);
    if (!st) return CUDA_ERROR_OUT_OF_MEMORY;
    st->ctx = sim_cur;
    *s = st;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetCtx(CUstream s, CUcontext *pctx) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = sim_stream(s)->ctx;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetDevice(CUstream s, CUdevice *dev) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *st = sim_stream(s);
    *dev = st->ctx ? st->ctx->dev : sim_cur->dev;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamDestroy_v2(CUstream s) {
    if (!s) return CUDA_ERROR_INVALID_HANDLE;
    sim_sleep_until(atomic_load(&s->tail));
    free(s);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamSynchronize(CUstream s) {
    CUresult r = sim_check_ctx();
    if (r == CUDA_SUCCESS) sim_sleep_until(atomic_load(&sim_stream(s)->tail));
    return r;
}
SIM_API CUresult cuStreamSynchronize_ptsz(CUstream s) {
    return cuStreamSynchronize(s ? s : CU_STREAM_PER_THREAD);
}

SIM_API CUresult cuStreamQuery(CUstream s) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    return sim_now() >= atomic_load(&sim_stream(s)->tail) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIM_API CUresult cuEventCreate(CUevent *e, unsigned int flags) {
    (void)flags;
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    *e = calloc(1, sizeof **e);
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult cuEventDestroy_v2(CUevent e) {
    free(e);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuEventRecord(CUevent e, CUstream s) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    struct CUstream_st *st = sim_stream(s);
    uint64_t now = sim_now(), tail = atomic_load(&st->tail);
    /* On a busy stream the event completes when the stream's last op ends. On an idle one it is
     * provisional: a kernel submitted right after it (as a timing pair does) moves it to the
     * kernel's start, so time spent queued behind other processes' work is not counted. */
    atomic_store(&e->time, tail > now ? tail : now);
    e->stream = st;
    e->seq = atomic_load(&st->ops);
    e->recorded = now;
    e->movable = tail <= now;
    atomic_store(&st->last_event, e);
    return CUDA_SUCCESS;
}
SIM_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) {
    return cuEventRecord(e, s ? s : CU_STREAM_PER_THREAD);
}

SIM_API CUresult cuEventQuery(CUevent e) {
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    uint64_t t = atomic_load(&e->time);
    return sim_now() >= t ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIM_API CUresult cuEventSynchronize(CUevent e) {
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    sim_sleep_until(atomic_load(&e->time));
    return CUDA_SUCCESS;
}

SIM_API CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
    if (!a || !b || !ms) return CUDA_ERROR_INVALID_HANDLE;
    uint64_t ta = atomic_load(&a->time), tb = atomic_load(&b->time), now = sim_now();
    if (!ta || !tb) return CUDA_ERROR_INVALID_HANDLE;
    if (now < ta || now < tb) return CUDA_ERROR_NOT_READY;
    *ms = (float)(((double)tb - (double)ta) / 1e6);
    return CUDA_SUCCESS;
}

/* ---- Modules and functions: stubs that name functions; the code is never run. */

SIM_API CUresult cuModuleLoad(CUmodule *m, const char *fname) {
    (void)fname;
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    *m = calloc(1, sizeof **m);
    return *m ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    return cuModuleLoad(m, (const char *)image);
}

SIM_API CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n,
                                    CUjit_option *o, void **v) {
    (void)n, (void)o, (void)v;
    return cuModuleLoad(m, (const char *)image);
}

SIM_API CUresult cuModuleUnload(CUmodule m) {
    free(m);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    if (!m || !name) return CUDA_ERROR_INVALID_HANDLE;
    struct CUfunc_st *fn = calloc(1, sizeof *fn);
    if (!fn) return CUDA_ERROR_OUT_OF_MEMORY;
    snprintf(fn->name, sizeof fn->name, "%s", name);
    *f = fn;
    return CUDA_SUCCESS;
}

/* ---- Launches. */

CUresult sim_run_kernel(CUstream s, void **params) {
    /* Like a real driver launching a CUkernel, an explicit stream carries its own context:
     * no context needs to be current. The default streams need one. */
    int explicit_stream = s && s != CU_STREAM_LEGACY && s != CU_STREAM_PER_THREAD;
    if (!explicit_stream) {
        CUresult r = sim_check_ctx();
        if (r != CUDA_SUCCESS) return r;
    } else if (!inited) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    struct CUstream_st *st = explicit_stream ? (struct CUstream_st *)s : sim_stream(s);
    struct CUctx_st *ctx = st->ctx;
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t dur = (params && params[0]) ? *(const uint64_t *)params[0] : 1000;
    if (st->capture) {
        sim_capture_kernel(st, dur);
        return CUDA_SUCCESS;
    }
    uint64_t end, start = sim_run(ctx->dev, atomic_load(&st->tail), dur, &end);
    struct CUevent_st *e = atomic_load(&st->last_event);
    if (e && e->stream == st && e->movable && e->seq == atomic_load(&st->ops) &&
        sim_now() - e->recorded < 20000)
        atomic_store(&e->time, start);
    atomic_fetch_add(&st->ops, 1);
    atomic_store(&st->tail, end);
    uint64_t t = atomic_load(&ctx->tail);
    while (t < end && !atomic_compare_exchange_weak(&ctx->tail, &t, end)) {
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int shmem, CUstream s, void **params, void **extra) {
    (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shmem, (void)extra;
    if (!f) return CUDA_ERROR_INVALID_HANDLE;
    return sim_run_kernel(s, params);
}

SIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                     unsigned int gz, unsigned int bx, unsigned int by,
                                     unsigned int bz, unsigned int shmem, CUstream s,
                                     void **params, void **extra) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s ? s : CU_STREAM_PER_THREAD, params,
                          extra);
}

SIM_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                           unsigned int gz, unsigned int bx, unsigned int by,
                                           unsigned int bz, unsigned int shmem, CUstream s,
                                           void **params) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s, params, NULL);
}

SIM_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                unsigned int gz, unsigned int bx, unsigned int by,
                                                unsigned int bz, unsigned int shmem, CUstream s,
                                                void **params) {
    return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, s ? s : CU_STREAM_PER_THREAD, params,
                          NULL);
}

SIM_API CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params,
                                  void **extra) {
    (void)extra;
    if (!c || !f) return CUDA_ERROR_INVALID_VALUE;
    return sim_run_kernel(c->hStream, params);
}

SIM_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params,
                                       void **extra) {
    (void)extra;
    if (!c || !f) return CUDA_ERROR_INVALID_VALUE;
    return sim_run_kernel(c->hStream ? c->hStream : CU_STREAM_PER_THREAD, params);
}

/* ---- Errors and run-time symbol lookup. */

SIM_API CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = e == CUDA_SUCCESS              ? "no error"
         : e == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory (simgpu)"
                                         : "simgpu error";
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGetErrorName(CUresult e, const char **s) {
    *s = e == CUDA_SUCCESS ? "CUDA_SUCCESS"
         : e == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY"
                                         : "CUDA_ERROR_UNKNOWN";
    return CUDA_SUCCESS;
}

static void *self_handle(void) {
    static void *h;
    if (!h) {
        Dl_info info;
        if (dladdr((void *)&self_handle, &info) && info.dli_fname)
            h = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    }
    return h;
}

/* Entry points with several ABI versions: the one a caller gets depends on the cudaVersion it
 * was built for, as with a real driver (versions from cudaTypedefs.h). */
static const struct {
    const char *base, *suffix;
    int since;
} versioned[] = {
    {"cuMemAlloc", "_v2", 3020},         {"cuMemAlloc", "", 2000},
    {"cuMemAllocPitch", "_v2", 3020},    {"cuMemAllocPitch", "", 2000},
    {"cuMemFree", "_v2", 3020},          {"cuMemFree", "", 2000},
    {"cuMemGetInfo", "_v2", 3020},       {"cuMemGetInfo", "", 2000},
    {"cuDeviceTotalMem", "_v2", 3020},   {"cuDeviceTotalMem", "", 2000},
    {"cuArrayCreate", "_v2", 3020},      {"cuArrayCreate", "", 2000},
    {"cuArray3DCreate", "_v2", 3020},    {"cuArray3DCreate", "", 2000},
    {"cuCtxCreate", "_v4", 12050},       {"cuCtxCreate", "_v3", 11040},
    {"cuCtxCreate", "_v2", 3020},        {"cuCtxCreate", "", 2000},
    {"cuCtxDestroy", "_v2", 4000},       {"cuCtxDestroy", "", 2000},
    {"cuDevicePrimaryCtxRelease", "_v2", 11000}, {"cuDevicePrimaryCtxRelease", "", 7000},
    {"cuDevicePrimaryCtxReset", "_v2", 11000},   {"cuDevicePrimaryCtxReset", "", 7000},
    {"cuGraphAddNode", "_v2", 12030},    {"cuGraphAddNode", "", 12020},
    /* As a real driver: CUDA 12 answers the old name with the entry point that took its place. */
    {"cuGraphInstantiate", "WithFlags", 12000}, {"cuGraphInstantiate", "_v2", 11000},
    {"cuGraphInstantiate", "", 10000},
    {"cuGetProcAddress", "_v2", 12000},  {"cuGetProcAddress", "", 11030},
};

SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    void *h = self_handle();
    *pfn = NULL;
    int listed = 0;
    for (size_t i = 0; i < sizeof versioned / sizeof versioned[0] && !*pfn; i++) {
        if (strcmp(versioned[i].base, symbol) != 0) continue;
        listed = 1;
        if (cudaVersion < versioned[i].since) continue;
        char name[160];
        snprintf(name, sizeof name, "%s%s", symbol, versioned[i].suffix);
        *pfn = h ? dlsym(h, name) : NULL;
    }
    const char *suffixes[] = {"_ptsz", "_ptds", "_v4", "_v3", "_v2", ""};
    int first = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? 0 : 2;
    for (int i = first; i < 6 && !*pfn && !listed; i++) {
        char name[160];
        snprintf(name, sizeof name, "%s%s", symbol, suffixes[i]);
        *pfn = h ? dlsym(h, name) : NULL;
    }
    if (status)
        *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                  cuuint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
