/*
 * Compute-share poisoning (issue #27, item 5). Usage: poison MODE SECONDS
 * Launches 1 ms simulated kernels on one stream kept busy (8 in flight, never drained) for
 * SECONDS, after poisoning the core's estimate one way, and prints the share of the device's
 * time it got, measured with raw clock system calls: "share <percent> launched <n>".
 *   honest      no trick
 *   firstcheap  the function's first launch takes 1 us
 *   capture     its first launch happens inside a stream capture (the graph is dropped)
 *   manyfns     5000 functions launched once at 1 us first, then the heavy work cycles
 *               through those past the core's 4096-entry table
 *   clock       the program's own clock_gettime/nanosleep lie to the core (time runs 100x
 *               fast, sleeps return at once); to anyone else (the simulated driver) they are
 *               true
 */
#include "common.h"

#include <dlfcn.h>
#include <sys/syscall.h>

#define INFLIGHT 8
#define NFN 5000

static int lying_clock;

static uint64_t raw_now(void) {
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int called_by_core(void *ret) {
    Dl_info info;
    return dladdr(ret, &info) && info.dli_fname && strstr(info.dli_fname, "libtranche");
}

/* Interposes libc's for everyone who binds to it, the core included (it must not). */
__attribute__((visibility("default"))) int clock_gettime(clockid_t id, struct timespec *ts) {
    syscall(SYS_clock_gettime, id, ts);
    if (lying_clock && called_by_core(__builtin_return_address(0))) {
        uint64_t ns = ((uint64_t)ts->tv_sec * 1000000000ull + (uint64_t)ts->tv_nsec) * 100;
        ts->tv_sec = (time_t)(ns / 1000000000ull);
        ts->tv_nsec = (long)(ns % 1000000000ull);
    }
    return 0;
}

__attribute__((visibility("default"))) int nanosleep(const struct timespec *req,
                                                     struct timespec *rem) {
    if (lying_clock && called_by_core(__builtin_return_address(0))) return 0;
    return (int)syscall(SYS_nanosleep, req, rem);
}

static CUfunction fns[NFN];

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    const char *mode = argv[1];
    double seconds = atof(argv[2]);
    CUdevice dev;
    CUmodule mod;
    CUstream s;
    CHECK(open_device(0, &dev));
    CHECK(cuModuleLoadData(&mod, "poison"));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    int nfn = strcmp(mode, "manyfns") == 0 ? NFN : 1;
    for (int i = 0; i < nfn; i++) {
        char name[32];
        snprintf(name, sizeof name, "spin%d", i);
        CHECK(cuModuleGetFunction(&fns[i], mod, name));
    }
    uint64_t cheap = 1000, dear = 1000000;
    void *cheap_params[] = {&cheap}, *dear_params[] = {&dear};
    if (!strcmp(mode, "firstcheap") || !strcmp(mode, "manyfns")) {
        for (int i = 0; i < nfn; i++)
            CHECK(cuLaunchKernel(fns[i], 1, 1, 1, 1, 1, 1, 0, s, cheap_params, NULL));
        CHECK(cuStreamSynchronize(s));
    } else if (!strcmp(mode, "capture")) {
        CUgraph g;
        CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        CHECK(cuLaunchKernel(fns[0], 1, 1, 1, 1, 1, 1, 0, s, dear_params, NULL));
        CHECK(cuStreamEndCapture(s, &g));
        CHECK(cuGraphDestroy(g));
    } else if (!strcmp(mode, "clock")) {
        lying_clock = 1;
    } else if (strcmp(mode, "honest") != 0) {
        return 2;
    }
    CUevent ev[INFLIGHT];
    for (int i = 0; i < INFLIGHT; i++) CHECK(cuEventCreate(&ev[i], 0));
    int first = nfn > 4096 ? 4096 : 0; /* manyfns: the functions past the table */
    uint64_t start = raw_now(), stop = start + (uint64_t)(seconds * 1e9), n = 0;
    while (raw_now() < stop) {
        if (n >= INFLIGHT) CHECK(cuEventSynchronize(ev[n % INFLIGHT]));
        CUfunction f = fns[first + (int)(n % (uint64_t)(nfn - first))];
        CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, dear_params, NULL));
        CHECK(cuEventRecord(ev[n % INFLIGHT], s));
        n++;
    }
    CHECK(cuStreamSynchronize(s));
    uint64_t elapsed = raw_now() - start;
    printf("share %.2f launched %llu\n", 100.0 * (double)(n * dear) / (double)elapsed,
           (unsigned long long)n);
    return 0;
}
