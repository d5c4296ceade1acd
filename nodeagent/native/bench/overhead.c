/*
 * Per-call cost of the hooked driver calls: run once plainly and once with libtranche.so
 * preloaded; bench/native_overhead.py runs both side by side and subtracts. Prints one
 * "name ns_per_call" line per measured call (median of several rounds). Usage:
 *   overhead [ITERS] [wall|cpu]
 * cpu (the default) times each round by the thread's CPU clock: on a machine shared with
 * other work, time the thread spends descheduled is not the call's cost, and neither is time
 * the compute meter deliberately makes a launch sleep for budget (its system calls still
 * count). wall times by CLOCK_MONOTONIC.
 */
#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

static clockid_t clock_id = CLOCK_THREAD_CPUTIME_ID;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(clock_id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define ROUNDS 9
#define CHECK(x)                                                                               \
    do {                                                                                       \
        CUresult r_ = (x);                                                                     \
        if (r_ != CUDA_SUCCESS) {                                                              \
            fprintf(stderr, "%s failed: %d\n", #x, (int)r_);                                   \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 200000;
    if (argc > 2 && strcmp(argv[2], "wall") == 0) clock_id = CLOCK_MONOTONIC;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, KERNELS_PTX));
    CHECK(cuModuleGetFunction(&fn, mod, "spin"));
    uint64_t dur = 0; /* zero-length kernels: measure the call, not the device */
    void *params[] = {&dur};
    CUstream stream;
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    double launch[ROUNDS], alloc[ROUNDS], info[ROUNDS], async[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < iters; i++)
            cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
        uint64_t t1 = now_ns();
        for (int i = 0; i < iters / 4; i++) {
            CUdeviceptr p;
            cuMemAlloc_v2(&p, 4096);
            cuMemFree_v2(p);
        }
        uint64_t t2 = now_ns();
        for (int i = 0; i < iters; i++) {
            size_t f, t;
            cuMemGetInfo_v2(&f, &t);
        }
        uint64_t t3 = now_ns();
        for (int i = 0; i < iters / 4; i++) {
            CUdeviceptr p;
            cuMemAllocAsync(&p, 4096, stream);
            cuMemFreeAsync(p, stream);
        }
        uint64_t t4 = now_ns();
        launch[r] = (double)(t1 - t0) / iters;
        async[r] = (double)(t4 - t3) / (iters / 4);
        alloc[r] = (double)(t2 - t1) / (iters / 4);
        info[r] = (double)(t3 - t2) / iters;
    }
    CHECK(cuCtxSynchronize());
    qsort(launch, ROUNDS, sizeof(double), cmp);
    qsort(alloc, ROUNDS, sizeof(double), cmp);
    qsort(info, ROUNDS, sizeof(double), cmp);
    qsort(async, ROUNDS, sizeof(double), cmp);
    printf("cuLaunchKernel %.1f\n", launch[ROUNDS / 2]);
    printf("cuMemAlloc+cuMemFree %.1f\n", alloc[ROUNDS / 2]);
    printf("cuMemGetInfo %.1f\n", info[ROUNDS / 2]);
    printf("cuMemAllocAsync+cuMemFreeAsync %.1f\n", async[ROUNDS / 2]);
    return 0;
}
