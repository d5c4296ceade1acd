/*
 * Stream-ordered allocation. A pool is charged for its reserved memory, which is what it
 * really holds on the device, to the device the pool belongs to (not the current context's:
 * a pool or a stream may name another device), and the charge follows the pool's reserved
 * size. Which device a pool belongs to is recorded when the program obtains it (default and
 * current pools, cuMemPoolCreate); a pool the core never saw is refused.
 *
 * Over the cap the pool may still serve an allocation from memory it already holds; it is never
 * allowed to grow there. Should the driver grow it anyway (fragmentation), the block is freed,
 * the growth trimmed off, and whatever the driver keeps stays charged: a refused allocation
 * never leaves uncharged memory in a pool, whatever its release threshold.
 *
 * During stream capture an async allocation becomes a graph memory node: nothing is taken
 * then, and the graph is charged when the driver backs it (hooks_cuda_graph.c).
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdlib.h>

#include "charge.h"

/* Held across the driver's allocation, so that what a pool reserves before and after is this
 * allocation's doing: a tr_lock, not libc's mutex (which a program may define as a no-op). */
static tr_lock_t pool_mu;

enum { POOL_HOST = -3 }; /* a pool in host memory: not device memory, not charged */

static uint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute attr) {
    cuuint64_t v = 0;
    if (REAL_FN(cuMemPoolGetAttribute)(pool, attr, &v) != CUDA_SUCCESS) return 0;
    return (uint64_t)v;
}

static uint64_t pool_key(CUmemoryPool pool) { return (uint64_t)(uintptr_t)pool; }

/* What a pool is charged, found with its device (one lookup, cached per thread, on the hot
 * path). Records are never freed: a thread's cache may still point at one whose pool was
 * destroyed (destroys bump the epoch, so it is not used again), and each async pointer keeps
 * its pool's record, settled at its free without a lookup (a destroyed pool's record has no
 * charge left). Read and written under pool_mu. */
typedef struct {
    int has_charge;
    int dev;           /* the device the charge was made to */
    uint64_t charged;  /* the pool's reserved bytes when last settled */
    CUmemoryPool pool; /* whose record: an async pointer keeps its pool's record */
} pool_rec_t;

static void remember_pool(CUmemoryPool pool, int dev) {
    int old;
    uint64_t v;
    tr_lock(&pool_mu);
    pool_rec_t *rec = tr_track_get(TR_K_POOLDEV, pool_key(pool), &old, &v) == 0
                          ? (pool_rec_t *)(uintptr_t)v
                          : calloc(1, sizeof(pool_rec_t));
    if (rec) {
        rec->pool = pool;
        tr_track_put(TR_K_POOLDEV, pool_key(pool), dev, (uint64_t)(uintptr_t)rec);
    }
    tr_unlock(&pool_mu);
}

/* Per-thread cache of the last pool's device (a hot path: every async allocation asks). A
 * destroyed pool's address may come back as another device's pool: destroys bump the epoch. */
static _Atomic uint64_t pool_epoch = 1;
static __thread CUmemoryPool cached_pool __attribute__((tls_model("initial-exec")));
static __thread int cached_pool_dev __attribute__((tls_model("initial-exec")));
static __thread uint64_t cached_pool_epoch __attribute__((tls_model("initial-exec")));
static __thread pool_rec_t *cached_pool_rec __attribute__((tls_model("initial-exec")));

/* Region device of a pool the program obtained through the core; -1 if unknown or outside
 * the slice, POOL_HOST for host memory. *rec (if asked) its charge record. */
static int pool_device_rec(CUmemoryPool pool, pool_rec_t **rec) {
    uint64_t epoch = atomic_load_explicit(&pool_epoch, memory_order_acquire);
    if (TR_LIKELY(pool == cached_pool && epoch == cached_pool_epoch)) {
        if (rec) *rec = cached_pool_rec;
        return cached_pool_dev;
    }
    int dev;
    uint64_t v;
    if (tr_track_get(TR_K_POOLDEV, pool_key(pool), &dev, &v) != 0) return -1;
    cached_pool = pool, cached_pool_dev = dev, cached_pool_epoch = epoch;
    cached_pool_rec = (pool_rec_t *)(uintptr_t)v;
    if (rec) *rec = cached_pool_rec;
    return dev;
}


static int location_device(const CUmemLocation *loc) {
    switch (loc->type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: return tr_dev_index((CUdevice)loc->id);
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: return POOL_HOST;
    default: return -1;
    }
}

TR_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) {
    MEM_ENTER(cuDeviceGetDefaultMemPool, pool, dev);
    CUresult r = REAL_FN(cuDeviceGetDefaultMemPool)(pool, dev);
    if (r == CUDA_SUCCESS && pool) remember_pool(*pool, tr_dev_index(dev));
    return r;
}

TR_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) {
    MEM_ENTER(cuDeviceGetMemPool, pool, dev);
    CUresult r = REAL_FN(cuDeviceGetMemPool)(pool, dev);
    if (r == CUDA_SUCCESS && pool) remember_pool(*pool, tr_dev_index(dev));
    return r;
}

TR_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    MEM_ENTER(cuMemPoolCreate, pool, props);
    tr_guard++;
    CUresult r = REAL_FN(cuMemPoolCreate)(pool, props);
    tr_guard--;
    if (r == CUDA_SUCCESS && pool && props) remember_pool(*pool, location_device(&props->location));
    return r;
}

/* A destroyed pool gives its reserved memory back (the driver waits for its blocks). */
TR_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    MEM_ENTER(cuMemPoolDestroy, pool);
    tr_lock(&pool_mu);
    tr_guard++;
    CUresult r = REAL_FN(cuMemPoolDestroy)(pool);
    tr_guard--;
    int dev;
    uint64_t charged;
    if (r == CUDA_SUCCESS) {
        if (tr_track_take(TR_K_POOLDEV, pool_key(pool), &dev, &charged) == 0) {
            pool_rec_t *rec = (pool_rec_t *)(uintptr_t)charged;
            if (rec->has_charge) tr_uncharge(rec->dev, rec->charged);
            rec->has_charge = 0;
        }
        atomic_fetch_add_explicit(&pool_epoch, 1, memory_order_release);
    }
    tr_unlock(&pool_mu);
    return r;
}

/* Caller holds pool_mu. Bring a pool's charge to what it holds now (never more than before:
 * growth is charged where it happens). A destroyed pool's record has no charge left. */
static void rec_settle_down(pool_rec_t *rec) {
    if (!rec || !rec->has_charge) return;
    uint64_t now = pool_attr(rec->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    if (now < rec->charged) {
        tr_uncharge(rec->dev, rec->charged - now);
        rec->charged = now;
    }
}

static void pool_settle_down(CUmemoryPool pool) {
    pool_rec_t *rec = NULL;
    if (pool_device_rec(pool, &rec) != -1) rec_settle_down(rec);
}

static void pool_record(pool_rec_t *rec, int dev, uint64_t charged) {
    rec->has_charge = 1;
    rec->dev = dev;
    rec->charged = charged;
}

/* Caller holds pool_mu; `held` is what is charged for the pool right now (its recorded charge
 * plus any reservation in flight). Undo a growth the cap does not allow: the block `p` is freed,
 * the stream drained so the block is really free, and the pool trimmed back to what it held
 * before. What the driver still keeps is charged whatever the cap: it is on the card. */
static void pool_undo_growth(CUmemoryPool pool, pool_rec_t *rec, int dev, CUdeviceptr p,
                             CUstream s, uint64_t before, uint64_t held) {
    tr_guard++;
    REAL_FN(cuMemFreeAsync)(p, s);
    REAL_FN(cuStreamSynchronize)(s);
    REAL_FN(cuMemPoolTrimTo)(pool, (size_t)before);
    tr_guard--;
    uint64_t now = pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    tr_mem_settle(dev, held, now);
    pool_record(rec, dev, now);
}

typedef CUresult (*pool_alloc_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);

static CUresult call_alloc_async(CUdeviceptr *d, size_t n, CUmemoryPool pool, CUstream s,
                                 int id, int from_pool) {
    if (from_pool) return ((pool_alloc_fn)tr_real[id])(d, n, pool, s);
    return ((CUresult(*)(CUdeviceptr *, size_t, CUstream))tr_real[id])(d, n, s);
}

/* The driver's allocation (guarded: our own hooks stay out of it), then what the pool reserves
 * afterwards, which says whether it grew. */
static CUresult pool_alloc_then_reserved(CUdeviceptr *d, size_t n, CUmemoryPool pool, CUstream s,
                                         int id, int from_pool, uint64_t *reserved) {
    tr_guard++;
    CUresult r = call_alloc_async(d, n, pool, s, id, from_pool);
    tr_guard--;
    *reserved = pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    return r;
}

static CUstream real_stream(CUstream s, int ptsz) {
    return ptsz && s == NULL ? CU_STREAM_PER_THREAD : s;
}

/* 1 while `s` is being captured, 0 if not, -1 with *err set if the driver cannot tell. */
static int capturing(CUstream s, CUresult *err) {
    if (!tr_real[TR_cuStreamIsCapturing]) return 0; /* a driver without capture */
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = REAL_FN(cuStreamIsCapturing)(s, &st);
    if (r != CUDA_SUCCESS) {
        *err = r;
        return -1;
    }
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The device whose pool cuMemAllocAsync uses: the stream's, which for an explicit stream may
 * not be the current context's. A driver without cuStreamGetDevice (before CUDA 12.8) names
 * the stream's context instead; one other than the current context is refused. */
static CUresult stream_device(CUstream s, CUdevice *dev) {
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return REAL_FN(cuCtxGetDevice)(dev);
    if (tr_real[TR_cuStreamGetDevice]) return REAL_FN(cuStreamGetDevice)(s, dev);
    CUcontext sctx = NULL, cur = NULL;
    if (!tr_real[TR_cuStreamGetCtx] || REAL_FN(cuStreamGetCtx)(s, &sctx) != CUDA_SUCCESS ||
        REAL_FN(cuCtxGetCurrent)(&cur) != CUDA_SUCCESS || sctx != cur)
        return CUDA_ERROR_INVALID_CONTEXT;
    return REAL_FN(cuCtxGetDevice)(dev);
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s,
                            int id, int from_pool) {
    if (tr_guard) return call_alloc_async(dptr, size, pool, s, id, from_pool);
    if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    /* No current context: a pool and an explicit stream carry a device of their own, so the
     * driver could serve it while the core cannot tell whose slice pays. Refused, with the
     * error the driver gives when it needs a context. */
    if (tr_current_dev_index() == -2) return CUDA_ERROR_INVALID_CONTEXT;
    int ptsz = id == TR_cuMemAllocAsync_ptsz || id == TR_cuMemAllocFromPoolAsync_ptsz;
    CUstream rs = real_stream(s, ptsz);
    pool_rec_t *rec = NULL;
    int dev;
    if (!from_pool) {
        CUdevice cudev;
        CUresult r = stream_device(rs, &cudev);
        if (r == CUDA_SUCCESS) r = REAL_FN(cuDeviceGetMemPool)(&pool, cudev);
        if (r != CUDA_SUCCESS) return r;
        int want = tr_dev_index(cudev);
        if ((dev = pool_device_rec(pool, &rec)) != want) {
            remember_pool(pool, want);
            dev = pool_device_rec(pool, &rec);
        }
    } else {
        dev = pool_device_rec(pool, &rec);
    }
    if (size == 0 || !pool) return call_alloc_async(dptr, size, pool, s, id, from_pool);
    if (dev == POOL_HOST) return call_alloc_async(dptr, size, pool, s, id, from_pool);
    if (dev < 0 || !rec) return CUDA_ERROR_OUT_OF_MEMORY; /* outside the slice, or unknown */
    CUresult err = CUDA_SUCCESS;
    int cap = capturing(rs, &err);
    if (cap < 0) return err;
    if (cap) {
        /* A graph memory node: taken when the graph is uploaded or launched, and charged
         * then (hooks_cuda_graph.c). One larger than the whole slice can never run. */
        if (size > tr_cfg.devices[dev].memory_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
        /* The node lands in the capture's graph, which (cuStreamBeginCaptureToGraph) may be
         * one another thread is instantiating: wait for its read like any node adder. */
        tr_graph_edit_begin();
        tr_guard++;
        CUresult r = call_alloc_async(dptr, size, pool, s, id, from_pool);
        tr_guard--;
        tr_graph_edit_end();
        return r;
    }
    tr_lock(&pool_mu);
    int pdev = rec->has_charge ? rec->dev : -1;
    uint64_t charged = rec->has_charge ? rec->charged : 0;
    /* Reserve the full size first (admission stays atomic), then settle to the pool's real
     * growth. Over the cap, the pool may still serve it from memory it already holds. */
    if (tr_mem_reserve(dev, size) != 0) {
        uint64_t reserved = pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        uint64_t used = pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
        if (reserved < used || reserved - used < size) { /* it would have to grow: refused */
            tr_unlock(&pool_mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        uint64_t after;
        CUresult r = pool_alloc_then_reserved(dptr, size, pool, s, id, from_pool, &after);
        if (r == CUDA_SUCCESS && after <= charged) {
            tr_track_put(TR_K_ASYNC, *dptr, dev, (uint64_t)(uintptr_t)rec);
            tr_unlock(&pool_mu);
            return r;
        }
        if (r == CUDA_SUCCESS) pool_undo_growth(pool, rec, dev, *dptr, rs, charged, charged);
        tr_unlock(&pool_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    uint64_t after;
    CUresult r = pool_alloc_then_reserved(dptr, size, pool, s, id, from_pool, &after);
    uint64_t held = charged + size; /* what is charged for this pool right now */
    if (r == CUDA_SUCCESS && after > held) {
        /* The pool grew by more than asked (chunk rounding): charge the rest too. */
        if (tr_mem_reserve(dev, after - held) != 0) {
            pool_undo_growth(pool, rec, dev, *dptr, rs, charged, held);
            tr_unlock(&pool_mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        held = after;
    }
    uint64_t keep = after > charged ? after : charged;
    tr_mem_settle(dev, held, keep);
    if (keep != charged || pdev != dev) pool_record(rec, dev, keep);
    if (r == CUDA_SUCCESS) tr_track_put(TR_K_ASYNC, *dptr, dev, (uint64_t)(uintptr_t)rec);
    tr_unlock(&pool_mu);
    return r;
}

TR_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return alloc_async(dptr, bytesize, NULL, hStream, TR_cuMemAllocAsync, 0);
}
TR_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return alloc_async(dptr, bytesize, NULL, hStream, TR_cuMemAllocAsync_ptsz, 0);
}
TR_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                           CUstream hStream) {
    return alloc_async(dptr, bytesize, pool, hStream, TR_cuMemAllocFromPoolAsync, 1);
}
TR_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                CUmemoryPool pool, CUstream hStream) {
    return alloc_async(dptr, bytesize, pool, hStream, TR_cuMemAllocFromPoolAsync_ptsz, 1);
}

static CUresult free_async(CUdeviceptr dptr, CUstream s, int id) {
    CUresult (*real)(CUdeviceptr, CUstream) = (CUresult(*)(CUdeviceptr, CUstream))tr_real[id];
    if (tr_guard) return real(dptr, s);
    if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    int dev;
    uint64_t v;
    tr_lock(&pool_mu);
    int known = tr_track_take(TR_K_ASYNC, dptr, &dev, &v) == 0; /* the usual case first */
    if (!known && tr_track_get(TR_K_PTR, dptr, &dev, &v) == 0) { /* a cuMemAlloc'd pointer */
        tr_unlock(&pool_mu);
        /* Captured, the free only happens when the graph runs, maybe never: the charge stays
         * (conservative; it is given back with the process). */
        CUresult err = CUDA_SUCCESS;
        int cap = capturing(real_stream(s, id == TR_cuMemFreeAsync_ptsz), &err);
        if (cap != 0) return cap < 0 ? err : real(dptr, s);
        TR_CHARGED_FREE(TR_K_PTR, dptr, real(dptr, s));
    }
    tr_guard++;
    CUresult r = real(dptr, s);
    tr_guard--;
    if (known && r != CUDA_SUCCESS) tr_track_put(TR_K_ASYNC, dptr, dev, v);
    else if (known) rec_settle_down((pool_rec_t *)(uintptr_t)v);
    tr_unlock(&pool_mu);
    return r;
}

TR_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
    return free_async(dptr, hStream, TR_cuMemFreeAsync);
}
TR_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
    return free_async(dptr, hStream, TR_cuMemFreeAsync_ptsz);
}

TR_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
    MEM_ENTER(cuMemPoolTrimTo, pool, minBytesToKeep);
    tr_lock(&pool_mu);
    tr_guard++;
    CUresult r = REAL_FN(cuMemPoolTrimTo)(pool, minBytesToKeep);
    tr_guard--;
    pool_settle_down(pool);
    tr_unlock(&pool_mu);
    return r;
}
