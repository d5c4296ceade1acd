/*
 * Tries to take more device memory than the slice through entry points other than the _v2
 * allocation calls: the legacy v1 calls, cuCtxCreate_v3/_v4, green contexts, graph memory
 * nodes and async allocations on a capturing stream (graphs launched), each reached three ways (HOW): linked
 * directly, through dlopen("libcuda.so.1") + dlsym, and through cuGetProcAddress with the
 * cudaVersion that selects that variant. And to run kernels outside the compute budget by
 * launching on an explicit stream with no context current (nocontext). Usage:
 *   escape PATH HOW    PATH: alloc pitch array array3d ctx1 ctx3 ctx4 green graph graphnode
 *                            capture nocontext nocontextpool
 *                      HOW: direct dlsym getproc
 *   escape info HOW    the v1 cuMemGetInfo / cuDeviceTotalMem views
 *   escape lookup -    cuGetProcAddress hands out the hook of the very variant the
 *                      cudaVersion selects (signatures match), never the real one
 * Prints "RESULT codes=<each attempt's CUresult> phys=<bytes this process holds on device 0,
 * as the driver's NVML lists it> free=<cuMemGetInfo_v2 free afterwards>".
 */
#include "common.h"

#include "reach.h"

#define MiB (1ull << 20)

/* Device 0's bytes by NVML, all ones when NVML cannot say. */
static uint64_t phys_used(void) {
    long long bytes = nvml_process_bytes(0);
    return bytes < 0 ? ~0ull : (uint64_t)bytes;
}

typedef CUresult (*alloc1_fn)(CUdeviceptr_v1 *, unsigned int);
typedef CUresult (*pitch1_fn)(CUdeviceptr_v1 *, unsigned int *, unsigned int, unsigned int,
                              unsigned int);
typedef CUresult (*array1_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR_v1 *);
typedef CUresult (*array3d1_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR_v1 *);
typedef CUresult (*ctx1_fn)(CUcontext *, unsigned int, CUdevice);
typedef CUresult (*ctx3_fn)(CUcontext *, CUexecAffinityParam *, int, unsigned int, CUdevice);
typedef CUresult (*ctx4_fn)(CUcontext *, CUctxCreateParams *, unsigned int, CUdevice);
typedef CUresult (*destroy_fn)(CUcontext);
typedef CUresult (*memnode_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                               CUDA_MEM_ALLOC_NODE_PARAMS *);
typedef CUresult (*addnode_fn)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                               CUgraphNodeParams *);
typedef CUresult (*info1_fn)(unsigned int *, unsigned int *);
typedef CUresult (*green_fn)(CUgreenCtx *, CUdevResourceDesc, CUdevice, unsigned int);
typedef CUresult (*green_destroy_fn)(CUgreenCtx);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*pool_alloc_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*launch_fn)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                              unsigned int, unsigned int, unsigned int, CUstream, void **,
                              void **);
typedef CUresult (*total1_fn)(unsigned int *, CUdevice);
typedef CUresult (*inst_fn)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*graph_launch_fn)(CUgraphExec, CUstream);

#define ATTEMPTS 4
#define CTX_ATTEMPTS 20

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *path = argv[1];
    how = argv[2];
    CUdevice dev;
    CUcontext primary;
    CHECK(open_device(0, &dev));
    CHECK(cuCtxGetCurrent(&primary));
    char codes[512] = "";
    size_t len = 0;
#define RECORD(r) len += (size_t)snprintf(codes + len, sizeof codes - len, "%s%d", len ? "," : "", (int)(r))

    if (!strcmp(path, "alloc") || !strcmp(path, "pitch")) {
        int pitch = !strcmp(path, "pitch");
        void *f = pitch ? entry("cuMemAllocPitch", "cuMemAllocPitch", 2000, (void *)&cuMemAllocPitch)
                        : entry("cuMemAlloc", "cuMemAlloc", 2000, (void *)&cuMemAlloc);
        EXPECT(f != NULL);
        for (int i = 0; i < ATTEMPTS; i++) {
            CUdeviceptr_v1 p;
            unsigned int pp;
            RECORD(pitch ? ((pitch1_fn)f)(&p, &pp, 40 * 1024, 1024, 4)
                         : ((alloc1_fn)f)(&p, 40 * MiB));
        }
        /* And a v1 free of anything is refused or harmless, never a crash. */
        void *fr = entry("cuMemFree", "cuMemFree", 2000, (void *)&cuMemFree);
        EXPECT(fr != NULL);
        RECORD(((CUresult(*)(CUdeviceptr_v1))fr)(0x1000));
    } else if (!strcmp(path, "array") || !strcmp(path, "array3d")) {
        int three = !strcmp(path, "array3d");
        void *f = three ? entry("cuArray3DCreate", "cuArray3DCreate", 2000, (void *)&cuArray3DCreate)
                        : entry("cuArrayCreate", "cuArrayCreate", 2000, (void *)&cuArrayCreate);
        EXPECT(f != NULL);
        for (int i = 0; i < ATTEMPTS; i++) {
            CUarray a;
            CUDA_ARRAY_DESCRIPTOR_v1 d = {10240, 1024, CU_AD_FORMAT_UNSIGNED_INT32, 1};
            CUDA_ARRAY3D_DESCRIPTOR_v1 d3 = {10240, 1024, 1, CU_AD_FORMAT_UNSIGNED_INT32, 1, 0};
            RECORD(three ? ((array3d1_fn)f)(&a, &d3) : ((array1_fn)f)(&a, &d));
        }
    } else if (!strncmp(path, "ctx", 3)) {
        void *f = !strcmp(path, "ctx1") ? entry("cuCtxCreate", "cuCtxCreate", 2000, (void *)&cuCtxCreate)
                  : !strcmp(path, "ctx3")
                      ? entry("cuCtxCreate_v3", "cuCtxCreate", 11040, (void *)&cuCtxCreate_v3)
                      : entry("cuCtxCreate_v4", "cuCtxCreate", 12050, (void *)&cuCtxCreate_v4);
        void *destroy = entry("cuCtxDestroy", "cuCtxDestroy", 2000, (void *)&cuCtxDestroy);
        EXPECT(f != NULL && destroy != NULL);
        CUcontext made[CTX_ATTEMPTS];
        int n = 0;
        for (int i = 0; i < CTX_ATTEMPTS; i++) {
            CUcontext c = NULL;
            CUresult r = !strcmp(path, "ctx1")   ? ((ctx1_fn)f)(&c, 0, dev)
                         : !strcmp(path, "ctx3") ? ((ctx3_fn)f)(&c, NULL, 0, 0, dev)
                                                 : ((ctx4_fn)f)(&c, NULL, 0, dev);
            RECORD(r);
            if (r == CUDA_SUCCESS) made[n++] = c;
            CHECK(cuCtxSetCurrent(primary));
        }
        printf("phys_peak=%llu\n", (unsigned long long)phys_used());
        /* Destroyed through the legacy cuCtxDestroy: the charge must go back. */
        for (int i = 0; i < n; i++) CHECK(((destroy_fn)destroy)(made[i]));
        CHECK(cuCtxSetCurrent(primary));
    } else if (!strcmp(path, "green")) {
        void *f = entry("cuGreenCtxCreate", "cuGreenCtxCreate", 12040, (void *)&cuGreenCtxCreate);
        void *destroy =
            entry("cuGreenCtxDestroy", "cuGreenCtxDestroy", 12040, (void *)&cuGreenCtxDestroy);
        EXPECT(f != NULL && destroy != NULL);
        CUdevResource sms;
        CUdevResourceDesc desc;
        CHECK(cuDeviceGetDevResource(dev, &sms, CU_DEV_RESOURCE_TYPE_SM));
        CHECK(cuDevResourceGenerateDesc(&desc, &sms, 1));
        CUgreenCtx made[CTX_ATTEMPTS];
        int n = 0;
        for (int i = 0; i < CTX_ATTEMPTS; i++) {
            CUgreenCtx g = NULL;
            CUresult r = ((green_fn)f)(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
            RECORD(r);
            if (r == CUDA_SUCCESS) made[n++] = g;
        }
        printf("phys_peak=%llu\n", (unsigned long long)phys_used());
        for (int i = 0; i < n; i++) CHECK(((green_destroy_fn)destroy)(made[i]));
    } else if (!strcmp(path, "capture") || !strcmp(path, "graph") || !strcmp(path, "graphnode")) {
        /* Graph memory: each attempt builds a graph with one 40 MiB allocation node (captured
         * from cuMemAllocAsync + cuMemFreeAsync, or added as a node), instantiates it and
         * launches it; the execs stay alive, so their memory stays in the graph pool. Codes:
         * the allocation's, then the launch's. */
        void *alloc = entry("cuMemAllocAsync", "cuMemAllocAsync", 11020, (void *)&cuMemAllocAsync);
        void *memnode = entry("cuGraphAddMemAllocNode", "cuGraphAddMemAllocNode", 11040,
                              (void *)&cuGraphAddMemAllocNode);
        void *addnode = entry("cuGraphAddNode", "cuGraphAddNode", 12020, (void *)&cuGraphAddNode);
        void *inst = entry("cuGraphInstantiateWithFlags", "cuGraphInstantiate", 12000,
                           (void *)&cuGraphInstantiateWithFlags);
        void *launch = entry("cuGraphLaunch", "cuGraphLaunch", 10000, (void *)&cuGraphLaunch);
        EXPECT(alloc && memnode && addnode && inst && launch);
        CUstream s;
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CUgraph graphs[ATTEMPTS];
        CUgraphExec execs[ATTEMPTS];
        for (int i = 0; i < ATTEMPTS; i++) {
            CUgraph g;
            CUgraphNode n;
            CUresult ra;
            if (!strcmp(path, "capture")) {
                CUdeviceptr p = 0;
                CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
                ra = ((alloc_async_fn)alloc)(&p, 40 * MiB, s);
                if (ra == CUDA_SUCCESS) CHECK(cuMemFreeAsync(p, s));
                CHECK(cuStreamEndCapture(s, &g));
            } else {
                CUDA_MEM_ALLOC_NODE_PARAMS a;
                memset(&a, 0, sizeof a);
                a.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
                a.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
                a.poolProps.location.id = dev;
                a.bytesize = 40 * MiB;
                CUgraphNodeParams np;
                memset(&np, 0, sizeof np);
                np.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
                np.alloc.poolProps = a.poolProps;
                np.alloc.bytesize = a.bytesize;
                CHECK(cuGraphCreate(&g, 0));
                ra = !strcmp(path, "graphnode") ? ((addnode_fn)addnode)(&n, g, NULL, 0, &np)
                                                : ((memnode_fn)memnode)(&n, g, NULL, 0, &a);
            }
            RECORD(ra);
            CHECK(((inst_fn)inst)(&execs[i], g, 0));
            RECORD(((graph_launch_fn)launch)(execs[i], s));
            graphs[i] = g;
        }
        CHECK(cuStreamSynchronize(s));
        printf("phys_peak=%llu\n", (unsigned long long)phys_used());
        for (int i = 0; i < ATTEMPTS; i++) {
            CHECK(cuGraphExecDestroy(execs[i]));
            CHECK(cuGraphDestroy(graphs[i]));
        }
        /* The graph pool keeps its memory after the graphs are gone, until trimmed. */
        size_t kept_free = 0, kept_total = 0;
        CHECK(cuMemGetInfo_v2(&kept_free, &kept_total));
        printf("kept_phys=%llu kept_free=%zu\n", (unsigned long long)phys_used(), kept_free);
        CHECK(cuDeviceGraphMemTrim(dev));
        if (!strcmp(path, "capture")) { /* outside capture the same call is charged as usual */
            CUdeviceptr p;
            CHECK(((alloc_async_fn)alloc)(&p, MiB, s));
            CHECK(cuMemFreeAsync(p, s));
            CHECK(cuStreamSynchronize(s));
        }
    } else if (!strcmp(path, "nocontextpool")) {
        void *f = entry("cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync", 11020,
                        (void *)&cuMemAllocFromPoolAsync);
        EXPECT(f != NULL);
        CUmemoryPool pool;
        CUstream s;
        CHECK(cuDeviceGetMemPool(&pool, dev));
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CHECK(cuCtxSetCurrent(NULL));
        for (int i = 0; i < ATTEMPTS; i++) {
            CUdeviceptr p;
            RECORD(((pool_alloc_fn)f)(&p, 40 * MiB, pool, s));
        }
        CHECK(cuCtxSetCurrent(primary));
        printf("phys_peak=%llu\n", (unsigned long long)phys_used());
    } else if (!strcmp(path, "nocontext")) {
        void *f = entry("cuLaunchKernel", "cuLaunchKernel", 4000, (void *)&cuLaunchKernel);
        EXPECT(f != NULL);
        CUmodule mod;
        CUfunction fn;
        CUstream s;
        uint64_t dur = 1000000;
        void *params[] = {&dur};
        CHECK(cuModuleLoadData(&mod, "escape"));
        CHECK(cuModuleGetFunction(&fn, mod, "spin"));
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CHECK(cuCtxSetCurrent(NULL));
        for (int i = 0; i < ATTEMPTS; i++)
            RECORD(((launch_fn)f)(fn, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
        CHECK(cuCtxSetCurrent(primary));
        CHECK(cuStreamSynchronize(s));
    } else if (!strcmp(path, "info")) {
        void *fi = entry("cuMemGetInfo", "cuMemGetInfo", 2000, (void *)&cuMemGetInfo);
        void *ft = entry("cuDeviceTotalMem", "cuDeviceTotalMem", 2000, (void *)&cuDeviceTotalMem);
        EXPECT(fi != NULL && ft != NULL);
        unsigned int free1 = 0, total1 = 0, dtotal1 = 0;
        RECORD(((info1_fn)fi)(&free1, &total1));
        RECORD(((total1_fn)ft)(&dtotal1, dev));
        printf("free1=%u total1=%u device_total1=%u\n", free1, total1, dtotal1);
    } else if (!strcmp(path, "lookup")) {
        static const struct {
            const char *base, *variant;
            int version;
        } cases[] = {
            {"cuMemAlloc", "cuMemAlloc", 2000},       {"cuMemAlloc", "cuMemAlloc_v2", 12090},
            {"cuMemGetInfo", "cuMemGetInfo", 3010},   {"cuMemFree", "cuMemFree", 2000},
            {"cuCtxCreate", "cuCtxCreate", 2000},     {"cuCtxCreate", "cuCtxCreate_v2", 11000},
            {"cuCtxCreate", "cuCtxCreate_v3", 12000}, {"cuCtxCreate", "cuCtxCreate_v4", 12090},
            {"cuCtxDestroy", "cuCtxDestroy", 3020},   {"cuArrayCreate", "cuArrayCreate", 2000},
            {"cuGraphAddNode", "cuGraphAddNode", 12020},
            {"cuGraphAddNode", "cuGraphAddNode_v2", 12090},
            {"cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxRelease", 10000},
        };
        void *lib = dlopen("libcuda.so.1", RTLD_NOW);
        EXPECT(lib != NULL);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            void *p = NULL, *want = dlsym(lib, cases[i].variant);
            CHECK(cuGetProcAddress_v2(cases[i].base, &p, cases[i].version, 0, NULL));
            Dl_info di;
            int core = want && dladdr(want, &di) && di.dli_fname && strstr(di.dli_fname, "libtranche");
            if (!core || p != want) {
                printf("FAIL cuGetProcAddress(%s, %d) is not the core's %s\n", cases[i].base,
                       cases[i].version, cases[i].variant);
                return 1;
            }
        }
        RECORD(0);
    } else {
        printf("FAIL unknown path %s\n", path);
        return 2;
    }
    size_t free = 0, total = 0;
    CHECK(cuMemGetInfo_v2(&free, &total));
    printf("RESULT codes=%s phys=%llu free=%zu\n", codes, (unsigned long long)phys_used(), free);
    return 0;
}
