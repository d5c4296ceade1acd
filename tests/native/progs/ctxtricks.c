/*
 * Contexts against the slice (issue #27, items 3, 4 and 6):
 *   ctxtricks outside ORDINAL   try every way to make a context on device ORDINAL (primary,
 *                               cuCtxCreate_v2/_v3/_v4, green): print each CUresult as
 *                               "retain=R v2=R v3=R v4=R green=R", then "held" and hold what it
 *                               got until stdin closes
 *   ctxtricks churn MS          for MS milliseconds create and destroy contexts on device 0
 *                               (v2 and green), retain/release/reset its primary context, from
 *                               two threads; print "made=N refused=M"
 */
#include "common.h"

#include <pthread.h>

static CUresult green(CUgreenCtx *g, CUdevice dev) {
    CUdevResource sms;
    CUdevResourceDesc desc;
    CUresult r = cuDeviceGetDevResource(dev, &sms, CU_DEV_RESOURCE_TYPE_SM);
    if (r == CUDA_SUCCESS) r = cuDevResourceGenerateDesc(&desc, &sms, 1);
    if (r == CUDA_SUCCESS) r = cuGreenCtxCreate(g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
    return r;
}

static int outside(int ordinal) {
    CUdevice dev;
    CUcontext p = NULL, c2 = NULL, c3 = NULL, c4 = NULL;
    CUgreenCtx g = NULL;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, ordinal));
    int r1 = cuDevicePrimaryCtxRetain(&p, dev);
    int r2 = cuCtxCreate_v2(&c2, 0, dev);
    int r3 = cuCtxCreate_v3(&c3, NULL, 0, 0, dev);
    int r4 = cuCtxCreate_v4(&c4, NULL, 0, dev);
    int r5 = green(&g, dev);
    printf("retain=%d v2=%d v3=%d v4=%d green=%d\n", r1, r2, r3, r4, r5);
    printf("held\n");
    fflush(stdout);
    wait_stdin_closed();
    return 0;
}

static uint64_t deadline;
static _Atomic long made, refused;

static void count(CUresult r) {
    if (r == CUDA_SUCCESS) made++;
    else refused++;
}

static void *creator(void *arg) {
    CUdevice dev = *(CUdevice *)arg;
    while (now_ns() < deadline) {
        CUcontext c;
        CUgreenCtx g;
        CUresult r = cuCtxCreate_v2(&c, 0, dev);
        count(r);
        if (r == CUDA_SUCCESS) cuCtxDestroy_v2(c);
        r = green(&g, dev);
        count(r);
        if (r == CUDA_SUCCESS) cuGreenCtxDestroy(g);
    }
    return NULL;
}

static void *primary(void *arg) {
    CUdevice dev = *(CUdevice *)arg;
    for (unsigned i = 0; now_ns() < deadline; i++) {
        CUcontext p;
        CUresult r = cuDevicePrimaryCtxRetain(&p, dev);
        count(r);
        if (r != CUDA_SUCCESS) continue;
        if (i % 3 == 0) cuDevicePrimaryCtxReset_v2(dev);
        else cuDevicePrimaryCtxRelease_v2(dev);
    }
    return NULL;
}

static int churn(long ms) {
    CUdevice dev;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    deadline = now_ns() + (uint64_t)ms * 1000000ull;
    pthread_t a, b;
    pthread_create(&a, NULL, creator, &dev);
    pthread_create(&b, NULL, primary, &dev);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("made=%ld refused=%ld\n", (long)made, (long)refused);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "outside")) return outside(atoi(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "churn")) return churn(atol(argv[2]));
    return 2;
}
