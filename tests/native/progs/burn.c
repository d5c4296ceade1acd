/*
 * Compute-share probe. Usage: burn DEVICE KERNEL_NS SECONDS
 * Launches back-to-back simulated kernels of KERNEL_NS for SECONDS (at most 4 in flight, as a
 * real training loop would), then reports the share of the device's time it got:
 *   "share <percent> launched <n> elapsed_ns <ns>"
 */
#include "common.h"
#include "kernels.h"

#define INFLIGHT 4

int main(int argc, char **argv) {
    int ordinal = argc > 1 ? atoi(argv[1]) : 0;
    uint64_t dur = argc > 2 ? strtoull(argv[2], NULL, 10) : 2000000;
    double seconds = argc > 3 ? atof(argv[3]) : 10.0;
    CUdevice dev;
    CUmodule mod;
    CUfunction fn;
    CHECK(open_device(ordinal, &dev));
    CHECK(cuModuleLoadData(&mod, KERNELS_PTX));
    CHECK(cuModuleGetFunction(&fn, mod, "spin"));
    CUevent ev[INFLIGHT];
    for (int i = 0; i < INFLIGHT; i++) CHECK(cuEventCreate(&ev[i], 0));
    void *params[] = {&dur};
    uint64_t start = now_ns(), stop = start + (uint64_t)(seconds * 1e9);
    uint64_t n = 0;
    while (now_ns() < stop) {
        if (n >= INFLIGHT) CHECK(cuEventSynchronize(ev[n % INFLIGHT]));
        CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
        CHECK(cuEventRecord(ev[n % INFLIGHT], NULL));
        n++;
    }
    CHECK(cuCtxSynchronize());
    uint64_t elapsed = now_ns() - start;
    printf("share %.2f launched %llu elapsed_ns %llu\n", 100.0 * (double)(n * dur) / elapsed,
           (unsigned long long)n, (unsigned long long)elapsed);
    return 0;
}
