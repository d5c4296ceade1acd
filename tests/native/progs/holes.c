/*
 * Holes found by the issue #13 attack runs, each tried through an entry point found three ways
 * (HOW: direct, dlsym, getproc). Usage: holes CASE HOW
 *   ctxrace     20 contexts created while another thread allocates and frees in a loop
 *   ctxmany     20 contexts, nothing else running (run without libnvidia-ml.so.1 loadable)
 *   poolstrand  8 GiB from the default pool with the release threshold at max, then from a
 *               created pool: refused, and the pools must not stay grown
 *   pooldev1    6 x 16 MiB from a pool created on device 1 while device 0's context is current
 *   asyncdev1   6 x 16 MiB cuMemAllocAsync on a stream of device 1's context, device 0 current
 *   ctxreuse    a device-1 context at the address of a destroyed device-0 context allocates
 *   vmmhost     20 x 256 MiB cuMemCreate located in host memory, then one of an unknown type
 *   vmmmapped   a mapped 32 MiB handle released, then 32 MiB allocated; unmapped, again
 *   graphupload three captured 24 MiB graphs: one uploaded (cuGraphUpload), one instantiated
 *               with CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, one more uploaded (over the slice)
 * Prints "RESULT codes=<CUresults> phys0=<bytes this process holds on device 0 by NVML>
 * phys1=<same, device 1> free=<cuMemGetInfo_v2 free on device 0>"; phys is "none" when NVML
 * cannot be loaded.
 */
#include "common.h"

#include "reach.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define MiB (1ull << 20)

typedef CUresult (*ctx2_fn)(CUcontext *, unsigned int, CUdevice);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*pool_alloc_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*upload_fn)(CUgraphExec, CUstream);
typedef CUresult (*with_params_fn)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);

static volatile int churn_stop;
static _Atomic unsigned long churned;
static CUcontext churn_ctx;

/* Allocate and free in a loop: the process's own usage keeps dropping while contexts are made. */
static void *churn(void *arg) {
    (void)arg;
    cuCtxSetCurrent(churn_ctx);
    while (!churn_stop) {
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, 16 * MiB) == CUDA_SUCCESS) {
            cuMemFree_v2(p);
            churned++;
        }
    }
    return NULL;
}

static CUmemAllocationProp vmm_prop(CUmemLocationType type, int id) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = type;
    prop.location.id = id;
    return prop;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *what = argv[1];
    how = argv[2];
    CUdevice dev;
    CUcontext primary;
    CHECK(open_device(0, &dev));
    CHECK(cuCtxGetCurrent(&primary));
    char codes[1024] = "";
    size_t len = 0;
#define RECORD(r) len += (size_t)snprintf(codes + len, sizeof codes - len, "%s%d", len ? "," : "", (int)(r))

    if (!strcmp(what, "ctxrace") || !strcmp(what, "ctxmany")) {
        ctx2_fn create = (ctx2_fn)entry("cuCtxCreate_v2", "cuCtxCreate", 3020, (void *)&cuCtxCreate_v2);
        EXPECT(create != NULL);
        pthread_t t;
        int race = !strcmp(what, "ctxrace");
        churn_ctx = primary;
        /* Rounds of 20 contexts (racing: 50 rounds, so the frees land in many creations). */
        size_t least = (size_t)-1;
        int rounds = race ? 50 : 1, n = 0;
        for (int round = 0; round < rounds; round++) {
            CUcontext made[20];
            n = 0;
            len = 0;
            if (race) { /* the churn really runs before the contexts come */
                churn_stop = 0;
                churned = 0;
                EXPECT(pthread_create(&t, NULL, churn, NULL) == 0);
                while (churned < 200) sched_yield();
            }
            for (int i = 0; i < 20; i++) {
                CUcontext c = NULL;
                CUresult r = create(&c, 0, dev);
                RECORD(r);
                if (r == CUDA_SUCCESS) made[n++] = c;
                CHECK(cuCtxSetCurrent(primary));
            }
            if (race) {
                churn_stop = 1;
                pthread_join(t, NULL);
            }
            size_t f = 0, tot = 0;
            CHECK(cuMemGetInfo_v2(&f, &tot));
            if (round == rounds - 1) printf("charged_all=%zu\n", tot - f);
            /* What each context was charged: what its destroy gives back. */
            for (int i = 0; i < n; i++) {
                size_t before = 0, after = 0;
                CHECK(cuCtxSetCurrent(primary));
                CHECK(cuMemGetInfo_v2(&before, &tot));
                CHECK(cuCtxDestroy_v2(made[i]));
                CHECK(cuCtxSetCurrent(primary));
                CHECK(cuMemGetInfo_v2(&after, &tot));
                if (after - before < least) least = after - before;
            }
        }
        printf("least_charge=%zu\n", n ? least : 0);
    } else if (!strcmp(what, "poolstrand")) {
        alloc_async_fn alloc =
            (alloc_async_fn)entry("cuMemAllocAsync", "cuMemAllocAsync", 11020, (void *)&cuMemAllocAsync);
        pool_alloc_fn from = (pool_alloc_fn)entry("cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync",
                                                  11020, (void *)&cuMemAllocFromPoolAsync);
        EXPECT(alloc && from);
        CUstream s;
        CUmemoryPool def, made;
        cuuint64_t max = ~0ull;
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CHECK(cuDeviceGetDefaultMemPool(&def, dev));
        CHECK(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &max));
        CUmemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = dev;
        CHECK(cuMemPoolCreate(&made, &props));
        CHECK(cuMemPoolSetAttribute(made, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &max));
        CUdeviceptr p;
        RECORD(alloc(&p, 8192 * MiB, s));
        RECORD(from(&p, 8192 * MiB, made, s));
        /* Within the slice it still works, and stays charged while the pool holds it. */
        RECORD(alloc(&p, 16 * MiB, s));
        CHECK(cuMemFreeAsync(p, s));
        CHECK(cuStreamSynchronize(s));
        cuuint64_t r1 = 0, r2 = 0;
        CHECK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r1));
        CHECK(cuMemPoolGetAttribute(made, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r2));
        printf("reserved_default=%llu reserved_made=%llu\n", (unsigned long long)r1,
               (unsigned long long)r2);
    } else if (!strcmp(what, "pooldev1") || !strcmp(what, "asyncdev1")) {
        CUstream s;
        CUmemoryPool pool = NULL;
        if (!strcmp(what, "pooldev1")) {
            CUmemPoolProps props;
            memset(&props, 0, sizeof props);
            props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
            props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            props.location.id = 1;
            CHECK(cuMemPoolCreate(&pool, &props));
            CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        } else {
            CUcontext other;
            CUresult rr = cuDevicePrimaryCtxRetain(&other, 1);
            printf("ctx1=%d\n", (int)rr); /* refused when device 1 is outside the slice */
            if (rr != CUDA_SUCCESS) goto done_async;
            CHECK(cuCtxSetCurrent(other));
            CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
            CHECK(cuCtxSetCurrent(primary));
        }
        pool_alloc_fn from = (pool_alloc_fn)entry("cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync",
                                                  11020, (void *)&cuMemAllocFromPoolAsync);
        alloc_async_fn alloc =
            (alloc_async_fn)entry("cuMemAllocAsync", "cuMemAllocAsync", 11020, (void *)&cuMemAllocAsync);
        EXPECT(from && alloc);
        for (int i = 0; i < 6; i++) {
            CUdeviceptr p;
            RECORD(pool ? from(&p, 16 * MiB, pool, s) : alloc(&p, 16 * MiB, s));
        }
    done_async:;
    } else if (!strcmp(what, "ctxreuse")) {
        ctx2_fn create = (ctx2_fn)entry("cuCtxCreate_v2", "cuCtxCreate", 3020, (void *)&cuCtxCreate_v2);
        alloc_fn alloc = (alloc_fn)entry("cuMemAlloc_v2", "cuMemAlloc", 3020, (void *)&cuMemAlloc_v2);
        EXPECT(create && alloc);
        CUcontext a, b;
        CUdeviceptr p;
        CHECK(create(&a, 0, dev));
        CHECK(cuCtxSetCurrent(a));
        CHECK(alloc(&p, MiB)); /* device 0, in the slice: the thread now knows context a */
        CHECK(cuMemFree_v2(p));
        CHECK(cuCtxDestroy_v2(a));
        CHECK(create(&b, 0, 1));
        CHECK(cuCtxSetCurrent(b));
        printf("reused=%d\n", a == b);
        RECORD(alloc(&p, 32 * MiB)); /* device 1, outside the slice */
        CHECK(cuCtxSetCurrent(primary));
    } else if (!strcmp(what, "vmmhost")) {
        create_fn create = (create_fn)entry("cuMemCreate", "cuMemCreate", 10020, (void *)&cuMemCreate);
        EXPECT(create != NULL);
        CUmemAllocationProp host = vmm_prop(CU_MEM_LOCATION_TYPE_HOST, 0);
        CUmemAllocationProp numa = vmm_prop(CU_MEM_LOCATION_TYPE_HOST_NUMA, 0);
        CUmemAllocationProp odd = vmm_prop((CUmemLocationType)0x7, 0);
        CUmemGenericAllocationHandle h;
        for (int i = 0; i < 20; i++) RECORD(create(&h, 256 * MiB, i % 2 ? &numa : &host, 0));
        printf("host_phys0=%lld\n", nvml_process_bytes(0));
        RECORD(create(&h, 256 * MiB, &odd, 0));
    } else if (!strcmp(what, "vmmmapped")) {
        create_fn create = (create_fn)entry("cuMemCreate", "cuMemCreate", 10020, (void *)&cuMemCreate);
        release_fn release = (release_fn)entry("cuMemRelease", "cuMemRelease", 10020, (void *)&cuMemRelease);
        EXPECT(create && release);
        CUmemAllocationProp prop = vmm_prop(CU_MEM_LOCATION_TYPE_DEVICE, dev);
        CUmemGenericAllocationHandle h;
        CUdeviceptr va, p;
        CHECK(create(&h, 32 * MiB, &prop, 0));
        CHECK(cuMemAddressReserve(&va, 32 * MiB, 0, 0, 0));
        CHECK(cuMemMap(va, 32 * MiB, 0, h, 0));
        CHECK(release(h));
        RECORD(cuMemAlloc_v2(&p, 32 * MiB)); /* the mapped memory is still on the card */
        printf("mapped_phys0=%lld\n", nvml_process_bytes(0));
        CHECK(cuMemUnmap(va, 32 * MiB));
        RECORD(cuMemAlloc_v2(&p, 32 * MiB)); /* now it is gone */
        CHECK(cuMemFree_v2(p));
        CHECK(cuMemAddressFree(va, 32 * MiB));
    } else if (!strcmp(what, "vmmretain")) {
        /* Retain the handle of a mapped address, release the original, unmap: the retained
         * handle still holds the memory (issue #27, item 7). */
        CUmemAllocationProp prop = vmm_prop(CU_MEM_LOCATION_TYPE_DEVICE, dev);
        CUmemGenericAllocationHandle h, again;
        CUdeviceptr va, p;
        CHECK(cuMemCreate(&h, 32 * MiB, &prop, 0));
        CHECK(cuMemAddressReserve(&va, 32 * MiB, 0, 0, 0));
        CHECK(cuMemMap(va, 32 * MiB, 0, h, 0));
        CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va));
        CHECK(cuMemRelease(h));
        CHECK(cuMemUnmap(va, 32 * MiB));
        RECORD(cuMemAlloc_v2(&p, 48 * MiB)); /* 32 MiB still held: over the slice */
        printf("retained_phys0=%lld\n", nvml_process_bytes(0));
        CHECK(cuMemRelease(again));
        RECORD(cuMemAlloc_v2(&p, 48 * MiB)); /* now it is gone */
        CHECK(cuMemFree_v2(p));
        CHECK(cuMemAddressFree(va, 32 * MiB));
    } else if (!strcmp(what, "graphupload")) {
        upload_fn upload = (upload_fn)entry("cuGraphUpload", "cuGraphUpload", 11010, (void *)&cuGraphUpload);
        with_params_fn with = (with_params_fn)entry("cuGraphInstantiateWithParams",
                                                    "cuGraphInstantiateWithParams", 12000,
                                                    (void *)&cuGraphInstantiateWithParams);
        EXPECT(upload && with);
        CUstream s;
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CUgraphExec e[3];
        for (int i = 0; i < 3; i++) {
            CUgraph g;
            CUdeviceptr p;
            CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
            CHECK(cuMemAllocAsync(&p, 24 * MiB, s));
            CHECK(cuMemFreeAsync(p, s));
            CHECK(cuStreamEndCapture(s, &g));
            if (i == 1) {
                CUDA_GRAPH_INSTANTIATE_PARAMS ip;
                memset(&ip, 0, sizeof ip);
                ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
                ip.hUploadStream = s;
                RECORD(with(&e[i], g, &ip));
            } else {
                CHECK(cuGraphInstantiateWithFlags(&e[i], g, 0));
                RECORD(upload(e[i], s));
            }
            printf("phys_after%d=%lld\n", i, nvml_process_bytes(0));
        }
    } else {
        printf("FAIL unknown case %s\n", what);
        return 2;
    }
    size_t free = 0, total = 0;
    CHECK(cuMemGetInfo_v2(&free, &total));
    printf("RESULT codes=%s phys0=%lld phys1=%lld free=%zu\n", codes, nvml_process_bytes(0),
           nvml_process_bytes(1), free);
    return 0;
}
