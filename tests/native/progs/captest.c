/*
 * Memory cap test driver. Usage: captest PATH [DEVICE]
 * For one allocation path: fill exactly what cuMemGetInfo reports free, check that one more
 * byte (or the smallest unit of that path) fails with CUDA_ERROR_OUT_OF_MEMORY, free, and fill
 * again. Prints "OK <path> filled=<bytes> total=<bytes>" or "FAIL ...".
 */
#include "common.h"

typedef struct {
    int kind; /* what to free */
    CUdeviceptr ptr;
    CUarray arr;
    CUmipmappedArray mip;
    CUmemGenericAllocationHandle vmm;
} held_t;

static CUmemoryPool pool;

static CUresult alloc_path(const char *path, uint64_t bytes, held_t *h, int dev) {
    memset(h, 0, sizeof *h);
    if (!strcmp(path, "alloc")) return cuMemAlloc_v2(&h->ptr, bytes);
    if (!strcmp(path, "managed")) return cuMemAllocManaged(&h->ptr, bytes, CU_MEM_ATTACH_GLOBAL);
    if (!strcmp(path, "pitch")) {
        /* Rows of 1 MiB (already 512-aligned) so the real pitch equals the width. */
        size_t pitch, width = bytes >= (1u << 20) ? (1u << 20) : 512, height = bytes / width;
        if (!height) height = 1;
        return cuMemAllocPitch_v2(&h->ptr, &pitch, width, height, 4);
    }
    if (!strcmp(path, "async")) {
        h->kind = 1;
        return cuMemAllocAsync(&h->ptr, bytes, NULL);
    }
    if (!strcmp(path, "pool")) {
        h->kind = 1;
        return cuMemAllocFromPoolAsync(&h->ptr, bytes, pool, NULL);
    }
    if (!strcmp(path, "vmm")) {
        CUmemAllocationProp prop = {0};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        size_t g = 0;
        CUresult r = cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        if (r != CUDA_SUCCESS) return r;
        h->kind = 2;
        return cuMemCreate(&h->vmm, (bytes + g - 1) / g * g, &prop, 0);
    }
    if (!strcmp(path, "array") || !strcmp(path, "array3d") || !strcmp(path, "mipmap")) {
        /* 4-byte float texels, 1024 wide; one texel more than what is left must fail. */
        size_t texels = bytes / 4 ? bytes / 4 : 1;
        size_t w = texels >= 1024 ? 1024 : texels, hgt = texels / w;
        if (!strcmp(path, "array")) {
            CUDA_ARRAY_DESCRIPTOR d = {.Width = w, .Height = hgt, .Format = CU_AD_FORMAT_FLOAT,
                                       .NumChannels = 1};
            h->kind = 3;
            return cuArrayCreate_v2(&h->arr, &d);
        }
        CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = w, .Height = hgt, .Depth = 0,
                                      .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
        if (!strcmp(path, "array3d")) {
            h->kind = 3;
            return cuArray3DCreate_v2(&h->arr, &d3);
        }
        h->kind = 4;
        return cuMipmappedArrayCreate(&h->mip, &d3, 1);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult free_held(held_t *h) {
    switch (h->kind) {
    case 1: return cuMemFreeAsync(h->ptr, NULL);
    case 2: return cuMemRelease(h->vmm);
    case 3: return cuArrayDestroy(h->arr);
    case 4: return cuMipmappedArrayDestroy(h->mip);
    default: return cuMemFree_v2(h->ptr);
    }
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "alloc";
    int ordinal = argc > 2 ? atoi(argv[2]) : 0;
    CUdevice dev;
    CHECK(open_device(ordinal, &dev));
    if (!strcmp(path, "pool")) {
        CUmemPoolProps props = {0};
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = dev;
        CHECK(cuMemPoolCreate(&pool, &props));
    }
    size_t free0, total;
    CHECK(cuMemGetInfo_v2(&free0, &total));
    EXPECT(free0 > 0 && free0 < total);
    for (int round = 0; round < 2; round++) {
        held_t h, extra;
        CHECK(alloc_path(path, free0, &h, dev));
        size_t free1, t1;
        CHECK(cuMemGetInfo_v2(&free1, &t1));
        EXPECT(free1 == 0);
        CUresult r = alloc_path(path, 1, &extra, dev);
        if (r != CUDA_ERROR_OUT_OF_MEMORY) {
            printf("FAIL one more byte via %s returned %d, expected %d\n", path, (int)r,
                   (int)CUDA_ERROR_OUT_OF_MEMORY);
            return 1;
        }
        CHECK(free_held(&h));
        CHECK(cuMemGetInfo_v2(&free1, &t1));
        EXPECT(free1 == free0);
    }
    printf("OK %s filled=%zu total=%zu\n", path, free0, total);
    return 0;
}
