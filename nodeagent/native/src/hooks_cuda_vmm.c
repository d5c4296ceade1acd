/*
 * Virtual memory management. A physical handle from cuMemCreate is charged, rounded to the
 * allocation granularity, to the device it is located on. The driver keeps a handle's memory
 * until it is released AND no longer mapped (cuMemRelease of a mapped handle only drops the
 * handle), so the charge follows the same rule: released while mapped, it stays charged until
 * the last mapping of it is unmapped. cuMemRetainAllocationHandle hands out the handle of a
 * mapped address once more, and each retain is matched by a release: the charge stays until
 * the last handle is released and the last mapping unmapped (issue #27, item 7; at 7382faa
 * a retain, release and unmap dropped the charge while the retained handle held the memory).
 *
 * Host locations (CU_MEM_LOCATION_TYPE_HOST, _HOST_NUMA, _HOST_NUMA_CURRENT) are system memory
 * on a real driver and cost the card nothing: passed through uncharged (simgpu models them as
 * host memory too). Any other location type is refused: the core cannot tell what it costs.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>

#include "charge.h"
#include "array_bytes.h"

typedef struct {
    int dev;
    uint64_t charge;
    uint64_t maps;  /* live mappings of this handle */
    int refs;       /* handles held: the create and each retain */
    int released;   /* every handle released; the charge goes with the last unmap */
} vmm_rec_t;

typedef struct {
    CUdeviceptr va;
    uint64_t size;
    vmm_rec_t *rec;
} vmm_map_t;

static pthread_mutex_t vmm_mu = PTHREAD_MUTEX_INITIALIZER;
static vmm_map_t *maps;
static size_t nmaps, capmaps;

static vmm_rec_t *rec_of(CUmemGenericAllocationHandle h) {
    int dev;
    uint64_t v;
    return tr_track_get(TR_K_VMM, (uint64_t)h, &dev, &v) == 0 ? (vmm_rec_t *)(uintptr_t)v : NULL;
}

TR_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags) {
    MEM_ENTER(cuMemCreate, handle, size, prop, flags);
    if (!prop || !handle || size == 0) return REAL_FN(cuMemCreate)(handle, size, prop, flags);
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE: break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        return REAL_FN(cuMemCreate)(handle, size, prop, flags); /* system memory */
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
    int dev = tr_dev_index((CUdevice)prop->location.id);
    size_t gran = 0;
    uint64_t charge = size;
    if (REAL_FN(cuMemGetAllocationGranularity)(&gran, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
            CUDA_SUCCESS &&
        gran > 0)
        charge = tr_sat_mul(tr_sat_add(size, gran - 1) / gran, gran);
    vmm_rec_t *rec = calloc(1, sizeof *rec);
    if (!rec) return CUDA_ERROR_OUT_OF_MEMORY;
    if (dev < 0 || tr_mem_reserve(dev, charge) != 0) {
        free(rec);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    tr_guard++;
    CUresult r = REAL_FN(cuMemCreate)(handle, size, prop, flags);
    tr_guard--;
    if (r != CUDA_SUCCESS) {
        tr_uncharge(dev, charge);
        free(rec);
        return r;
    }
    *rec = (vmm_rec_t){.dev = dev, .charge = charge, .refs = 1};
    tr_track_put(TR_K_VMM, (uint64_t)*handle, dev, (uint64_t)(uintptr_t)rec);
    return r;
}

/* Caller holds vmm_mu. The handle is gone and unmapped: its memory left the card. */
static void rec_drop(vmm_rec_t *rec) {
    tr_uncharge(rec->dev, rec->charge);
    free(rec);
}

TR_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    MEM_ENTER(cuMemRelease, handle);
    pthread_mutex_lock(&vmm_mu);
    int dev;
    uint64_t v;
    vmm_rec_t *rec = tr_track_take(TR_K_VMM, (uint64_t)handle, &dev, &v) == 0
                         ? (vmm_rec_t *)(uintptr_t)v
                         : NULL;
    tr_guard++;
    CUresult r = REAL_FN(cuMemRelease)(handle);
    tr_guard--;
    if (rec && (r != CUDA_SUCCESS || --rec->refs > 0))
        tr_track_put(TR_K_VMM, (uint64_t)handle, dev, v); /* refused, or retained elsewhere */
    else if (rec && rec->maps) rec->released = 1; /* still mapped: still on the card */
    else if (rec) rec_drop(rec);
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

TR_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                            CUmemGenericAllocationHandle handle, unsigned long long flags) {
    MEM_ENTER(cuMemMap, ptr, size, offset, handle, flags);
    pthread_mutex_lock(&vmm_mu);
    tr_guard++;
    CUresult r = REAL_FN(cuMemMap)(ptr, size, offset, handle, flags);
    tr_guard--;
    vmm_rec_t *rec = r == CUDA_SUCCESS ? rec_of(handle) : NULL;
    if (rec) {
        if (nmaps == capmaps) {
            size_t ncap = capmaps ? capmaps * 2 : 64;
            vmm_map_t *n = realloc(maps, ncap * sizeof *n);
            if (n) maps = n, capmaps = ncap;
        }
        /* Without room to remember the mapping, a release keeps the charge for good:
         * over-charging is the safe side. */
        if (nmaps < capmaps) maps[nmaps++] = (vmm_map_t){ptr, size, rec};
        rec->maps++;
    }
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

TR_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    MEM_ENTER(cuMemUnmap, ptr, size);
    pthread_mutex_lock(&vmm_mu);
    tr_guard++;
    CUresult r = REAL_FN(cuMemUnmap)(ptr, size);
    tr_guard--;
    for (size_t i = 0; r == CUDA_SUCCESS && i < nmaps;) {
        if (maps[i].va < ptr || maps[i].va - ptr >= size) {
            i++;
            continue;
        }
        vmm_rec_t *rec = maps[i].rec;
        maps[i] = maps[--nmaps];
        if (--rec->maps == 0 && rec->released) rec_drop(rec);
    }
    pthread_mutex_unlock(&vmm_mu);
    return r;
}

TR_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
    tr_resolve(); /* an older driver may lack it */
    if (!tr_real[TR_cuMemRetainAllocationHandle]) return CUDA_ERROR_NOT_FOUND;
    MEM_ENTER(cuMemRetainAllocationHandle, handle, addr);
    pthread_mutex_lock(&vmm_mu);
    tr_guard++;
    CUresult r = REAL_FN(cuMemRetainAllocationHandle)(handle, addr);
    tr_guard--;
    vmm_rec_t *rec = NULL;
    CUdeviceptr a = (CUdeviceptr)(uintptr_t)addr;
    for (size_t i = 0; r == CUDA_SUCCESS && i < nmaps && !rec; i++)
        if (a >= maps[i].va && a - maps[i].va < maps[i].size) rec = maps[i].rec;
    if (rec) {
        if (rec->released) { /* released while mapped: a handle of it is held again */
            rec->released = 0;
            tr_track_put(TR_K_VMM, (uint64_t)*handle, rec->dev, (uint64_t)(uintptr_t)rec);
        }
        rec->refs++;
    }
    pthread_mutex_unlock(&vmm_mu);
    return r;
}
