/*
 * A matmul-like kernel loop for throughput with and without the core (bench/gpu_check_driver.sh).
 * Usage: fmaloop SECONDS ITERS
 * Launches the fma kernel (ITERS rounds a thread; 4 blocks of 256 threads per SM, so the whole
 * card is busy) back to back on one stream for SECONDS, two in flight, and prints
 *   "fma kernels <n> elapsed_ns <ns> per_s <kernels a second>"
 */
#include "common.h"
#include "kernels.h"

#define BLOCK 256

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    double seconds = atof(argv[1]);
    uint64_t iters = strtoull(argv[2], NULL, 10);
    CUdevice dev;
    CUmodule mod;
    CUfunction fn;
    CHECK(open_device(visible_ordinal(), &dev));
    int sms = 0;
    CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    EXPECT(sms > 0);
    unsigned int blocks = 4u * (unsigned int)sms;
    CUdeviceptr out;
    CHECK(cuMemAlloc_v2(&out, (size_t)blocks * BLOCK * sizeof(float)));
    CHECK(cuModuleLoadData(&mod, KERNELS_PTX));
    CHECK(cuModuleGetFunction(&fn, mod, "fma"));
    CUevent ev[2];
    for (int i = 0; i < 2; i++) CHECK(cuEventCreate(&ev[i], 0));
    void *params[] = {&iters, &out};
    /* One launch first: the JIT and the first launch's setup are not throughput. */
    CHECK(cuLaunchKernel(fn, blocks, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL));
    CHECK(cuCtxSynchronize());
    uint64_t start = now_ns(), stop = start + (uint64_t)(seconds * 1e9), n = 0;
    while (now_ns() < stop) {
        if (n >= 2) CHECK(cuEventSynchronize(ev[n % 2]));
        CHECK(cuLaunchKernel(fn, blocks, 1, 1, BLOCK, 1, 1, 0, NULL, params, NULL));
        CHECK(cuEventRecord(ev[n % 2], NULL));
        n++;
    }
    CHECK(cuCtxSynchronize());
    uint64_t elapsed = now_ns() - start;
    printf("fma kernels %llu elapsed_ns %llu per_s %.2f\n", (unsigned long long)n,
           (unsigned long long)elapsed, 1e9 * (double)n / (double)elapsed);
    return 0;
}
