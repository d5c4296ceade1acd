/*
 * Compute share against a program that keeps the core's per-function estimates stale
 * (issue #44, items 2-4). Usage: estimates MODE SECONDS
 * Launches 1 ms simulated kernels (each function's first launch: 1 us) for SECONDS, keeping
 * work queued on the device, and prints the device time its kernels took over the wall time,
 * measured with raw clock system calls: "share <percent> launched <n>".
 *   rotate     a new function every 32 launches, on one stream (8 launches in flight)
 *   rotate4    a new function every 36 launches, its first 4 cheap: measured cheap as often
 *              as the core measures a new function before trusting its estimate
 *   threads16  a new thread every 16 launches, each launch on the next of 64 streams (idle by
 *              then), 8 in flight
 *   thread1    the same with a thread per launch
 *   fresh      each launch on the next of 1024 streams (idle by then) with 500 launches
 *              (500 ms) queued ahead, a new function every 200 launches
 *   cheaper    honest, not a trick: one function, 8 launches of 1 ms, then 1 us launches
 *              (each sample then settles below what the launches it stands for were charged)
 */
#include "common.h"

#include <pthread.h>
#include <sys/syscall.h>

#define STREAMS 1024
#define MAXFLIGHT 512

static uint64_t raw_now(void) {
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static CUcontext ctx;
static CUmodule mod;
static CUstream streams[STREAMS];
static CUevent ev[MAXFLIGHT];
static CUfunction fn;
static int nstreams = 1, inflight = 8, per_fn = 0, cheap_first = 1;
static uint64_t n, device_ns, stop;
static const uint64_t cheap = 1000, dear = 1000000;
static uint64_t dear_first; /* cheaper: this many dear launches, then cheap ones */

/* One launch: a new function when due (its first launch cheap), on the next stream. */
static int launch(void) {
    if (n >= (uint64_t)inflight) CHECK(cuEventSynchronize(ev[n % (uint64_t)inflight]));
    CUstream s = streams[n % (uint64_t)nstreams];
    const uint64_t *dur = &dear;
    if (per_fn && n % (uint64_t)per_fn == 0) {
        char name[32];
        snprintf(name, sizeof name, "f%llu", (unsigned long long)n);
        CHECK(cuModuleGetFunction(&fn, mod, name));
    }
    if (per_fn && n % (uint64_t)per_fn < (uint64_t)cheap_first) dur = &cheap;
    if (dear_first && n >= dear_first) dur = &cheap;
    void *params[] = {(void *)dur};
    CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    CHECK(cuEventRecord(ev[n % (uint64_t)inflight], s));
    device_ns += *dur;
    n++;
    return 0;
}

static int per_thread;

static void *worker(void *arg) {
    (void)arg;
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return (void *)1;
    for (int i = 0; i < per_thread && raw_now() < stop; i++)
        if (launch() != 0) return (void *)1;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    const char *mode = argv[1];
    double seconds = atof(argv[2]);
    CUdevice dev;
    CHECK(open_device(0, &dev));
    CHECK(cuCtxGetCurrent(&ctx));
    CHECK(cuModuleLoadData(&mod, "estimates"));
    CHECK(cuModuleGetFunction(&fn, mod, "spin"));
    if (!strcmp(mode, "rotate")) {
        per_fn = 32;
    } else if (!strcmp(mode, "rotate4")) {
        per_fn = 36;
        cheap_first = 4;
    } else if (!strcmp(mode, "threads16") || !strcmp(mode, "thread1")) {
        per_thread = mode[6] == '1' && mode[7] == '6' ? 16 : 1;
        nstreams = 64;
        void *cheap_params[] = {(void *)&cheap};
        CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, cheap_params, NULL));
        CHECK(cuCtxSynchronize());
    } else if (!strcmp(mode, "cheaper")) {
        dear_first = 8;
    } else if (!strcmp(mode, "fresh")) {
        per_fn = 200;
        nstreams = STREAMS;
        inflight = 500;
    } else {
        return 2;
    }
    for (int i = 0; i < nstreams; i++) CHECK(cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < inflight; i++) CHECK(cuEventCreate(&ev[i], 0));
    uint64_t start = raw_now();
    stop = start + (uint64_t)(seconds * 1e9);
    while (raw_now() < stop) {
        if (per_thread) {
            pthread_t t;
            void *rc = NULL;
            if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
            pthread_join(t, &rc);
            if (rc) return 1;
        } else if (launch() != 0) {
            return 1;
        }
    }
    CHECK(cuCtxSynchronize());
    uint64_t elapsed = raw_now() - start;
    printf("share %.2f launched %llu\n", 100.0 * (double)device_ns / (double)elapsed,
           (unsigned long long)n);
    return 0;
}
