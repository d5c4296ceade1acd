/*
 * The rest of the driver surface that can hold device memory (issue #27, item 7): memory
 * shared between processes, and context limits.
 *
 * Shared memory is refused (CUDA_ERROR_NOT_SUPPORTED, nothing reaches the driver, one stderr
 * line per entry point and process). A driver keeps shared memory alive while any process
 * holds it: an exported allocation freed by its exporter (its charge given back) would stay on
 * the card through the importer, and an importer cannot tell whether, or to which claim, the
 * memory was charged. So neither side may share device memory: legacy IPC
 * (cuIpcGetMemHandle, cuIpcOpenMemHandle and _v2), pool export/import
 * (cuMemPool{Export,Import}{ToShareableHandle,FromShareableHandle,Pointer}), VMM export of a
 * device-located handle (cuMemExportToShareableHandle; host-located handles are system memory
 * and pass) and every import (cuMemImportFromShareableHandle), and dma-buf export
 * (cuMemGetHandleForAddressRange). One process sharing memory among its own threads, or host
 * memory between processes, needs none of them.
 *
 * cuCtxSetLimit is charged: the malloc heap and the printf FIFO reserve their size in device
 * memory, the stack its size for every thread the device can keep resident (SMs x threads per
 * SM). What a new value reserves beyond the current one is charged to the context before the
 * driver is asked (CUDA_ERROR_OUT_OF_MEMORY over the slice), a lower value gives back what an
 * earlier raise was charged, and everything goes when the context does (its charge record
 * grows by it). Limits that reserve memory by amounts the core cannot compute (device-runtime
 * sync depth and pending launches) may be lowered, not raised; the L2 hints pass; unknown
 * limits are refused.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "charge.h"

#pragma GCC diagnostic ignored "-Wunused-parameter" /* the refusing hooks read no argument */

/* One line to stderr the first time each refused entry point is called in a process: the
 * tenant learns what was refused, why and what to do. write(2), not stdio: the program may
 * interpose stdio, and nothing here may be slowed by it. */
static void say_once(_Atomic int *said, const char *what, const char *why) {
    if (atomic_exchange(said, 1)) return;
    char line[400];
    size_t n = 0;
    const char *parts[] = {"tranche: ", what, " refused (CUDA_ERROR_NOT_SUPPORTED): ", why, "\n"};
    for (int p = 0; p < 5; p++)
        for (const char *c = parts[p]; *c && n + 1 < sizeof line; c++) line[n++] = *c;
    if (write(2, line, n) < 0) { /* stderr closed: the refusal holds anyway */
    }
}

static void refused_once(_Atomic int *said, const char *what) {
    say_once(said, what,
             "device memory shared with another process would outlive its charge to this "
             "slice. Share it between threads of one process, or through host memory.");
}

#define REFUSED(sym, params)                                                                   \
    TR_EXPORT CUresult sym params {                                                            \
        static _Atomic int said;                                                               \
        if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;                                    \
        refused_once(&said, #sym);                                                             \
        return CUDA_ERROR_NOT_SUPPORTED;                                                       \
    }

REFUSED(cuIpcGetMemHandle, (CUipcMemHandle * pHandle, CUdeviceptr dptr))
REFUSED(cuIpcOpenMemHandle, (CUdeviceptr * pdptr, CUipcMemHandle handle, unsigned int Flags))
REFUSED(cuIpcOpenMemHandle_v2, (CUdeviceptr * pdptr, CUipcMemHandle handle, unsigned int Flags))
REFUSED(cuMemImportFromShareableHandle,
        (CUmemGenericAllocationHandle * handle, void *osHandle, CUmemAllocationHandleType type))
REFUSED(cuMemPoolExportToShareableHandle, (void *handle_out, CUmemoryPool pool,
                                           CUmemAllocationHandleType type,
                                           unsigned long long flags))
REFUSED(cuMemPoolImportFromShareableHandle, (CUmemoryPool * pool_out, void *handle,
                                             CUmemAllocationHandleType type,
                                             unsigned long long flags))
REFUSED(cuMemPoolExportPointer, (CUmemPoolPtrExportData * shareData_out, CUdeviceptr ptr))
REFUSED(cuMemPoolImportPointer,
        (CUdeviceptr * ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData))
REFUSED(cuMemGetHandleForAddressRange, (void *handle, CUdeviceptr dptr, size_t size,
                                        CUmemRangeHandleType type, unsigned long long flags))

/* A handle the core charged is device memory; one it did not is host-located (cuMemCreate
 * passes those through uncharged) and may be shared. */
TR_EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle handle,
                                                CUmemAllocationHandleType type,
                                                unsigned long long flags) {
    static _Atomic int said;
    MEM_ENTER(cuMemExportToShareableHandle, out, handle, type, flags);
    int dev;
    uint64_t v;
    if (tr_track_get(TR_K_VMM, (uint64_t)handle, &dev, &v) == 0) {
        refused_once(&said, "cuMemExportToShareableHandle");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    tr_guard++;
    CUresult r = REAL_FN(cuMemExportToShareableHandle)(out, handle, type, flags);
    tr_guard--;
    return r;
}

/* ---- Context limits. */

static pthread_mutex_t limit_mu = PTHREAD_MUTEX_INITIALIZER;

/* Device memory `value` of `limit` reserves on `dev`; 0 for limits that reserve none, UINT64_MAX
 * if it cannot be computed (or wraps). */
static uint64_t limit_bytes(CUlimit limit, size_t value, CUdevice dev) {
    if (limit == CU_LIMIT_MALLOC_HEAP_SIZE || limit == CU_LIMIT_PRINTF_FIFO_SIZE) return value;
    if (limit != CU_LIMIT_STACK_SIZE) return 0;
    int sms = 0, threads = 0;
    uint64_t per = 0, total = 0;
    if (REAL_FN(cuDeviceGetAttribute)(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) !=
            CUDA_SUCCESS ||
        REAL_FN(cuDeviceGetAttribute)(
            &threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev) != CUDA_SUCCESS ||
        sms <= 0)
        return UINT64_MAX;
    if (threads <= 0) threads = 2048; /* the most any GPU so far keeps resident per SM */
    if (__builtin_mul_overflow((uint64_t)sms, (uint64_t)threads, &per) ||
        __builtin_mul_overflow(per, (uint64_t)value, &total))
        return UINT64_MAX;
    return total;
}

/* Key of the current context's charge record (hooks_cuda_ctx.c keys created contexts by
 * handle | 1 << 63, primary ones by device ordinal); -1 if the core holds none for it. */
static int ctx_record(CUcontext ctx, CUdevice dev, uint64_t *key) {
    int idx;
    uint64_t size;
    *key = (uint64_t)(uintptr_t)ctx | 1ull << 63;
    if (tr_track_get(TR_K_CTX, *key, &idx, &size) == 0) return idx;
    *key = (uint64_t)dev;
    if (tr_track_get(TR_K_CTX, *key, &idx, &size) == 0) return idx;
    return -1;
}

static uint64_t raise_key(uint64_t ctx_key, CUlimit limit) {
    return ctx_key ^ ((uint64_t)(limit + 1) << 56);
}

/* Move `delta` bytes into (positive) or out of the context's record and the limit's own. */
static void record_add(uint64_t ctx_key, CUlimit limit, int idx, int64_t delta) {
    int d;
    uint64_t size = 0, raised = 0;
    tr_track_take(TR_K_CTX, ctx_key, &d, &size);
    tr_track_take(TR_K_LIMIT, raise_key(ctx_key, limit), &d, &raised);
    size += (uint64_t)delta, raised += (uint64_t)delta;
    tr_track_put(TR_K_CTX, ctx_key, idx, size);
    if (raised) tr_track_put(TR_K_LIMIT, raise_key(ctx_key, limit), idx, raised);
}

void tr_ctx_limits_forget(uint64_t ctx_key) {
    int d;
    uint64_t raised;
    for (int l = 0; l < 3; l++) tr_track_take(TR_K_LIMIT, raise_key(ctx_key, (CUlimit)l), &d, &raised);
}

TR_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
    static _Atomic int said;
    MEM_ENTER(cuCtxSetLimit, limit, value);
    if (!tr_real[TR_cuCtxSetLimit] || !tr_real[TR_cuCtxGetLimit]) return CUDA_ERROR_NOT_FOUND;
    if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY || limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE)
        return REAL_FN(cuCtxSetLimit)(limit, value); /* cache hints: no memory */
    CUcontext ctx = NULL;
    CUdevice dev;
    size_t cur = 0;
    if (REAL_FN(cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS || !ctx ||
        REAL_FN(cuCtxGetDevice)(&dev) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (REAL_FN(cuCtxGetLimit)(&cur, limit) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
    if (limit != CU_LIMIT_STACK_SIZE && limit != CU_LIMIT_MALLOC_HEAP_SIZE &&
        limit != CU_LIMIT_PRINTF_FIFO_SIZE) {
        if (value <= cur) return REAL_FN(cuCtxSetLimit)(limit, value);
        say_once(&said, "raising this cuCtxSetLimit limit",
                 "the device memory it reserves (device-runtime launch depth and pending "
                 "launches) cannot be told, so it cannot be charged to this slice. Lowering it "
                 "is allowed.");
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    pthread_mutex_lock(&limit_mu);
    uint64_t key;
    int idx = ctx_record(ctx, dev, &key);
    uint64_t before = limit_bytes(limit, cur, dev), after = limit_bytes(limit, value, dev);
    CUresult r;
    if (idx < 0 || before == UINT64_MAX) {
        r = CUDA_ERROR_NOT_SUPPORTED; /* a context the core did not charge, or no SM count */
    } else if (after > before) {
        uint64_t more = after - before;
        if (after == UINT64_MAX || tr_mem_reserve(idx, more) != 0) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            tr_guard++;
            r = REAL_FN(cuCtxSetLimit)(limit, value);
            tr_guard--;
            if (r == CUDA_SUCCESS) record_add(key, limit, idx, (int64_t)more);
            else tr_uncharge(idx, more);
        }
    } else {
        tr_guard++;
        r = REAL_FN(cuCtxSetLimit)(limit, value);
        tr_guard--;
        int d;
        uint64_t raised = 0;
        if (r == CUDA_SUCCESS && tr_track_get(TR_K_LIMIT, raise_key(key, limit), &d, &raised) == 0) {
            uint64_t back = before - after < raised ? before - after : raised;
            record_add(key, limit, idx, -(int64_t)back);
            tr_uncharge(idx, back);
        }
    }
    pthread_mutex_unlock(&limit_mu);
    return r;
}
