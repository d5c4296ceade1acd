/*
 * Library core: generated symbol tables, lazy initialisation (config + region), device
 * mapping, and the two ways a program finds driver symbols at run time: dlsym() and
 * cuGetProcAddress(). Nothing heavy runs in a constructor: the first hooked call initialises,
 * so loading the library into a process that never touches the GPU costs nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tranche.h"

void *tr_real[TR_SYM_COUNT];
__thread int tr_guard __attribute__((tls_model("initial-exec")));
tr_config_t tr_cfg;

static const char *const real_names[TR_SYM_COUNT] = {
#define HOOK(fam, sym, base) #sym,
#define REAL(lib, sym) #sym,
#include "hooks.def"
#undef HOOK
#undef REAL
};

enum { TR_FAM_INIT = 0, TR_FAM_MEM = 0, TR_FAM_CTX = 0, TR_FAM_LAUNCH = 0, TR_FAM_CUDA = 0,
       TR_FAM_NVML = 1 };
static const char real_is_nvml[TR_SYM_COUNT] = {
#define HOOK(fam, sym, base) TR_FAM_##fam,
#define REAL(lib, sym) TR_FAM_##lib,
#include "hooks.def"
#undef HOOK
#undef REAL
};

static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

static void do_resolve(void) {
    tr_guard++;
    /* A copy of the core that dlmopen put into a namespace of its own (src/lookup.c) must not
     * ask for RTLD_GLOBAL there: glibc crashes adding to a secondary namespace's global scope. */
    Dl_info info;
    void *self = NULL;
    Lmid_t ns = LM_ID_BASE;
    if (dladdr1((void *)&do_resolve, &info, &self, RTLD_DL_LINKMAP) && self)
        dlinfo(self, RTLD_DI_LMID, &ns);
    int mode = RTLD_NOW | (ns == LM_ID_BASE ? RTLD_GLOBAL : 0);
    void *cuda = dlopen("libcuda.so.1", mode);
    void *nvml = dlopen("libnvidia-ml.so.1", mode);
    for (int i = 0; i < TR_SYM_COUNT; i++) {
        void *lib = real_is_nvml[i] ? nvml : cuda;
        tr_real[i] = lib ? tr_real_dlsym(lib, real_names[i]) : NULL;
    }
    tr_guard--;
}

void tr_resolve(void) { pthread_once(&resolve_once, do_resolve); }

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
_Atomic int tr_init_ok; /* read lock-free on every hooked call (tr_ready in tranche.h) */
static char init_err[512];

const char *tr_init_error(void) { return init_err; }

static void do_init(void) {
    tr_resolve();
    char err[400];
    if (tr_config_load(&tr_cfg, err, sizeof err) != 0) {
        snprintf(init_err, sizeof init_err, "slice config: %s", err);
    } else {
        if (tr_region_open(tr_region_dir(), &tr_cfg, err, sizeof err) != 0)
            snprintf(init_err, sizeof init_err, "shared region: %s", err);
        else
            tr_init_ok = 1;
    }
    if (tr_init_ok) {
        pthread_atfork(NULL, NULL, tr_region_after_fork);
    } else {
        /* Once per process, never on a hot path: the tenant must learn why there is no GPU. */
        fprintf(stderr, "tranche: GPU access refused (%s); no GPU is available to this "
                        "process. Contact the platform operator.\n", init_err);
    }
}

void tr_refuse_after_fork(const char *why) {
    /* Runs in the atfork child handler: no stdio, no locks. */
    atomic_store(&tr_init_ok, 0);
    size_t n = 0;
    const char *parts[] = {"tranche: GPU access refused in this forked process (", why,
                           "); no GPU is available to it. Contact the platform operator.\n"};
    for (int p = 0; p < 3; p++)
        for (const char *c = parts[p]; *c && n + 1 < sizeof init_err; c++) init_err[n++] = *c;
    init_err[n] = '\0';
    if (write(2, init_err, n) < 0) { /* stderr closed: the refusal itself still holds */
    }
}

int tr_ready_slow(void) {
    tr_guard++;
    pthread_once(&init_once, do_init);
    tr_guard--;
    return atomic_load(&tr_init_ok);
}

/* The core's own clock, sleep and lock waits are raw system calls, never libc's
 * clock_gettime/nanosleep/syscall: a program may define those itself (the dynamic linker binds
 * our calls to its copy first), and a clock that jumps would refill the compute budget at will
 * (issue #27, item 5). Used only off the hot path (a launch that has to wait for budget, a
 * lock another thread holds). */
static long raw_syscall4(long nr, long a, long b, long c, long d) {
    long ret;
#if defined(__x86_64__)
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
                     : "rcx", "r11", "memory");
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
    ret = x0;
#else
#error "tr_now_ns needs a raw system call for this architecture"
#endif
    return ret;
}

static long raw_syscall2(long nr, long a, long b) { return raw_syscall4(nr, a, b, 0, 0); }

long tr_syscall4(long nr, long a, long b, long c, long d) {
    return raw_syscall4(nr, a, b, c, d);
}

/* tr_lock's slow paths (the fast ones are inline in tranche.h). 2 means held with a waiter
 * perhaps asleep: whoever gives back a 2 wakes one. */
void tr_lock_wait(tr_lock_t *m) {
    while (atomic_exchange_explicit(m, 2, memory_order_acquire) != 0)
        raw_syscall4(SYS_futex, (long)m, FUTEX_WAIT_PRIVATE, 2, 0);
}

void tr_lock_wake(tr_lock_t *m) { raw_syscall4(SYS_futex, (long)m, FUTEX_WAKE_PRIVATE, 1, 0); }

uint64_t tr_now_ns(void) {
    struct timespec ts = {0, 0};
    raw_syscall2(SYS_clock_gettime, CLOCK_MONOTONIC, (long)&ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void tr_sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    raw_syscall2(SYS_nanosleep, (long)&ts, 0);
}

int tr_dev_index_by_uuid(const char *uuid) {
    for (int i = 0; i < tr_cfg.device_count; i++) {
        if (strcmp(tr_cfg.devices[i].uuid, uuid) == 0) return i;
    }
    return -1;
}

int tr_dev_uuid(CUdevice dev, char *out, size_t len) {
    CUuuid u;
    if (!tr_real[TR_cuDeviceGetUuid] || REAL_FN(cuDeviceGetUuid)(&u, dev) != CUDA_SUCCESS)
        return -1;
    const unsigned char *b = (const unsigned char *)u.bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
    return 0;
}

#define TR_MAX_CUDEV 64
static _Atomic int devmap[TR_MAX_CUDEV]; /* 0 unknown, else index + 2 (1 = not in slice) */

int tr_dev_index(CUdevice dev) {
    if (dev < 0 || dev >= TR_MAX_CUDEV) return -1;
    int v = atomic_load_explicit(&devmap[dev], memory_order_relaxed);
    if (TR_LIKELY(v)) return v - 2;
    char s[64];
    int idx = tr_dev_uuid(dev, s, sizeof s) == 0 ? tr_dev_index_by_uuid(s) : -1;
    atomic_store(&devmap[dev], idx + 2);
    return idx;
}

/* The per-thread cache of the current context's slice index (its fast path is inline in
 * tranche.h); this is the lookup on a miss. */
__thread CUcontext tr_cached_ctx __attribute__((tls_model("initial-exec")));
__thread int tr_cached_idx __attribute__((tls_model("initial-exec")));
__thread uint64_t tr_cached_epoch __attribute__((tls_model("initial-exec")));
_Atomic uint64_t tr_ctx_epoch = 1;
#define cached_ctx tr_cached_ctx
#define cached_idx tr_cached_idx
#define cached_epoch tr_cached_epoch

void tr_ctx_gone(void) { atomic_fetch_add_explicit(&tr_ctx_epoch, 1, memory_order_release); }

int tr_current_dev_index_slow(CUcontext ctx, uint64_t epoch) {
    CUdevice dev;
    if (REAL_FN(cuCtxGetDevice)(&dev) != CUDA_SUCCESS) return -1;
    cached_idx = tr_dev_index(dev);
    cached_ctx = ctx;
    cached_epoch = epoch;
    return cached_idx;
}

TR_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags) {
    tr_resolve();
    if (!tr_real[TR_cuGetProcAddress]) return CUDA_ERROR_NOT_INITIALIZED;
    tr_guard++;
    CUresult r = REAL_FN(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    tr_guard--;
    if (r == CUDA_SUCCESS && pfn && *pfn && symbol && !(*pfn = tr_hook_substitute(symbol, *pfn)))
        r = CUDA_ERROR_NOT_FOUND;
    return r;
}

TR_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus) {
    tr_resolve();
    if (!tr_real[TR_cuGetProcAddress_v2]) return CUDA_ERROR_NOT_INITIALIZED;
    tr_guard++;
    CUresult r = REAL_FN(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, symbolStatus);
    tr_guard--;
    if (r == CUDA_SUCCESS && pfn && *pfn && symbol &&
        !(*pfn = tr_hook_substitute(symbol, *pfn))) {
        /* A variant of a hooked entry point we cannot enforce: as if the driver lacked it. */
        r = CUDA_ERROR_NOT_FOUND;
        if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return r;
}

TR_EXPORT CUresult cuInit(unsigned int flags) {
    if (!tr_ready()) return CUDA_ERROR_NO_DEVICE;
    if (!tr_real[TR_cuInit]) return CUDA_ERROR_NO_DEVICE;
    return REAL_FN(cuInit)(flags);
}
