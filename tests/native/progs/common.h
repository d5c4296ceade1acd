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

/* The device NVIDIA_VISIBLE_DEVICES names (the simulated node shows every GPU), else 0. */
static inline int visible_ordinal(void) {
    const char *want = getenv("NVIDIA_VISIBLE_DEVICES");
    int n = 0;
    if (!want || cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&n) != CUDA_SUCCESS) return 0;
    for (int i = 0; i < n; i++) {
        CUuuid u;
        char s[64];
        const unsigned char *b = (const unsigned char *)u.bytes;
        if (cuDeviceGetUuid(&u, i) != CUDA_SUCCESS) continue;
        snprintf(s, sizeof s,
                 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                 b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                 b[14], b[15]);
        if (!strncmp(want, s, strlen(s))) return i;
    }
    return 0;
}

#endif
