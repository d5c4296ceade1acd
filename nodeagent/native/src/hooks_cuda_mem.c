/*
 * Memory family: every path that takes device memory is charged against the container's cap
 * before the driver is called (reserve with CAS, call, roll back on failure), and what the
 * container sees of memory is the slice, not the card.
 */
#define _GNU_SOURCE
#include <pthread.h>

#include "tranche.h"

/* Entry checks shared by every charged path. Inside the library: straight to the driver. */
#define MEM_ENTER(sym, ...)                                                                    \
    do {                                                                                       \
        if (tr_guard) return REAL_FN(sym)(__VA_ARGS__);                                        \
        if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;                                    \
    } while (0)

static CUresult call_charged(int dev, uint64_t size) {
    if (dev == -2) return CUDA_SUCCESS; /* no context: the driver reports it */
    if (dev < 0 || tr_mem_reserve(dev, size) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

static void uncharge(int dev, uint64_t size) {
    if (dev >= 0 && size) tr_mem_release(dev, size);
}

TR_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    MEM_ENTER(cuMemAlloc_v2, dptr, bytesize);
    int dev = tr_current_dev_index();
    if (bytesize == 0 || dev == -2) return REAL_FN(cuMemAlloc_v2)(dptr, bytesize);
    if (call_charged(dev, bytesize) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
    tr_guard++;
    CUresult r = REAL_FN(cuMemAlloc_v2)(dptr, bytesize);
    tr_guard--;
    if (r != CUDA_SUCCESS) uncharge(dev, bytesize);
    else tr_track_put(TR_K_PTR, *dptr, dev, bytesize);
    return r;
}

TR_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    MEM_ENTER(cuMemAllocManaged, dptr, bytesize, flags);
    int dev = tr_current_dev_index();
    if (bytesize == 0 || dev == -2) return REAL_FN(cuMemAllocManaged)(dptr, bytesize, flags);
    if (call_charged(dev, bytesize) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
    tr_guard++;
    CUresult r = REAL_FN(cuMemAllocManaged)(dptr, bytesize, flags);
    tr_guard--;
    if (r != CUDA_SUCCESS) uncharge(dev, bytesize);
    else tr_track_put(TR_K_PTR, *dptr, dev, bytesize);
    return r;
}

TR_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t width,
                                      size_t height, unsigned int elementSize) {
    MEM_ENTER(cuMemAllocPitch_v2, dptr, pPitch, width, height, elementSize);
    int dev = tr_current_dev_index();
    if (width == 0 || height == 0 || dev == -2)
        return REAL_FN(cuMemAllocPitch_v2)(dptr, pPitch, width, height, elementSize);
    /* The pitch is only known afterwards: reserve a 512-byte-aligned row, then settle. */
    uint64_t est = (((uint64_t)width + 511u) & ~(uint64_t)511u) * height;
    if (call_charged(dev, est) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
    tr_guard++;
    CUresult r = REAL_FN(cuMemAllocPitch_v2)(dptr, pPitch, width, height, elementSize);
    tr_guard--;
    if (r != CUDA_SUCCESS) {
        uncharge(dev, est);
        return r;
    }
    uint64_t actual = (uint64_t)*pPitch * height;
    if (actual > est && tr_mem_reserve(dev, actual - est) != 0) {
        tr_guard++;
        REAL_FN(cuMemFree_v2)(*dptr);
        tr_guard--;
        uncharge(dev, est);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < est) uncharge(dev, est - actual);
    tr_track_put(TR_K_PTR, *dptr, dev, actual);
    return r;
}

TR_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    MEM_ENTER(cuMemFree_v2, dptr);
    int dev;
    uint64_t size;
    int known = tr_track_take(TR_K_PTR, dptr, &dev, &size) == 0;
    tr_guard++;
    CUresult r = REAL_FN(cuMemFree_v2)(dptr);
    tr_guard--;
    if (known) {
        if (r == CUDA_SUCCESS) uncharge(dev, size);
        else tr_track_put(TR_K_PTR, dptr, dev, size);
    }
    return r;
}

/* ---- Stream-ordered allocation: a pool is charged for its reserved memory, which is what
 * it really holds on the device; the charge follows the pool's reserved size. ---- */

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t pool_reserved(CUmemoryPool pool) {
    cuuint64_t v = 0;
    if (REAL_FN(cuMemPoolGetAttribute)(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) !=
        CUDA_SUCCESS)
        return 0;
    return (uint64_t)v;
}

/* Caller holds pool_mu. Bring the pool's charge down to what it holds now. */
static void pool_settle_down(CUmemoryPool pool) {
    int dev;
    uint64_t charged;
    if (tr_track_get(TR_K_POOL, (uint64_t)(uintptr_t)pool, &dev, &charged) != 0) return;
    uint64_t now = pool_reserved(pool);
    if (now < charged) {
        uncharge(dev, charged - now);
        tr_track_put(TR_K_POOL, (uint64_t)(uintptr_t)pool, dev, now);
    }
}

typedef CUresult (*pool_alloc_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);

static CUresult call_alloc_async(CUdeviceptr *d, size_t n, CUmemoryPool pool, CUstream s,
                                 int id, int from_pool) {
    if (from_pool) return ((pool_alloc_fn)tr_real[id])(d, n, pool, s);
    return ((CUresult(*)(CUdeviceptr *, size_t, CUstream))tr_real[id])(d, n, s);
}

/* On a stream being captured, an async allocation becomes a graph memory node: the graph
 * memory pool backs it when the graph is launched, outside every call the core sees, and the
 * stream's pool does not grow. Refused like the nodes themselves (cuGraphAddMemAllocNode). A
 * failing query is returned as is: the driver would refuse the allocation for the same reason. */
static CUresult refuse_if_capturing(CUstream s, int ptsz) {
    if (!tr_real[TR_cuStreamIsCapturing]) return CUDA_SUCCESS; /* a driver without capture */
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = REAL_FN(cuStreamIsCapturing)(ptsz && s == NULL ? CU_STREAM_PER_THREAD : s, &st);
    if (r != CUDA_SUCCESS) return r;
    return st == CU_STREAM_CAPTURE_STATUS_NONE ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s,
                            int id, int from_pool) {
    if (tr_guard) return call_alloc_async(dptr, size, pool, s, id, from_pool);
    if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    int dev = tr_current_dev_index();
    /* No current context: a pool and an explicit stream carry a device of their own, so the
     * driver could serve it while the core cannot tell whose slice pays. Refused, with the
     * error the driver gives when it needs a context. */
    if (dev == -2) return CUDA_ERROR_INVALID_CONTEXT;
    int ptsz = id == TR_cuMemAllocAsync_ptsz || id == TR_cuMemAllocFromPoolAsync_ptsz;
    CUresult cap = refuse_if_capturing(s, ptsz);
    if (cap != CUDA_SUCCESS) return cap;
    if (!from_pool && dev >= 0) {
        CUdevice cudev;
        if (REAL_FN(cuCtxGetDevice)(&cudev) != CUDA_SUCCESS ||
            REAL_FN(cuDeviceGetMemPool)(&pool, cudev) != CUDA_SUCCESS)
            pool = NULL;
    }
    if (size == 0 || !pool) return call_alloc_async(dptr, size, pool, s, id, from_pool);
    if (dev < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&pool_mu);
    int pdev;
    uint64_t charged = 0;
    if (tr_track_get(TR_K_POOL, (uint64_t)(uintptr_t)pool, &pdev, &charged) != 0) charged = 0;
    /* Reserve the full size first (admission stays atomic), then settle to the pool's real
     * growth. Over the cap, the pool may still serve it from memory it already holds. */
    if (tr_mem_reserve(dev, size) != 0) {
        tr_guard++;
        CUresult r = call_alloc_async(dptr, size, pool, s, id, from_pool);
        tr_guard--;
        uint64_t after = pool_reserved(pool);
        if (r == CUDA_SUCCESS && after <= charged) {
            tr_track_put(TR_K_ASYNC, *dptr, dev, (uint64_t)(uintptr_t)pool);
            pthread_mutex_unlock(&pool_mu);
            return r;
        }
        if (r == CUDA_SUCCESS) {
            tr_guard++;
            REAL_FN(cuMemFreeAsync)(*dptr, s);
            tr_guard--;
        }
        pthread_mutex_unlock(&pool_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    tr_guard++;
    CUresult r = call_alloc_async(dptr, size, pool, s, id, from_pool);
    tr_guard--;
    uint64_t after = pool_reserved(pool);
    uint64_t held = charged + size; /* what is charged for this pool right now */
    if (r == CUDA_SUCCESS && after > held) {
        /* The pool grew by more than asked (chunk rounding): charge the rest too. */
        if (tr_mem_reserve(dev, after - held) != 0) {
            tr_guard++;
            REAL_FN(cuMemFreeAsync)(*dptr, s);
            tr_guard--;
            uncharge(dev, size);
            pthread_mutex_unlock(&pool_mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        held = after;
    }
    uint64_t keep = after > charged ? after : charged;
    if (held > keep) uncharge(dev, held - keep);
    tr_track_put(TR_K_POOL, (uint64_t)(uintptr_t)pool, dev, keep);
    if (r == CUDA_SUCCESS) tr_track_put(TR_K_ASYNC, *dptr, dev, (uint64_t)(uintptr_t)pool);
    pthread_mutex_unlock(&pool_mu);
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
    if (tr_track_take(TR_K_PTR, dptr, &dev, &v) == 0) { /* a cuMemAlloc'd pointer */
        tr_guard++;
        CUresult r = real(dptr, s);
        tr_guard--;
        if (r == CUDA_SUCCESS) uncharge(dev, v);
        else tr_track_put(TR_K_PTR, dptr, dev, v);
        return r;
    }
    pthread_mutex_lock(&pool_mu);
    int known = tr_track_take(TR_K_ASYNC, dptr, &dev, &v) == 0;
    tr_guard++;
    CUresult r = real(dptr, s);
    tr_guard--;
    if (known) pool_settle_down((CUmemoryPool)(uintptr_t)v);
    pthread_mutex_unlock(&pool_mu);
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
    pthread_mutex_lock(&pool_mu);
    tr_guard++;
    CUresult r = REAL_FN(cuMemPoolTrimTo)(pool, minBytesToKeep);
    tr_guard--;
    pool_settle_down(pool);
    pthread_mutex_unlock(&pool_mu);
    return r;
}

/* ---- Virtual memory management: physical handles, rounded to the allocation granularity. */

TR_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags) {
    MEM_ENTER(cuMemCreate, handle, size, prop, flags);
    if (!prop || size == 0) return REAL_FN(cuMemCreate)(handle, size, prop, flags);
    int dev = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                  ? tr_dev_index((CUdevice)prop->location.id)
                  : -3;
    if (dev == -3) return REAL_FN(cuMemCreate)(handle, size, prop, flags); /* host memory */
    size_t gran = 0;
    uint64_t charge = size;
    if (REAL_FN(cuMemGetAllocationGranularity)(&gran, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
            CUDA_SUCCESS &&
        gran > 0)
        charge = (size + gran - 1) / gran * gran;
    if (call_charged(dev, charge) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
    tr_guard++;
    CUresult r = REAL_FN(cuMemCreate)(handle, size, prop, flags);
    tr_guard--;
    if (r != CUDA_SUCCESS) uncharge(dev, charge);
    else tr_track_put(TR_K_VMM, (uint64_t)*handle, dev, charge);
    return r;
}

TR_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    MEM_ENTER(cuMemRelease, handle);
    int dev;
    uint64_t size;
    int known = tr_track_take(TR_K_VMM, (uint64_t)handle, &dev, &size) == 0;
    tr_guard++;
    CUresult r = REAL_FN(cuMemRelease)(handle);
    tr_guard--;
    if (known) {
        if (r == CUDA_SUCCESS) uncharge(dev, size);
        else tr_track_put(TR_K_VMM, (uint64_t)handle, dev, size);
    }
    return r;
}

/* ---- Arrays: element bytes of every level. */

static uint64_t format_bytes(CUarray_format f) {
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    default: return 4;
    }
}

/* Levels an array of this extent can have: 1 + log2 of its largest dimension (the driver
 * refuses more). At most 64, so no loop over a caller's level count can spin. */
static unsigned max_levels(size_t w, size_t h, size_t d) {
    size_t m = w > h ? w : h;
    if (d > m) m = d;
    unsigned n = 1;
    while (m >>= 1) n++;
    return n;
}

/* Saturating: a size past 64 bits can never fit a slice, so it must not wrap to a small one. */
static uint64_t mul_sat(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t array_bytes(size_t w, size_t h, size_t d, unsigned ch, CUarray_format f,
                            unsigned levels) {
    uint64_t total = 0;
    unsigned n = levels ? levels : 1, cap = max_levels(w, h, d);
    for (unsigned l = 0; l < (n < cap ? n : cap); l++) {
        uint64_t lw = w >> l ? w >> l : 1, lh = h >> l ? h >> l : 1, ld = d >> l ? d >> l : 1;
        uint64_t level = mul_sat(mul_sat(mul_sat(mul_sat(lw, h ? lh : 1), d ? ld : 1), ch),
                                 format_bytes(f));
        total = __builtin_add_overflow(total, level, &total) ? UINT64_MAX : total;
    }
    return total;
}

static CUresult charge_array(int kind, uint64_t key_unused, uint64_t bytes, int *dev_out) {
    (void)kind;
    (void)key_unused;
    int dev = tr_current_dev_index();
    *dev_out = dev;
    if (dev == -2) return CUDA_SUCCESS;
    return call_charged(dev, bytes);
}

TR_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc) {
    MEM_ENTER(cuArrayCreate_v2, pHandle, desc);
    if (!desc) return REAL_FN(cuArrayCreate_v2)(pHandle, desc);
    uint64_t bytes = array_bytes(desc->Width, desc->Height, 0, desc->NumChannels, desc->Format, 1);
    int dev;
    if (charge_array(TR_K_ARRAY, 0, bytes, &dev) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
    tr_guard++;
    CUresult r = REAL_FN(cuArrayCreate_v2)(pHandle, desc);
    tr_guard--;
    if (r != CUDA_SUCCESS) uncharge(dev, bytes);
    else if (dev >= 0) tr_track_put(TR_K_ARRAY, (uint64_t)(uintptr_t)*pHandle, dev, bytes);
    return r;
}

TR_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc) {
    MEM_ENTER(cuArray3DCreate_v2, pHandle, desc);
    if (!desc) return REAL_FN(cuArray3DCreate_v2)(pHandle, desc);
    uint64_t bytes = array_bytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels,
                                 desc->Format, 1);
    int dev;
    if (charge_array(TR_K_ARRAY, 0, bytes, &dev) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
    tr_guard++;
    CUresult r = REAL_FN(cuArray3DCreate_v2)(pHandle, desc);
    tr_guard--;
    if (r != CUDA_SUCCESS) uncharge(dev, bytes);
    else if (dev >= 0) tr_track_put(TR_K_ARRAY, (uint64_t)(uintptr_t)*pHandle, dev, bytes);
    return r;
}

TR_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
    MEM_ENTER(cuArrayDestroy, hArray);
    int dev;
    uint64_t size;
    int known = tr_track_take(TR_K_ARRAY, (uint64_t)(uintptr_t)hArray, &dev, &size) == 0;
    tr_guard++;
    CUresult r = REAL_FN(cuArrayDestroy)(hArray);
    tr_guard--;
    if (known) {
        if (r == CUDA_SUCCESS) uncharge(dev, size);
        else tr_track_put(TR_K_ARRAY, (uint64_t)(uintptr_t)hArray, dev, size);
    }
    return r;
}

TR_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                          const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                          unsigned int numMipmapLevels) {
    MEM_ENTER(cuMipmappedArrayCreate, pHandle, desc, numMipmapLevels);
    if (!desc) return REAL_FN(cuMipmappedArrayCreate)(pHandle, desc, numMipmapLevels);
    /* More levels than the extent allows: what the driver answers, without a loop to 2^32. */
    if (numMipmapLevels > max_levels(desc->Width, desc->Height, desc->Depth))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = array_bytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels,
                                 desc->Format, numMipmapLevels);
    int dev;
    if (charge_array(TR_K_MIPMAP, 0, bytes, &dev) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
    tr_guard++;
    CUresult r = REAL_FN(cuMipmappedArrayCreate)(pHandle, desc, numMipmapLevels);
    tr_guard--;
    if (r != CUDA_SUCCESS) uncharge(dev, bytes);
    else if (dev >= 0) tr_track_put(TR_K_MIPMAP, (uint64_t)(uintptr_t)*pHandle, dev, bytes);
    return r;
}

TR_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) {
    MEM_ENTER(cuMipmappedArrayDestroy, h);
    int dev;
    uint64_t size;
    int known = tr_track_take(TR_K_MIPMAP, (uint64_t)(uintptr_t)h, &dev, &size) == 0;
    tr_guard++;
    CUresult r = REAL_FN(cuMipmappedArrayDestroy)(h);
    tr_guard--;
    if (known) {
        if (r == CUDA_SUCCESS) uncharge(dev, size);
        else tr_track_put(TR_K_MIPMAP, (uint64_t)(uintptr_t)h, dev, size);
    }
    return r;
}

/* ---- What the container sees. */

TR_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
    MEM_ENTER(cuMemGetInfo_v2, free, total);
    size_t pfree = 0, ptotal = 0;
    CUresult r = REAL_FN(cuMemGetInfo_v2)(&pfree, &ptotal);
    if (r != CUDA_SUCCESS) return r;
    int dev = tr_current_dev_index();
    if (dev < 0) {
        if (free) *free = 0;
        if (total) *total = 0;
        return r;
    }
    /* A slice larger than the card (misconfigured) must not promise memory that isn't there. */
    uint64_t limit = tr_cfg.devices[dev].memory_bytes;
    if (limit > ptotal) limit = ptotal;
    uint64_t used = atomic_load(&tr_region()->devices[dev].mem_used);
    uint64_t left = used < limit ? limit - used : 0;
    if (free) *free = (size_t)(left < pfree ? left : pfree);
    if (total) *total = (size_t)limit;
    return r;
}

TR_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    MEM_ENTER(cuDeviceTotalMem_v2, bytes, dev);
    CUresult r = REAL_FN(cuDeviceTotalMem_v2)(bytes, dev);
    if (r != CUDA_SUCCESS || !bytes) return r;
    int idx = tr_dev_index(dev);
    size_t slice = idx >= 0 ? (size_t)tr_cfg.devices[idx].memory_bytes : 0;
    if (slice < *bytes) *bytes = slice;
    return r;
}

/* ---- Legacy v1 entry points (CUDA < 3.2: 32-bit sizes and device pointers). Still exported by
 * real drivers and reachable by name, but nothing built since CUDA 3.2 calls them, and a 32-bit
 * device pointer cannot name most of a modern card. Allocators are refused outright, without
 * touching the driver (fail closed: CUDA_ERROR_NOT_SUPPORTED); a v1 free has nothing of ours to
 * free. The two info calls report the slice view, clamped to 32 bits: never more than the slice,
 * so they cannot invite an allocation the cap would refuse. */

#include <limits.h>

static unsigned int clamp32(size_t v) { return v > UINT_MAX ? UINT_MAX : (unsigned int)v; }

TR_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize) {
    (void)dptr, (void)bytesize;
    return CUDA_ERROR_NOT_SUPPORTED;
}

TR_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                   unsigned int WidthInBytes, unsigned int Height,
                                   unsigned int ElementSizeBytes) {
    (void)dptr, (void)pPitch, (void)WidthInBytes, (void)Height, (void)ElementSizeBytes;
    return CUDA_ERROR_NOT_SUPPORTED;
}

TR_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
    (void)dptr;
    return CUDA_ERROR_NOT_SUPPORTED;
}

TR_EXPORT CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *desc) {
    (void)pHandle, (void)desc;
    return CUDA_ERROR_NOT_SUPPORTED;
}

TR_EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *desc) {
    (void)pHandle, (void)desc;
    return CUDA_ERROR_NOT_SUPPORTED;
}

TR_EXPORT CUresult cuMemGetInfo(unsigned int *free, unsigned int *total) {
    size_t f = 0, t = 0;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS) {
        if (free) *free = clamp32(f);
        if (total) *total = clamp32(t);
    }
    return r;
}

TR_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    size_t b = 0;
    CUresult r = cuDeviceTotalMem_v2(&b, dev);
    if (r == CUDA_SUCCESS && bytes) *bytes = clamp32(b);
    return r;
}

/* ---- Graph memory nodes take device memory from the graph memory pool when the graph runs,
 * outside every allocation call above, and the driver does not say how much a pool holds per
 * node or when instantiation backs them. They are refused (CUDA_ERROR_NOT_SUPPORTED); programs
 * allocate before capture or use cuMemAllocAsync outside a graph. */

TR_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                          const CUgraphNode *dependencies, size_t numDependencies,
                                          CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams) {
    (void)phGraphNode, (void)hGraph, (void)dependencies, (void)numDependencies, (void)nodeParams;
    return CUDA_ERROR_NOT_SUPPORTED;
}

TR_EXPORT CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                  const CUgraphNode *dependencies, size_t numDependencies,
                                  CUgraphNodeParams *nodeParams) {
    if (nodeParams && nodeParams->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        return CUDA_ERROR_NOT_SUPPORTED;
    tr_resolve();
    if (!tr_real[TR_cuGraphAddNode]) return CUDA_ERROR_NOT_FOUND;
    return REAL_FN(cuGraphAddNode)(phGraphNode, hGraph, dependencies, numDependencies,
                                   nodeParams);
}

TR_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                     const CUgraphNode *dependencies,
                                     const CUgraphEdgeData *dependencyData,
                                     size_t numDependencies, CUgraphNodeParams *nodeParams) {
    if (nodeParams && nodeParams->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        return CUDA_ERROR_NOT_SUPPORTED;
    tr_resolve();
    if (!tr_real[TR_cuGraphAddNode_v2]) return CUDA_ERROR_NOT_FOUND;
    return REAL_FN(cuGraphAddNode_v2)(phGraphNode, hGraph, dependencies, dependencyData,
                                      numDependencies, nodeParams);
}
