/*
 * Small probes for the native tests. Usage:
 *   probe info [DEV]          print what the process sees of device DEV
 *   probe hold BYTES          allocate BYTES, print "held", wait for stdin to close
 *   probe race SEED           print "ready", wait for a stdin line, then allocate random
 *                             chunks until the cap with churn; report held bytes
 *   probe getproc             check run-time symbol lookups all land on the core's hooks
 *   probe meter               40 launches of 1 ms through each launch API, 40 graph launches;
 *                             print "meter launches <n> elapsed_ns <ns>"
 */
#include "common.h"
#include "kernels.h"

#include <dlfcn.h>
#include <unistd.h>

static int info(int ordinal) {
    CUdevice dev;
    CHECK(open_device(ordinal, &dev));
    size_t free, total, devtotal;
    char name[128];
    int major, minor, count;
    CHECK(cuMemGetInfo_v2(&free, &total));
    CHECK(cuDeviceTotalMem_v2(&devtotal, dev));
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    CHECK(cuDeviceGetCount(&count));
    printf("free=%zu total=%zu device_total=%zu name=%s cc=%d.%d count=%d\n", free, total,
           devtotal, name, major, minor, count);
    return 0;
}

static int hold(uint64_t bytes) {
    CUdevice dev;
    CUdeviceptr p;
    CHECK(open_device(0, &dev));
    CHECK(cuMemAlloc_v2(&p, bytes));
    printf("held %llu\n", (unsigned long long)bytes);
    fflush(stdout);
    wait_stdin_closed();
    CHECK(cuMemFree_v2(p));
    return 0;
}

#define MAXP 4096
static int race(unsigned seed) {
    CUdevice dev;
    CHECK(open_device(0, &dev));
    static CUdeviceptr ptr[MAXP];
    static size_t sz[MAXP];
    int n = 0, ooms = 0;
    uint64_t held = 0;
    srand(seed);
    /* Every racer has its context before anyone races, so all contend for the same bytes. */
    printf("ready\n");
    fflush(stdout);
    char go[16];
    if (!fgets(go, sizeof go, stdin)) return 1;
    /* Churn: grab and drop random chunks so the counters see many concurrent CAS races. */
    for (int i = 0; i < 3000; i++) {
        if (n > 0 && (rand() % 3 == 0 || n == MAXP)) {
            int k = rand() % n;
            CHECK(cuMemFree_v2(ptr[k]));
            held -= sz[k];
            ptr[k] = ptr[n - 1];
            sz[k] = sz[n - 1];
            n--;
            continue;
        }
        size_t s = (size_t)(1 + rand() % 256) << 12;
        CUresult r = cuMemAlloc_v2(&ptr[n], s);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            ooms++;
            continue;
        }
        CHECK(r);
        sz[n++] = s;
        held += s;
    }
    /* Then fill: keep taking 4 KiB pages until refused, and hold them. */
    while (n < MAXP) {
        CUresult r = cuMemAlloc_v2(&ptr[n], 4096);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) break;
        CHECK(r);
        sz[n++] = 4096;
        held += 4096;
    }
    printf("held %llu ooms %d\n", (unsigned long long)held, ooms);
    fflush(stdout);
    wait_stdin_closed();
    for (int k = 0; k < n; k++) CHECK(cuMemFree_v2(ptr[k]));
    return 0;
}

static int from_core(void *p) {
    Dl_info info;
    return p && dladdr(p, &info) && info.dli_fname && strstr(info.dli_fname, "libtranche");
}

static int getproc(void) {
    CUdevice dev;
    CHECK(open_device(0, &dev));
    struct {
        const char *name;
        cuuint64_t flags;
    } cases[] = {
        {"cuMemAlloc", CU_GET_PROC_ADDRESS_DEFAULT},
        {"cuMemFree", CU_GET_PROC_ADDRESS_DEFAULT},
        {"cuMemGetInfo", CU_GET_PROC_ADDRESS_DEFAULT},
        {"cuLaunchKernel", CU_GET_PROC_ADDRESS_DEFAULT},
        {"cuLaunchKernel", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
        {"cuMemAllocAsync", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
        {"cuGraphLaunch", CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
        {"cuGetProcAddress", CU_GET_PROC_ADDRESS_DEFAULT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *p = NULL;
        CUdriverProcAddressQueryResult st;
        CHECK(cuGetProcAddress_v2(cases[i].name, &p, 12090, cases[i].flags, &st));
        if (!from_core(p)) {
            printf("FAIL cuGetProcAddress(%s, flags=%llu) bypasses the core\n", cases[i].name,
                   (unsigned long long)cases[i].flags);
            return 1;
        }
    }
    /* The way the CUDA runtime and PyTorch find the driver: dlopen + dlsym. */
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    EXPECT(h != NULL);
    const char *names[] = {"cuMemAlloc_v2", "cuLaunchKernel_ptsz", "cuMemCreate",
                           "cuGetProcAddress_v2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!from_core(dlsym(h, names[i]))) {
            printf("FAIL dlsym(%s) bypasses the core\n", names[i]);
            return 1;
        }
    }
    /* And what came back is enforced: more than the slice through the looked-up pointer. */
    CUresult (*alloc)(CUdeviceptr *, size_t) = NULL;
    CHECK(cuGetProcAddress_v2("cuMemAlloc", (void **)&alloc, 12090, 0, NULL));
    size_t free, total;
    CHECK(cuMemGetInfo_v2(&free, &total));
    CUdeviceptr p;
    EXPECT(alloc(&p, total + 1) == CUDA_ERROR_OUT_OF_MEMORY);
    printf("OK getproc\n");
    return 0;
}

static int meter(void) {
    CUdevice dev;
    CUmodule mod;
    CUfunction fn;
    CUgraph g;
    CUgraphExec ge;
    CHECK(open_device(0, &dev));
    CHECK(cuModuleLoadData(&mod, KERNELS_PTX));
    CHECK(cuModuleGetFunction(&fn, mod, "spin"));
    CHECK(cuGraphCreate(&g, 0));
    CHECK(cuGraphInstantiateWithFlags(&ge, g, 0));
    CUresult (*launch_ptsz)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, unsigned, CUstream, void **, void **) = NULL;
    CHECK(cuGetProcAddress_v2("cuLaunchKernel", (void **)&launch_ptsz, 12090,
                              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
    uint64_t dur = 1000000;
    void *params[] = {&dur};
    CUlaunchConfig cfg = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1,
                          .blockDimY = 1, .blockDimZ = 1};
    uint64_t start = now_ns();
    int n = 0;
    for (int i = 0; i < 40; i++, n += 5) {
        CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
        CHECK(launch_ptsz(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
        CHECK(cuLaunchKernelEx(&cfg, fn, params, NULL));
        CHECK(cuLaunchCooperativeKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params));
        CHECK(cuGraphLaunch(ge, NULL));
        CHECK(cuCtxSynchronize());
    }
    printf("meter launches %d elapsed_ns %llu\n", n, (unsigned long long)(now_ns() - start));
    return 0;
}

int main(int argc, char **argv) {
    const char *cmd = argc > 1 ? argv[1] : "info";
    if (!strcmp(cmd, "info")) return info(argc > 2 ? atoi(argv[2]) : 0);
    if (!strcmp(cmd, "hold")) return hold(argc > 2 ? strtoull(argv[2], NULL, 10) : 1 << 20);
    if (!strcmp(cmd, "race")) return race(argc > 2 ? (unsigned)atoi(argv[2]) : 1);
    if (!strcmp(cmd, "getproc")) return getproc();
    if (!strcmp(cmd, "meter")) return meter();
    printf("FAIL unknown command %s\n", cmd);
    return 2;
}
