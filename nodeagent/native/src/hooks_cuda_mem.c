/*
 * Memory family: every plain allocation path is charged against the container's cap before
 * the driver is called (reserve with CAS, call, roll back on failure; charge.h), and what the
 * container sees of memory is the slice, not the card. Pools and stream-ordered allocation are
 * in hooks_cuda_pool.c, virtual memory management in hooks_cuda_vmm.c, graph memory in
 * hooks_cuda_graph.c.
 */
#define _GNU_SOURCE

#include "charge.h" /* first: it sets up cuda.h the way the core needs it */
#include "array_bytes.h"
#include "legacy32.h"

TR_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    MEM_ENTER(cuMemAlloc_v2, dptr, bytesize);
    int dev = tr_current_dev_index();
    if (bytesize == 0 || dev == -2) return REAL_FN(cuMemAlloc_v2)(dptr, bytesize);
    TR_CHARGED_CREATE(dev, bytesize, TR_K_PTR, *dptr, REAL_FN(cuMemAlloc_v2)(dptr, bytesize));
}

TR_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    MEM_ENTER(cuMemAllocManaged, dptr, bytesize, flags);
    int dev = tr_current_dev_index();
    if (bytesize == 0 || dev == -2) return REAL_FN(cuMemAllocManaged)(dptr, bytesize, flags);
    TR_CHARGED_CREATE(dev, bytesize, TR_K_PTR, *dptr,
                      REAL_FN(cuMemAllocManaged)(dptr, bytesize, flags));
}

TR_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t width,
                                      size_t height, unsigned int elementSize) {
    MEM_ENTER(cuMemAllocPitch_v2, dptr, pPitch, width, height, elementSize);
    int dev = tr_current_dev_index();
    if (width == 0 || height == 0 || dev == -2)
        return REAL_FN(cuMemAllocPitch_v2)(dptr, pPitch, width, height, elementSize);
    /* The pitch is only known afterwards: reserve a 512-byte-aligned row, then settle. */
    uint64_t est = tr_sat_mul(tr_sat_add(width, 511u) & ~(uint64_t)511u, height);
    if (dev < 0 || tr_mem_reserve(dev, est) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    tr_guard++;
    CUresult r = REAL_FN(cuMemAllocPitch_v2)(dptr, pPitch, width, height, elementSize);
    tr_guard--;
    if (r != CUDA_SUCCESS) {
        tr_uncharge(dev, est);
        return r;
    }
    uint64_t actual = tr_sat_mul(*pPitch, height);
    if (actual > est && tr_mem_reserve(dev, actual - est) != 0) {
        tr_guard++;
        REAL_FN(cuMemFree_v2)(*dptr);
        tr_guard--;
        tr_uncharge(dev, est);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (actual < est) tr_uncharge(dev, est - actual);
    tr_track_put(TR_K_PTR, *dptr, dev, actual);
    return r;
}

TR_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
    MEM_ENTER(cuMemFree_v2, dptr);
    TR_CHARGED_FREE(TR_K_PTR, dptr, REAL_FN(cuMemFree_v2)(dptr));
}

/* ---- Arrays: element bytes of every level (array_bytes.h, the formula simgpu uses too). An
 * array belongs to the current context's device. */

TR_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc) {
    MEM_ENTER(cuArrayCreate_v2, pHandle, desc);
    int dev = tr_current_dev_index();
    if (!desc || dev == -2) return REAL_FN(cuArrayCreate_v2)(pHandle, desc);
    uint64_t bytes =
        tr_array_bytes(desc->Width, desc->Height, 0, desc->NumChannels, desc->Format, 1);
    TR_CHARGED_CREATE(dev, bytes, TR_K_ARRAY, (uint64_t)(uintptr_t)*pHandle,
                      REAL_FN(cuArrayCreate_v2)(pHandle, desc));
}

TR_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc) {
    MEM_ENTER(cuArray3DCreate_v2, pHandle, desc);
    int dev = tr_current_dev_index();
    if (!desc || dev == -2) return REAL_FN(cuArray3DCreate_v2)(pHandle, desc);
    uint64_t bytes = tr_array_bytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels,
                                    desc->Format, 1);
    TR_CHARGED_CREATE(dev, bytes, TR_K_ARRAY, (uint64_t)(uintptr_t)*pHandle,
                      REAL_FN(cuArray3DCreate_v2)(pHandle, desc));
}

TR_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
    MEM_ENTER(cuArrayDestroy, hArray);
    TR_CHARGED_FREE(TR_K_ARRAY, (uint64_t)(uintptr_t)hArray, REAL_FN(cuArrayDestroy)(hArray));
}

TR_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                          const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                          unsigned int numMipmapLevels) {
    MEM_ENTER(cuMipmappedArrayCreate, pHandle, desc, numMipmapLevels);
    int dev = tr_current_dev_index();
    if (!desc || dev == -2) return REAL_FN(cuMipmappedArrayCreate)(pHandle, desc, numMipmapLevels);
    /* More levels than the extent allows: what the driver answers, without a loop to 2^32. */
    if (numMipmapLevels > tr_max_levels(desc->Width, desc->Height, desc->Depth))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = tr_array_bytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels,
                                    desc->Format, numMipmapLevels);
    TR_CHARGED_CREATE(dev, bytes, TR_K_MIPMAP, (uint64_t)(uintptr_t)*pHandle,
                      REAL_FN(cuMipmappedArrayCreate)(pHandle, desc, numMipmapLevels));
}

TR_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h) {
    MEM_ENTER(cuMipmappedArrayDestroy, h);
    TR_CHARGED_FREE(TR_K_MIPMAP, (uint64_t)(uintptr_t)h, REAL_FN(cuMipmappedArrayDestroy)(h));
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
    return tr_legacy_mem_get_info(free, total);
}

TR_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    return tr_legacy_device_total_mem(bytes, dev);
}

