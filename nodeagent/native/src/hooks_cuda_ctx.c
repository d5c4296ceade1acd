/*
 * Context family: a context costs device memory the program never asked for. The charge is
 * the measured growth across the creation, taken once per primary context per process and
 * per explicitly created context: of this process's own use as NVML lists it (exact even
 * while other processes allocate), or, where NVML cannot show our pid (a PID namespace without
 * the host's pids), of the whole device's use. Never less than the device's context floor from
 * the slice config (what a context of that GPU model measured at the node agent's discovery):
 * a measurement can only come out low (another thread freed memory meanwhile, NVML missing),
 * and a context charged less than it holds would let the tenant past the cap.
 *
 * The floor is reserved BEFORE the driver is asked and the measured excess trued up after:
 * charged after the fact, every creator racing against a full slice held a context the books
 * did not show until its refusal (issue #27, items 4 and 6). A context on a device the slice
 * does not list is refused, by every create path, primary and green ones included: the
 * driver would have made it, and launched on it, outside the books.
 */
#include <unistd.h>
#define _GNU_SOURCE
#include <pthread.h>

#include "charge.h"
#include "tranche.h"

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;
static int nvml_ok;
static int primary_refs[64];

static void nvml_init(void) {
    nvml_ok = tr_real[TR_nvmlInit_v2] && REAL_FN(nvmlInit_v2)() == NVML_SUCCESS;
}

typedef struct {
    uint64_t device;  /* the whole device's used bytes */
    uint64_t mine;    /* this process's, if NVML lists it */
    int have_mine;
} usage_t;

static usage_t phys_used(CUdevice dev) {
    usage_t u = {0, 0, 0};
    char uuid[64];
    nvmlDevice_t h;
    nvmlMemory_t m;
    pthread_once(&nvml_once, nvml_init);
    if (!nvml_ok || tr_dev_uuid(dev, uuid, sizeof uuid) != 0 ||
        REAL_FN(nvmlDeviceGetHandleByUUID)(uuid, &h) != NVML_SUCCESS)
        return u;
    if (REAL_FN(nvmlDeviceGetMemoryInfo)(h, &m) == NVML_SUCCESS) u.device = m.used;
    if (tr_real[TR_nvmlDeviceGetComputeRunningProcesses_v3]) {
        nvmlProcessInfo_t infos[64];
        unsigned n = 64;
        if (REAL_FN(nvmlDeviceGetComputeRunningProcesses_v3)(h, &n, infos) == NVML_SUCCESS) {
            for (unsigned i = 0; i < n && i < 64; i++) {
                if (infos[i].pid == tr_self_pid()) {
                    u.mine = infos[i].usedGpuMemory;
                    u.have_mine = 1;
                }
            }
        }
    }
    return u;
}

/* A process not listed before its first context simply had nothing on the device. The floor
 * bounds the charge from below whatever the measurement says. */
static uint64_t growth(usage_t before, usage_t after, int idx) {
    uint64_t g;
    if (after.have_mine) g = after.mine > before.mine ? after.mine - before.mine : 0;
    else g = after.device > before.device ? after.device - before.device : 0;
    uint64_t floor = tr_cfg.devices[idx].context_floor_bytes;
    return g > floor ? g : floor;
}

static uint64_t ctx_floor(int idx) { return tr_cfg.devices[idx].context_floor_bytes; }

/* After the driver made a context charged its floor: charge what it measured beyond that.
 * Returns the whole charge, or 0 when the excess does not fit (the caller destroys the
 * context and gives the floor back). */
static uint64_t true_up(usage_t before, CUdevice dev, int idx) {
    uint64_t delta = growth(before, phys_used(dev), idx);
    uint64_t floor = ctx_floor(idx);
    if (delta > floor && tr_mem_reserve(idx, delta - floor) != 0) return 0;
    return delta;
}

TR_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    if (tr_guard) return REAL_FN(cuDevicePrimaryCtxRetain)(pctx, dev);
    if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    int idx = tr_dev_index(dev); /* -1 too for an ordinal past the table: never passed on */
    if (idx < 0) return CUDA_ERROR_INVALID_DEVICE;
    tr_guard++;
    pthread_mutex_lock(&ctx_mu);
    int first = primary_refs[dev] == 0;
    usage_t before = {0, 0, 0};
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!first || tr_mem_reserve(idx, ctx_floor(idx)) == 0) {
        if (first) before = phys_used(dev);
        r = REAL_FN(cuDevicePrimaryCtxRetain)(pctx, dev);
        if (r == CUDA_SUCCESS) {
            primary_refs[dev]++;
            uint64_t charged = first ? true_up(before, dev, idx) : 0;
            if (first && !charged) {
                REAL_FN(cuDevicePrimaryCtxRelease_v2)(dev);
                tr_ctx_gone();
                primary_refs[dev]--;
                tr_uncharge(idx, ctx_floor(idx));
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else if (first) {
                tr_track_put(TR_K_CTX, (uint64_t)dev, idx, charged);
            }
        } else if (first) {
            tr_uncharge(idx, ctx_floor(idx));
        }
    }
    pthread_mutex_unlock(&ctx_mu);
    tr_guard--;
    return r;
}

TR_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    if (tr_guard || dev < 0 || dev >= 64) return REAL_FN(cuDevicePrimaryCtxRelease_v2)(dev);
    pthread_mutex_lock(&ctx_mu);
    tr_guard++;
    CUresult r = REAL_FN(cuDevicePrimaryCtxRelease_v2)(dev);
    tr_guard--;
    if (r == CUDA_SUCCESS && primary_refs[dev] > 0 && --primary_refs[dev] == 0) {
        tr_ctx_gone();
        int idx;
        uint64_t size;
        if (tr_track_take(TR_K_CTX, (uint64_t)dev, &idx, &size) == 0 && size)
            tr_mem_release(idx, size);
        tr_ctx_limits_forget((uint64_t)dev);
    }
    pthread_mutex_unlock(&ctx_mu);
    return r;
}

/* A reset destroys the primary context whatever its retain count: its footprint goes too. */
TR_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
    if (tr_guard || dev < 0 || dev >= 64) return REAL_FN(cuDevicePrimaryCtxReset_v2)(dev);
    pthread_mutex_lock(&ctx_mu);
    tr_guard++;
    CUresult r = REAL_FN(cuDevicePrimaryCtxReset_v2)(dev);
    tr_guard--;
    if (r == CUDA_SUCCESS) tr_ctx_gone();
    if (r == CUDA_SUCCESS && primary_refs[dev] > 0) {
        int idx;
        uint64_t size;
        primary_refs[dev] = 0;
        if (tr_track_take(TR_K_CTX, (uint64_t)dev, &idx, &size) == 0 && size)
            tr_mem_release(idx, size);
        tr_ctx_limits_forget((uint64_t)dev);
    }
    pthread_mutex_unlock(&ctx_mu);
    return r;
}

/* Every way to create a context: cuCtxCreate_v2/_v3/_v4 and green contexts (CUDA 12.4+, a
 * context over a share of the SMs). They differ only in what they pass through, the handle type
 * and how the handle is destroyed. Green contexts also bring up the device's primary context
 * if it is not up yet (dropped with them): part of their measured growth. Their launches are
 * metered like any other (a context of the device is current, or the launch is refused). */
enum { CTX_GREEN = 5 };

typedef struct {
    int variant; /* 2, 3, 4 (cuCtxCreate_vN) or CTX_GREEN */
    unsigned int flags;
    CUexecAffinityParam *affinity;
    int naffinity;
    CUctxCreateParams *params;
    CUdevResourceDesc desc;
} ctx_args_t;

static int create_id(int variant) {
    switch (variant) {
    case 3: return TR_cuCtxCreate_v3;
    case 4: return TR_cuCtxCreate_v4;
    case CTX_GREEN: return TR_cuGreenCtxCreate;
    default: return TR_cuCtxCreate_v2;
    }
}

/* `out` is the caller's CUcontext * (or CUgreenCtx * for CTX_GREEN), passed through as is. */
static CUresult real_ctx_create(void *out, const ctx_args_t *a, CUdevice dev) {
    switch (a->variant) {
    case 3:
        return REAL_FN(cuCtxCreate_v3)((CUcontext *)out, a->affinity, a->naffinity, a->flags,
                                       dev);
    case 4: return REAL_FN(cuCtxCreate_v4)((CUcontext *)out, a->params, a->flags, dev);
    case CTX_GREEN: return REAL_FN(cuGreenCtxCreate)((CUgreenCtx *)out, a->desc, dev, a->flags);
    default: return REAL_FN(cuCtxCreate_v2)((CUcontext *)out, a->flags, dev);
    }
}

/* Tracking key of a created handle: explicit contexts and green contexts apart from each other
 * and from primary contexts, which are keyed by device ordinal. */
static uint64_t ctx_key(const void *handle, int green) {
    return (uint64_t)(uintptr_t)handle | (green ? 1ull << 62 : 1ull << 63);
}

static CUresult ctx_create(void *out, const ctx_args_t *a, CUdevice dev) {
    if (tr_guard) return real_ctx_create(out, a, dev);
    if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!tr_real[create_id(a->variant)]) return CUDA_ERROR_NOT_FOUND; /* an older driver */
    int idx = tr_dev_index(dev);
    if (idx < 0) return CUDA_ERROR_INVALID_DEVICE;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    int green = a->variant == CTX_GREEN;
    if (tr_mem_reserve(idx, ctx_floor(idx)) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    tr_guard++;
    pthread_mutex_lock(&ctx_mu);
    usage_t before = phys_used(dev);
    CUresult r = real_ctx_create(out, a, dev);
    if (r == CUDA_SUCCESS) {
        void *handle = green ? (void *)*(CUgreenCtx *)out : (void *)*(CUcontext *)out;
        uint64_t charged = true_up(before, dev, idx);
        if (!charged) {
            if (green) REAL_FN(cuGreenCtxDestroy)((CUgreenCtx)handle);
            else REAL_FN(cuCtxDestroy_v2)((CUcontext)handle);
            tr_ctx_gone();
            tr_uncharge(idx, ctx_floor(idx));
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            tr_track_put(TR_K_CTX, ctx_key(handle, green), idx, charged);
        }
    } else {
        tr_uncharge(idx, ctx_floor(idx));
    }
    pthread_mutex_unlock(&ctx_mu);
    tr_guard--;
    return r;
}

/* Destroy through `destroy`, then give back what creating `handle` was charged. */
static CUresult ctx_destroy(CUresult (*destroy)(void *), void *handle, int green) {
    if (tr_guard) return destroy(handle);
    tr_guard++;
    CUresult r = destroy(handle);
    tr_guard--;
    if (r == CUDA_SUCCESS) tr_ctx_gone();
    int idx;
    uint64_t size;
    if (r == CUDA_SUCCESS && tr_track_take(TR_K_CTX, ctx_key(handle, green), &idx, &size) == 0 &&
        size)
        tr_mem_release(idx, size);
    if (r == CUDA_SUCCESS) tr_ctx_limits_forget(ctx_key(handle, green));
    return r;
}

TR_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    ctx_args_t a = {.variant = 2, .flags = flags};
    return ctx_create(pctx, &a, dev);
}

TR_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
                                  int numParams, unsigned int flags, CUdevice dev) {
    ctx_args_t a = {.variant = 3, .flags = flags, .affinity = paramsArray, .naffinity = numParams};
    return ctx_create(pctx, &a, dev);
}

TR_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                  unsigned int flags, CUdevice dev) {
    ctx_args_t a = {.variant = 4, .flags = flags, .params = ctxCreateParams};
    return ctx_create(pctx, &a, dev);
}

/* The v1 cuCtxCreate (CUDA < 3.2) made contexts for 32-bit device pointers, which nothing here
 * can serve: refused, like the v1 allocators. The v1 release calls have the same signature as
 * their _v2 and only give memory back: they take the charged _v2 path, so the charge goes too. */
TR_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    (void)pctx, (void)flags, (void)dev;
    return CUDA_ERROR_NOT_SUPPORTED;
}

TR_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return cuCtxDestroy_v2(ctx); }

TR_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
    return cuDevicePrimaryCtxRelease_v2(dev);
}

TR_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
    return cuDevicePrimaryCtxReset_v2(dev);
}

static CUresult real_ctx_destroy(void *h) { return REAL_FN(cuCtxDestroy_v2)((CUcontext)h); }

TR_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
    return ctx_destroy(real_ctx_destroy, ctx, 0);
}

TR_EXPORT CUresult cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
                                    unsigned int flags) {
    ctx_args_t a = {.variant = CTX_GREEN, .flags = flags, .desc = desc};
    return ctx_create(phCtx, &a, dev);
}

static CUresult real_green_destroy(void *h) { return REAL_FN(cuGreenCtxDestroy)((CUgreenCtx)h); }

TR_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx hCtx) {
    tr_resolve(); /* reachable before any create: a driver without green contexts */
    if (!tr_real[TR_cuGreenCtxDestroy]) return CUDA_ERROR_NOT_FOUND;
    return ctx_destroy(real_green_destroy, hCtx, 1);
}
