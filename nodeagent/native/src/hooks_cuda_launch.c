/*
 * Launch family: the compute share. Each container has one budget of device time per device
 * in its shared region (all its processes draw from it), refilled at the target share. A
 * launch waits while the budget is spent and is charged its expected device time: an estimate
 * per function (or graph), learnt from launches timed with a pair of events, each such
 * sample settling the difference between what its launch was charged and what it took.
 *
 * What a program cannot steer (issue #27, item 5): a function's first launch is timed
 * synchronously, except on a capturing stream (nothing runs there; the graph launch is what
 * is charged); which later launch is sampled is drawn at random 32..95 launches on, and a
 * sample due on a stream that never idles is taken anyway, synchronously, so a busy stream
 * cannot keep a low first estimate; a sample above the estimate replaces it at once (only
 * decreases are smoothed); a function the table has no room for shares one overflow entry,
 * metered like any other; the core's clock and sleep are raw system calls.
 * Async samples are taken only on an idle stream: behind our own queued work the start event
 * would complete early.
 *
 * Cost on the launch path (issue #27's goals: metered +50 ns, counted +15 ns): no lock, no
 * system call and no shared-memory read-modify-write on a launch that is neither sampled nor
 * short of budget. Each thread draws budget from the container's shared counter in leases
 * (LEASE_NS, or one launch's estimate if larger: one atomic per lease) and counts its launches
 * and charged time locally, adding them to the region every FLUSH_EVERY launches, at each
 * lease, and when the thread or process ends. A lease is tied to the process's slot claim
 * (*tr_slot_owner): a forked or cloned child never spends its parent's. What the region shows
 * lags by at most one lease and FLUSH_EVERY launches per thread.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "tranche.h"

#define BURST_NS 10000000LL   /* budget a container may save up: 10 ms of device time */
#define MAX_WAIT_NS 2000000LL /* re-check at least this often while throttled */
#define SAMPLE_MIN 32u        /* a function is re-measured 32..95 launches after its last */
#define SAMPLE_SPREAD 64u
#define POLL_EVERY 8u         /* look at an outstanding sample every this many launches */
#define FTAB_SIZE 4096u
#define LEASE_NS 20000LL      /* budget a thread takes from the container's counter at once */
#define FLUSH_EVERY 64u       /* launches counted locally before they reach the region */
#define SAFETY_MIN 256u       /* a thread samples at least every 512..1015 of its launches */

typedef struct {
    _Atomic uintptr_t key;
    _Atomic int64_t est_ns;
    _Atomic uint32_t launches;
    _Atomic uint32_t next_sample; /* launch count at which the next sample is due */
} fstat_t;

static fstat_t ftab[FTAB_SIZE];
static fstat_t overflow; /* every function the table has no room for */

static __thread uint64_t rng_state __attribute__((tls_model("initial-exec")));

static uint32_t next_gap(void) {
    if (!rng_state) rng_state = tr_now_ns() | 1;
    rng_state ^= rng_state << 13; /* xorshift64: which launch is sampled, not a secret */
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return SAMPLE_MIN + (uint32_t)(rng_state % SAMPLE_SPREAD);
}

static fstat_t *fstat_of(uintptr_t key) {
    uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 40) & (FTAB_SIZE - 1);
    for (uint32_t i = 0; i < 32; i++) {
        fstat_t *e = &ftab[(h + i) & (FTAB_SIZE - 1)];
        uintptr_t k = atomic_load_explicit(&e->key, memory_order_acquire);
        if (k == key) return e;
        if (k == 0) {
            uintptr_t zero = 0;
            if (atomic_compare_exchange_strong(&e->key, &zero, key) || zero == key) return e;
        }
    }
    return &overflow; /* table full: metered together, never unmetered */
}

/* A sample: above the estimate it replaces it (a cheap first launch cannot hide dear ones),
 * below it the estimate moves a quarter of the way. */
static void learn(fstat_t *f, int64_t actual) {
    int64_t est = atomic_load(&f->est_ns);
    atomic_store(&f->est_ns, actual > est ? actual : est + (actual - est) / 4);
}

typedef struct {
    CUcontext ctx;
    CUevent start, end;
    fstat_t *f;   /* outstanding asynchronous sample, or NULL */
    int64_t charged;
    int dev;
    uint32_t polls;
} sampler_t;

static __thread sampler_t smp __attribute__((tls_model("initial-exec")));

/* This thread's share of the books (see the header): budget held, and counts not yet in the
 * region, all for region device `dev` of the slot claim `owner`. */
typedef struct {
    uint32_t owner;
    int dev;
    int64_t lease;
    uint64_t used;
    uint32_t launches;
    int registered; /* the thread-exit flush is registered */
    uint32_t safety; /* metered launches of this thread until it samples, whatever the function */
} meter_t;

static __thread meter_t mt __attribute__((tls_model("initial-exec")));
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

/* Hand this thread's counts (and, when `all`, its lease) to the region. */
static void meter_flush(int all) {
    if (mt.owner != *tr_slot_owner) { /* another process's books, inherited: not ours */
        memset(&mt, 0, sizeof mt);
        return;
    }
    tr_device_t *d = &tr_region()->devices[mt.dev];
    if (mt.launches) atomic_fetch_add_explicit(&d->launches, mt.launches, memory_order_relaxed);
    if (mt.used) atomic_fetch_add_explicit(&d->compute_used_ns, mt.used, memory_order_relaxed);
    mt.launches = 0;
    mt.used = 0;
    if (all && mt.lease > 0) atomic_fetch_add(&d->tokens_ns, mt.lease);
    if (all) mt.lease = 0;
}

static void meter_thread_exit(void *unused) {
    (void)unused;
    if (mt.owner) meter_flush(1);
}

static void make_exit_key(void) { pthread_key_create(&exit_key, meter_thread_exit); }

/* The main thread leaves by exit(), which runs no key destructor. */
__attribute__((destructor)) static void meter_process_exit(void) {
    if (mt.owner && tr_region()) meter_flush(1);
}

/* The books of this thread now belong to device `dev` of this process. */
static void meter_switch(int dev) {
    if (mt.owner) meter_flush(1);
    mt.owner = *tr_slot_owner;
    mt.dev = dev;
    mt.safety = SAFETY_MIN + next_gap() * 8;
    if (!mt.registered) {
        mt.registered = 1;
        tr_guard++; /* pthread_* may be the program's own: nothing of ours below it */
        pthread_once(&exit_once, make_exit_key);
        pthread_setspecific(exit_key, (void *)1);
        tr_guard--;
    }
}

static inline void count_launch(int dev) {
    if (__builtin_expect(mt.owner != *tr_slot_owner || mt.dev != dev || !mt.owner, 0))
        meter_switch(dev);
    if (__builtin_expect(++mt.launches >= FLUSH_EVERY, 0)) meter_flush(0);
}

static void refill(tr_device_t *d, uint32_t pct, uint64_t now) {
    uint64_t last = atomic_load_explicit(&d->last_refill_ns, memory_order_relaxed);
    if (now <= last || !atomic_compare_exchange_strong(&d->last_refill_ns, &last, now)) return;
    int64_t add = (last == 0 || now - last > 1000000000ull) ? BURST_NS
                                                            : (int64_t)((now - last) * pct / 100);
    int64_t t = atomic_fetch_add(&d->tokens_ns, add) + add;
    if (t > BURST_NS) atomic_fetch_sub(&d->tokens_ns, t - BURST_NS);
}

static void charge(tr_device_t *d, int64_t ns) {
    atomic_fetch_sub(&d->tokens_ns, ns);
    atomic_fetch_add(&d->compute_used_ns, (uint64_t)ns);
}

static void wait_for_budget(tr_device_t *d, uint32_t pct);

/* Charge one launch's estimate to this thread's lease; when the lease runs short, wait for the
 * container's budget as before and take the next lease from it. */
static inline void spend(tr_device_t *d, uint32_t pct, int64_t est) {
    if (TR_LIKELY(mt.lease >= est)) {
        mt.lease -= est;
        mt.used += (uint64_t)est;
        return;
    }
    wait_for_budget(d, pct);
    int64_t take = est > LEASE_NS ? est : LEASE_NS;
    atomic_fetch_sub(&d->tokens_ns, take);
    mt.lease += take - est;
    mt.used += (uint64_t)est;
    meter_flush(0);
}

/* Wait until the container's budget on this device is positive. The refill is lazy: while
 * budget is left nothing is refilled (no clock read, no shared write on the hot path); the
 * first refill after that credits the whole elapsed time, capped at the burst as always. */
static void wait_for_budget(tr_device_t *d, uint32_t pct) {
    if (TR_LIKELY(atomic_load_explicit(&d->tokens_ns, memory_order_relaxed) > 0)) return;
    uint64_t now = tr_now_ns();
    refill(d, pct, now);
    if (atomic_load_explicit(&d->tokens_ns, memory_order_relaxed) > 0) return;
    uint64_t start = now;
    int64_t t;
    while ((t = atomic_load(&d->tokens_ns)) <= 0) {
        int64_t wait = -t * 100 / pct + 20000;
        if (wait > MAX_WAIT_NS) wait = MAX_WAIT_NS;
        tr_sleep_ns((uint64_t)wait);
        now = tr_now_ns();
        refill(d, pct, now);
    }
    atomic_fetch_add(&d->throttled_ns, now - start);
}

static int64_t elapsed_ns(CUevent a, CUevent b) {
    float ms = 0;
    if (REAL_FN(cuEventElapsedTime)(&ms, a, b) != CUDA_SUCCESS || ms < 0) return -1;
    return (int64_t)((double)ms * 1e6);
}

static void poll_sample(void) {
    if (!smp.f || REAL_FN(cuEventQuery)(smp.end) != CUDA_SUCCESS) return;
    int64_t actual = elapsed_ns(smp.start, smp.end);
    if (actual >= 0) {
        learn(smp.f, actual);
        /* Settle the difference between what was charged and what the launch took. */
        charge(&tr_region()->devices[smp.dev], actual - smp.charged);
    }
    smp.f = NULL;
}

static int ensure_events(void) {
    CUcontext ctx = NULL;
    if (REAL_FN(cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS || !ctx) return -1;
    if (ctx == smp.ctx) return 0;
    if (REAL_FN(cuEventCreate)(&smp.start, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
        REAL_FN(cuEventCreate)(&smp.end, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
        return -1;
    smp.ctx = ctx;
    smp.f = NULL;
    return 0;
}

enum { L_PLAIN, L_ASYNC_SAMPLE, L_SYNC_MEASURE };

typedef struct {
    int mode;
    int dev;
    CUstream stream;
    fstat_t *f;
} launch_t;

/* Returns CUDA_SUCCESS to go ahead with the launch, or the error to return instead. */
static CUresult pre_launch(uintptr_t key, CUstream s, int ptsz, launch_t *l) {
    l->mode = L_PLAIN;
    if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    int dev = tr_current_dev_index();
    if (dev == -2) {
        /* No current context. On a default stream the driver reports it. On an explicit stream
         * a driver launching a CUkernel would use the stream's context, and the launch would
         * escape the budget: refused. Every runtime and framework makes a context current. */
        int default_stream = s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
        return default_stream ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    }
    if (dev < 0) return CUDA_ERROR_NOT_PERMITTED;
    tr_device_t *d = &tr_region()->devices[dev];
    uint32_t pct = tr_cfg.devices[dev].compute_percent;
    count_launch(dev);
    if (pct >= 100) return CUDA_SUCCESS; /* a whole GPU: nothing to meter */
    l->dev = dev;
    l->stream = (ptsz && s == NULL) ? CU_STREAM_PER_THREAD : s;
    if (smp.f && (++smp.polls % POLL_EVERY) == 0) poll_sample();
    fstat_t *f = fstat_of(key);
    l->f = f;
    int64_t est = atomic_load_explicit(&f->est_ns, memory_order_relaxed);
    /* Counted by a plain load and store, not a locked add (~20 ns): threads launching the same
     * function at once may lose counts and so delay its sample, never skip it for good: each
     * thread also samples whatever it launches at least every 512..1015 of its own metered
     * launches (SAFETY_MIN + 8 gaps). */
    uint32_t n = atomic_load_explicit(&f->launches, memory_order_relaxed);
    atomic_store_explicit(&f->launches, n + 1, memory_order_relaxed);
    int due = est <= 0 || n - atomic_load_explicit(&f->next_sample, memory_order_relaxed) <
                              0x80000000u;
    if (__builtin_expect(--mt.safety == 0, 0)) {
        mt.safety = SAFETY_MIN + next_gap() * 8;
        due = 1;
    }
    if (TR_LIKELY(!due)) {
        spend(d, pct, est);
        return CUDA_SUCCESS;
    }
    wait_for_budget(d, pct);
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    if (REAL_FN(cuStreamIsCapturing)(l->stream, &cap) != CUDA_SUCCESS ||
        cap != CU_STREAM_CAPTURE_STATUS_NONE)
        return CUDA_SUCCESS; /* captured, not run: the graph's launch is charged */
    atomic_store_explicit(&f->next_sample, n + next_gap(), memory_order_relaxed);
    if (est > 0) charge(d, est);
    if (est > 0 && smp.f) return CUDA_SUCCESS; /* a sample is in flight: it settles first */
    if (est > 0 && ensure_events() == 0 &&
        REAL_FN(cuStreamQuery)(l->stream) == CUDA_SUCCESS &&
        REAL_FN(cuEventRecord)(smp.start, l->stream) == CUDA_SUCCESS) {
        l->mode = L_ASYNC_SAMPLE;
        smp.charged = est;
        return CUDA_SUCCESS;
    }
    /* First launch, or a sample due on a stream that does not idle: wait for the stream and
     * time this launch alone. */
    smp.f = NULL; /* the event pair is needed now; an older sample is dropped */
    if (ensure_events() == 0 && REAL_FN(cuStreamSynchronize)(l->stream) == CUDA_SUCCESS &&
        REAL_FN(cuEventRecord)(smp.start, l->stream) == CUDA_SUCCESS) {
        l->mode = L_SYNC_MEASURE;
        smp.charged = est > 0 ? est : 0;
    }
    return CUDA_SUCCESS;
}

static void post_launch(launch_t *l, CUresult r) {
    if (l->mode == L_PLAIN || r != CUDA_SUCCESS) return;
    if (REAL_FN(cuEventRecord)(smp.end, l->stream) != CUDA_SUCCESS) return;
    if (l->mode == L_ASYNC_SAMPLE) {
        smp.f = l->f;
        smp.dev = l->dev;
        return;
    }
    /* First launch of this function: wait for it once to learn its cost. */
    int64_t actual = -1;
    if (REAL_FN(cuEventSynchronize)(smp.end) == CUDA_SUCCESS)
        actual = elapsed_ns(smp.start, smp.end);
    if (actual < 1) actual = 1;
    learn(l->f, actual);
    charge(&tr_region()->devices[l->dev], actual - smp.charged);
}

#define LAUNCH_HOOK(sym, key, stream, ptsz, ...)                                               \
    do {                                                                                       \
        if (tr_guard) return REAL_FN(sym)(__VA_ARGS__);                                        \
        launch_t l;                                                                            \
        CUresult pre = pre_launch((uintptr_t)(key), (stream), (ptsz), &l);                     \
        if (pre != CUDA_SUCCESS) return pre;                                                   \
        /* Neither sampled nor timed: nothing is left to do after the driver returns, so it is   \
         * a tail call (a driver re-entering an exported launch from inside it would be counted  \
         * twice: billed more, never less). */                                                  \
        if (TR_LIKELY(l.mode == L_PLAIN)) return REAL_FN(sym)(__VA_ARGS__);                    \
        tr_guard++; /* a sampled launch re-entered by the driver is not charged twice */       \
        CUresult r = REAL_FN(sym)(__VA_ARGS__);                                                \
        tr_guard--;                                                                            \
        post_launch(&l, r);                                                                    \
        return r;                                                                              \
    } while (0)

#define KERNEL_ARGS f, gx, gy, gz, bx, by, bz, shmem, hStream, kernelParams, extra
#define KERNEL_PARAMS                                                                          \
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,          \
        unsigned int by, unsigned int bz, unsigned int shmem, CUstream hStream,                \
        void **kernelParams, void **extra

TR_EXPORT CUresult cuLaunchKernel(KERNEL_PARAMS) {
    LAUNCH_HOOK(cuLaunchKernel, f, hStream, 0, KERNEL_ARGS);
}
TR_EXPORT CUresult cuLaunchKernel_ptsz(KERNEL_PARAMS) {
    LAUNCH_HOOK(cuLaunchKernel_ptsz, f, hStream, 1, KERNEL_ARGS);
}

#define COOP_ARGS f, gx, gy, gz, bx, by, bz, shmem, hStream, kernelParams
#define COOP_PARAMS                                                                            \
    CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,          \
        unsigned int by, unsigned int bz, unsigned int shmem, CUstream hStream,                \
        void **kernelParams

TR_EXPORT CUresult cuLaunchCooperativeKernel(COOP_PARAMS) {
    LAUNCH_HOOK(cuLaunchCooperativeKernel, f, hStream, 0, COOP_ARGS);
}
TR_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(COOP_PARAMS) {
    LAUNCH_HOOK(cuLaunchCooperativeKernel_ptsz, f, hStream, 1, COOP_ARGS);
}

TR_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                    void **kernelParams, void **extra) {
    LAUNCH_HOOK(cuLaunchKernelEx, f, config ? config->hStream : NULL, 0, config, f,
                kernelParams, extra);
}
TR_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                         void **kernelParams, void **extra) {
    LAUNCH_HOOK(cuLaunchKernelEx_ptsz, f, config ? config->hStream : NULL, 1, config, f,
                kernelParams, extra);
}

/* A graph launch may also back the graph's memory-allocation nodes: charged around the call
 * (hooks_cuda_graph.c), refused with CUDA_ERROR_OUT_OF_MEMORY over the cap. */
static CUresult graph_launch(CUgraphExec e, CUstream s, int ptsz) {
    CUresult (*real)(CUgraphExec, CUstream) =
        ptsz ? REAL_FN(cuGraphLaunch_ptsz) : REAL_FN(cuGraphLaunch);
    if (tr_guard) return real(e, s);
    launch_t l;
    CUresult r = pre_launch((uintptr_t)e, s, ptsz, &l);
    if (r != CUDA_SUCCESS) return r;
    tr_commit_t c;
    r = tr_graph_commit_begin(e, &c);
    if (r != CUDA_SUCCESS) {
        post_launch(&l, r);
        return r;
    }
    tr_guard++;
    r = real(e, s);
    tr_guard--;
    tr_graph_commit_end(&c, r);
    post_launch(&l, r);
    return r;
}

TR_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
    return graph_launch(hGraphExec, hStream, 0);
}
TR_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
    return graph_launch(hGraphExec, hStream, 1);
}
