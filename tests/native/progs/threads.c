/*
 * Launch counts from threads that end (the core counts launches per thread and adds them to
 * the region every 64 launches, at each budget lease and when the thread ends). Usage:
 *   threads THREADS LAUNCHES KERNEL_NS
 * Each thread makes device 0's primary context current, launches LAUNCHES kernels of
 * KERNEL_NS and returns; main joins them all, then prints "threads launched <n>".
 */
#include "common.h"
#include "kernels.h"

#include <pthread.h>

static CUcontext ctx;
static int launches;
static uint64_t dur;
static CUfunction fn;

static void *run(void *arg) {
    (void)arg;
    void *params[] = {&dur};
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return (void *)1;
    for (int i = 0; i < launches; i++)
        if (cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) != CUDA_SUCCESS)
            return (void *)1;
    return cuCtxSynchronize() == CUDA_SUCCESS ? NULL : (void *)1;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int n = atoi(argv[1]);
    launches = atoi(argv[2]);
    dur = strtoull(argv[3], NULL, 10);
    CUdevice dev;
    CUmodule mod;
    CHECK(open_device(0, &dev));
    CHECK(cuCtxGetCurrent(&ctx));
    CHECK(cuModuleLoadData(&mod, KERNELS_PTX));
    CHECK(cuModuleGetFunction(&fn, mod, "spin"));
    pthread_t t[64];
    EXPECT(n > 0 && n <= 64);
    for (int i = 0; i < n; i++) EXPECT(pthread_create(&t[i], NULL, run, NULL) == 0);
    for (int i = 0; i < n; i++) {
        void *rc;
        EXPECT(pthread_join(t[i], &rc) == 0 && rc == NULL);
    }
    printf("threads launched %d\n", n * launches);
    fflush(stdout);
    wait_stdin_closed(); /* the test reads the region while this process still runs */
    return 0;
}
