/*
 * Per-call cost of the hooked driver calls: run once plainly and once with libtranche.so
 * preloaded; bench/native_overhead.py runs both side by side and subtracts. Usage:
 *   overhead [ITERS] [primary|created] [KERNEL_NS] [GAP]
 * Works in the device's primary context or in one made by cuCtxCreate. Each call loop runs
 * ITERS calls (alloc+free: ITERS / 4 pairs) in each of 9 rounds, timed in chunks by the wall
 * clock (CLOCK_MONOTONIC: what a program waits, the meter's own sleeps included) and by the
 * thread's CPU clock beside it; the launch loop's kernels run KERNEL_NS each (default 20), and
 * each launch is followed by GAP iterations of a spin loop (default 0): a loop paced so that
 * its device use stays below a metered share (a sample of a tiny kernel reads the driver's
 * launch call, more on a busy machine: see the README). So each launch is timed around the
 * call alone, less the cost of the clock reads (timed apart, around nothing).
 * Prints one "name wall_ns cpu_ns" line per call (the median chunk's per-call time) and
 * "launch_loop_ns <total wall ns of the launch loops>" (for the throttle's share of it).
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

static uint64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct {
    uint64_t wall, cpu;
} stamp_t;

static stamp_t stamp(void) {
    return (stamp_t){clock_ns(CLOCK_MONOTONIC), clock_ns(CLOCK_THREAD_CPUTIME_ID)};
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define ROUNDS 9
#define CHUNK 1000
#define CALLS 5 /* the four calls, and the launch loop's spin alone */
#define CHECK(x)                                                                               \
    do {                                                                                       \
        CUresult r_ = (x);                                                                     \
        if (r_ != CUDA_SUCCESS) {                                                              \
            fprintf(stderr, "%s failed: %d\n", #x, (int)r_);                                   \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

static const char *const names[CALLS] = {"cuLaunchKernel", "cuMemAlloc+cuMemFree",
                                         "cuMemGetInfo", "cuMemAllocAsync+cuMemFreeAsync",
                                         "spin"};

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 200000;
    int created = argc > 2 && strcmp(argv[2], "created") == 0;
    uint64_t dur = argc > 3 ? strtoull(argv[3], NULL, 10) : 20;
    int gap = argc > 4 ? atoi(argv[4]) : 0;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    if (created) {
        CHECK(cuCtxCreate_v2(&ctx, 0, dev));
    } else {
        CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    }
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, KERNELS_PTX)); /* real PTX: the bench runs on a real GPU too */
    CHECK(cuModuleGetFunction(&fn, mod, "spin"));
    void *params[] = {&dur};
    CUstream stream;
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    /* Each loop is timed in chunks of CHUNK calls and the figure is the median chunk: a
     * chunk in which the thread was descheduled (or the meter waited) is an outlier, not the
     * call's cost, on a busy machine too. */
    int nchunks = ROUNDS * (iters / CHUNK);
    double *wall[CALLS], *cpu[CALLS];
    int n[CALLS] = {0};
    for (int c = 0; c < CALLS; c++) {
        wall[c] = calloc((size_t)nchunks, sizeof(double));
        cpu[c] = calloc((size_t)nchunks, sizeof(double));
        if (!wall[c] || !cpu[c]) return 1;
    }
    uint64_t launch_loop = 0;
    for (int r = 0; r < ROUNDS; r++) {
        for (int c = 0; c < CALLS; c++) {
            int chunk = c % 2 ? CHUNK / 4 : CHUNK; /* alloc+free pairs: a quarter as many */
            stamp_t loop0 = stamp();
            for (int k = 0; k < iters / CHUNK; k++) {
                stamp_t t0 = stamp();
                stamp_t bracketed = {0, 0}; /* launch loop: time inside the calls alone */
                for (int i = 0; i < chunk; i++) {
                    CUdeviceptr p;
                    size_t f, tot;
                    switch (c) {
                    case 0: {
                        stamp_t a = stamp();
                        cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
                        stamp_t b = stamp();
                        bracketed.wall += b.wall - a.wall;
                        bracketed.cpu += b.cpu - a.cpu;
                        for (volatile int g = 0; g < gap; g++) {
                        }
                        break;
                    }
                    case 1:
                        cuMemAlloc_v2(&p, 4096);
                        cuMemFree_v2(p);
                        break;
                    case 2: cuMemGetInfo_v2(&f, &tot); break;
                    case 3:
                        cuMemAllocAsync(&p, 4096, stream);
                        cuMemFreeAsync(p, stream);
                        break;
                    default: {
                        stamp_t a = stamp(), b = stamp();
                        bracketed.wall += b.wall - a.wall;
                        bracketed.cpu += b.cpu - a.cpu;
                        for (volatile int g = 0; g < gap; g++) {
                        }
                        break;
                    }
                    }
                }
                stamp_t t1 = stamp();
                int alone = c == 0 || c == CALLS - 1;
                wall[c][n[c]] = (double)(alone ? bracketed.wall : t1.wall - t0.wall) / chunk;
                cpu[c][n[c]++] = (double)(alone ? bracketed.cpu : t1.cpu - t0.cpu) / chunk;
            }
            if (c == 0) launch_loop += stamp().wall - loop0.wall;
        }
    }
    CHECK(cuCtxSynchronize());
    double med_wall[CALLS], med_cpu[CALLS];
    for (int c = 0; c < CALLS; c++) {
        qsort(wall[c], (size_t)n[c], sizeof(double), cmp);
        qsort(cpu[c], (size_t)n[c], sizeof(double), cmp);
        med_wall[c] = wall[c][n[c] / 2];
        med_cpu[c] = cpu[c][n[c] / 2];
    }
    for (int c = 0; c < CALLS - 1; c++) {
        double w = med_wall[c] - (c == 0 ? med_wall[CALLS - 1] : 0);
        double u = med_cpu[c] - (c == 0 ? med_cpu[CALLS - 1] : 0);
        printf("%s %.1f %.1f\n", names[c], w, u);
    }
    printf("launch_loop_ns %llu\n", (unsigned long long)launch_loop);
    return 0;
}
