/* Shared helpers for the native test programs (run under LD_PRELOAD on simgpu). */
#ifndef TEST_COMMON_H
#define TEST_COMMON_H

#define _GNU_SOURCE
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(x)                                                                               \
    do {                                                                                       \
        CUresult r_ = (x);                                                                     \
        if (r_ != CUDA_SUCCESS) {                                                              \
            printf("FAIL %s = %d (line %d)\n", #x, (int)r_, __LINE__);                         \
            fflush(stdout);                                                                    \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

#define EXPECT(cond)                                                                           \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            printf("FAIL %s (line %d)\n", #cond, __LINE__);                                    \
            fflush(stdout);                                                                    \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Block until the test closes stdin: how a holding program keeps its memory while the test looks. */
static inline void wait_stdin_closed(void) {
    char buf[16];
    while (read(0, buf, sizeof buf) > 0) {
    }
}

/* cuInit + primary context of device `ordinal`, made current. */
static inline CUresult open_device(int ordinal, CUdevice *dev) {
    CUcontext ctx;
    CUresult r = cuInit(0);
    if (r != CUDA_SUCCESS) return r;
    if ((r = cuDeviceGet(dev, ordinal)) != CUDA_SUCCESS) return r;
    if ((r = cuDevicePrimaryCtxRetain(&ctx, *dev)) != CUDA_SUCCESS) return r;
    return cuCtxSetCurrent(ctx);
}

#endif
