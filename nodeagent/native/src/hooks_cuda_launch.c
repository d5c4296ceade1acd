/*
 * Launch family: the compute share, charged from completed device work.
 *
 * Each container has one budget of device time per device in its shared region (all its
 * processes draw from it), refilled at the target share. A launch waits while the budget is
 * spent and is charged at once a provisional figure: the estimate of its function (or graph).
 * What the container finally pays is what its launches took on the device, measured by event
 * pairs around sampled launches and settled against those provisional charges:
 *
 * - Which launch is sampled cannot be steered. A function (or graph) not yet measured
 *   TRUST_SAMPLES times has every launch sampled, and is charged meanwhile at the largest
 *   launch cost this process measured on the device (a cheap first launch cannot set a low
 *   price for the next ones). After that each launch is sampled with probability
 *   1/SAMPLE_EVERY, by a countdown drawn from a geometric distribution: memoryless, so whatever
 *   a program knows of the last sample (its thread, its stream, how many launches since), its
 *   next launch is sampled with the same probability, a new thread's first launch included.
 * - A sample settles (measured - provisional) x 1/probability: the expected total charge is
 *   the device time of every launch, whatever the estimates were (they only steer the
 *   throttle between samples and the noise of the settlement), so a function, stream or
 *   thread that keeps its estimate stale gains nothing. Functions are in a 4096-entry table;
 *   a function it has no room for shares one overflow entry, metered like any other. The
 *   launches a sample stands for are charged at most LATE_FACTOR x the largest cost measured
 *   lately (see settle()).
 * - Pending samples are process-wide (a ring of event pairs, not per thread): any thread's
 *   launch, a thread's exit, a throttled wait and the process's exit settle them, so a sample
 *   survives the thread that took it. A ring full of pending samples makes the next sample
 *   wait for the oldest one; none is ever dropped. A sample whose events cannot be read (its
 *   context gone) settles at the largest launch cost measured, never at nothing; one that no
 *   event pair can time (none recordable on its stream) is timed by the host clock from a
 *   drained stream until it drains again. A forked child starts with an empty ring.
 * - A sample is timed from an idle stream: a busy stream is drained first, since behind our
 *   own queued work the start event would complete early. A process's very first metered
 *   launch on a device waits for its kernel, so a process that leaves at once has paid it.
 * - A launch inside a stream capture runs nothing: it settles at zero (the graph's launch is
 *   what is charged). The core's clock and sleep are raw system calls.
 *
 * Cost on the launch path (issue #27's goals: metered +50 ns, counted +15 ns): no lock, no
 * system call and no shared-memory read-modify-write on a launch that is neither sampled nor
 * short of budget. Each thread draws budget from the container's shared counter in leases
 * (LEASE_NS, or one launch's estimate if larger: one atomic per lease) and counts its launches
 * and charged time locally, adding them to the region every FLUSH_EVERY launches, at each
 * lease, and when the thread or process ends. A lease is tied to the process's slot claim
 * (*tr_slot_owner): a forked or cloned child never spends its parent's. What the region shows
 * lags by at most one lease and FLUSH_EVERY launches per thread, plus the samples not yet
 * complete.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "tranche.h"

#define BURST_NS 10000000LL   /* budget a container may save up: 10 ms of device time */
#define MAX_WAIT_NS 2000000LL /* re-check at least this often while throttled */
#define SAMPLE_EVERY 32u      /* a measured function's launch is sampled with probability 1/32 */
#define TRUST_SAMPLES 4u      /* samples before a function's own estimate is used */
#define LATE_FACTOR 4         /* a sample stands for others up to 4 x the largest cost seen */
#define POLL_EVERY 8u         /* a thread looks at the pending samples every this many launches */
#define FTAB_SIZE 4096u
#define RING 64u              /* samples pending at once, process-wide */
#define LEASE_NS 20000LL      /* budget a thread takes from the container's counter at once */
#define FLUSH_EVERY 64u       /* launches counted locally before they reach the region */

typedef struct {
    _Atomic uintptr_t key;
    _Atomic int64_t est_ns;
    _Atomic uint32_t samples; /* settled samples of this function, up to TRUST_SAMPLES */
} fstat_t;

static fstat_t ftab[FTAB_SIZE];
static fstat_t overflow; /* every function the table has no room for */
/* The largest launch cost measured in this process, per region device (decays slowly): what
 * a function not yet measured is charged. */
static _Atomic int64_t dev_max[TR_MAX_DEVICES];

static __thread uint64_t rng_state __attribute__((tls_model("initial-exec")));

static uint64_t rnd(void) {
    if (!rng_state) rng_state = tr_now_ns() | 1;
    rng_state ^= rng_state << 13; /* xorshift64: which launch is sampled, not a secret */
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Launches until the next sample: geometric with mean SAMPLE_EVERY (each launch a trial). */
static uint32_t draw_countdown(void) {
    uint32_t n = 1;
    while (rnd() % SAMPLE_EVERY != 0 && n < 64 * SAMPLE_EVERY) n++;
    return n;
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

/* A sample: above the estimate it replaces it, below it the estimate moves a quarter of the
 * way (the estimate steers only the provisional charge: the settlement is what is paid). */
static void learn(fstat_t *f, int dev, int64_t actual) {
    int64_t est = atomic_load(&f->est_ns);
    atomic_store(&f->est_ns, actual > est ? actual : est + (actual - est) / 4);
    if (atomic_load_explicit(&f->samples, memory_order_relaxed) < TRUST_SAMPLES)
        atomic_fetch_add(&f->samples, 1);
    int64_t m = atomic_load(&dev_max[dev]);
    atomic_store(&dev_max[dev], actual > m ? actual : m - m / 64);
}

/* This thread's share of the books (see the header): budget held, and counts not yet in the
 * region, all for region device `dev` of the slot claim `owner`. */
typedef struct {
    uint32_t owner;
    int dev;
    int64_t lease;
    uint64_t used;
    uint32_t launches;
    int registered;     /* the thread-exit flush is registered */
    uint32_t countdown; /* launches of measured functions until this thread samples one */
} meter_t;

static __thread meter_t mt __attribute__((tls_model("initial-exec")));
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

/* Device time settled below what was charged, per region device, not yet taken off what the
 * region shows: compute_used_ns is the slice's kernel-busy counter (the agent exports it as a
 * Prometheus counter), so it never goes down; a credit is taken off the next additions. */
static _Atomic int64_t used_credit[TR_MAX_DEVICES];

static void used_add(tr_device_t *d, int64_t ns) {
    _Atomic int64_t *credit = &used_credit[d - tr_region()->devices];
    if (ns < 0) {
        atomic_fetch_add(credit, -ns);
        return;
    }
    int64_t c = atomic_load_explicit(credit, memory_order_relaxed);
    while (c > 0 && !atomic_compare_exchange_weak(credit, &c, c > ns ? c - ns : 0)) {
    }
    if (c > 0) ns = c > ns ? 0 : ns - c;
    if (ns) atomic_fetch_add_explicit(&d->compute_used_ns, (uint64_t)ns, memory_order_relaxed);
}

/* Hand this thread's counts (and, when `all`, its lease) to the region. */
static void meter_flush(int all) {
    if (mt.owner != *tr_slot_owner) { /* another process's books, inherited: not ours */
        memset(&mt, 0, sizeof mt);
        return;
    }
    tr_device_t *d = &tr_region()->devices[mt.dev];
    if (mt.launches) atomic_fetch_add_explicit(&d->launches, mt.launches, memory_order_relaxed);
    if (mt.used) used_add(d, (int64_t)mt.used);
    mt.launches = 0;
    mt.used = 0;
    if (all && mt.lease > 0) atomic_fetch_add(&d->tokens_ns, mt.lease);
    if (all) mt.lease = 0;
}

static void settle_ready(int wait);

static void meter_thread_exit(void *unused) {
    (void)unused;
    if (mt.owner) meter_flush(1);
    settle_ready(0); /* what this thread sampled is settled by whoever comes next, if not now */
}

static void make_exit_key(void) { pthread_key_create(&exit_key, meter_thread_exit); }

/* The main thread leaves by exit(), which runs no key destructor. */
__attribute__((destructor)) static void meter_process_exit(void) {
    if (!tr_region() || !atomic_load(&tr_init_ok)) return;
    if (mt.owner) meter_flush(1);
    tr_guard++;
    settle_ready(1);
    tr_guard--;
}

/* The books of this thread now belong to device `dev` of this process. */
static void meter_switch(int dev) {
    if (mt.owner) meter_flush(1);
    mt.owner = *tr_slot_owner;
    mt.dev = dev;
    mt.countdown = draw_countdown();
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

/* Charge (or, negative, credit) device time. */
static void charge(tr_device_t *d, int64_t ns) {
    atomic_fetch_sub(&d->tokens_ns, ns);
    used_add(d, ns);
}

static void wait_for_budget(tr_device_t *d, uint32_t pct);

/* Charge one launch's estimate to this thread's lease; when the lease runs short, wait for the
 * container's budget and take the next lease from it. */
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

/* ---- Pending samples, process-wide. */

enum { S_FREE, S_OWNED, S_PENDING };

typedef struct {
    _Atomic int state;  /* changed under ring_lock, or by the owner of an owned entry */
    uint64_t seq;       /* order taken: the oldest is waited for when the ring is full */
    CUcontext ctx;      /* the events' context */
    uint64_t ctx_epoch; /* tr_ctx_epoch when they were made */
    CUevent start, end;
    fstat_t *f;
    int dev;
    int64_t charged; /* provisional charge of the sampled launch */
    int64_t weight;  /* 1 / the probability it was sampled with */
} sample_t;

static sample_t ring[RING];
static tr_lock_t ring_lock;
static uint64_t ring_seq;
static _Atomic uint32_t pending; /* S_PENDING entries: a launch looks only when nonzero */
#define RING_CLEARING 1u          /* never a slot claim (those have bit 31 set) */
static _Atomic uint32_t ring_owner; /* the slot claim whose samples the ring holds */

/* Whether this process may use the ring now. A forked or cloned child inherits its parent's:
 * samples of the parent's events (not its to read, nor to pay) and perhaps a lock a parent
 * thread held. The child's first look empties it; until then, and in a process with no slot
 * of its own yet, no. */
static int ring_mine(void) {
    uint32_t me = *tr_slot_owner, was = atomic_load(&ring_owner);
    if (TR_LIKELY(was == me)) return me != 0;
    if (!me || was == RING_CLEARING ||
        !atomic_compare_exchange_strong(&ring_owner, &was, RING_CLEARING))
        return 0;
    for (uint32_t i = 0; i < RING; i++) {
        ring[i].state = S_FREE;
        ring[i].ctx = NULL; /* the parent's events: not destroyed, not reused */
    }
    atomic_store(&pending, 0);
    atomic_store(&ring_lock, 0);
    atomic_store(&ring_owner, me);
    return 1;
}

static int64_t elapsed_ns(CUevent a, CUevent b) {
    float ms = 0;
    if (REAL_FN(cuEventElapsedTime)(&ms, a, b) != CUDA_SUCCESS || ms < 0) return -1;
    return (int64_t)((double)ms * 1e6);
}

/* Pay sample s: the sampled launch what it read, and the launches it stands for (weight - 1
 * of them) the same, up to LATE_FACTOR x the largest cost measured lately. A thread
 * descheduled between a launch and its end event's record makes the sample read the pause
 * too (the stream had gone idle): uncapped, a 20 ns kernel read as a 2 ms pause would charge
 * 32 x 2 ms. The cap moves up LATE_FACTOR-fold with each such sample and down only 1/64 a
 * sample, so dear launches keep it high. Unreadable: the largest cost measured. */
static void settle(sample_t *s, int64_t actual) {
    tr_device_t *d = &tr_region()->devices[s->dev];
    int64_t top = atomic_load(&dev_max[s->dev]);
    if (actual < 0) {
        actual = top > s->charged ? top : s->charged;
        charge(d, (actual - s->charged) * s->weight);
        return;
    }
    int64_t typical = top > 0 && actual > LATE_FACTOR * top ? LATE_FACTOR * top : actual;
    learn(s->f, s->dev, typical);
    charge(d, actual - s->charged + (typical - s->charged) * (s->weight - 1));
}

/* Settle every pending sample whose end has completed; with `wait` (the process's exit), wait
 * for all of them, and settle none that cannot be read (the driver may be gone before us). */
static void settle_ready(int wait) {
    if (!atomic_load_explicit(&pending, memory_order_relaxed) || !tr_region() || !ring_mine())
        return;
    int free_ = 0;
    if (!wait && !atomic_compare_exchange_strong(&ring_lock, &free_, 1)) return; /* busy */
    if (wait) tr_lock(&ring_lock);
    /* Entries are taken lowest first, so the pending ones sit at the front: the scan stops
     * once it has seen as many as there are. */
    uint32_t left = atomic_load(&pending);
    for (uint32_t i = 0; i < RING && left; i++) {
        sample_t *s = &ring[i];
        if (s->state != S_PENDING) continue;
        left--;
        CUresult q = wait ? REAL_FN(cuEventSynchronize)(s->end) : REAL_FN(cuEventQuery)(s->end);
        if (q == CUDA_ERROR_NOT_READY) continue;
        if (q == CUDA_SUCCESS || !wait)
            settle(s, q == CUDA_SUCCESS ? elapsed_ns(s->start, s->end) : -1);
        if (q != CUDA_SUCCESS) s->ctx = NULL; /* its events are not ours to use again */
        s->state = S_FREE;
        atomic_fetch_sub(&pending, 1);
    }
    tr_unlock(&ring_lock);
}

/* An entry of the ring for this thread's sample, with events of the context of `stream` (an
 * event of another context cannot be recorded there); the ring full, the oldest pending
 * sample is waited for and settled. NULL: no entry or no events. */
static sample_t *sample_take(CUstream stream) {
    CUcontext ctx = NULL;
    int own = stream == NULL || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
    CUresult r = own ? REAL_FN(cuCtxGetCurrent)(&ctx) : REAL_FN(cuStreamGetCtx)(stream, &ctx);
    if (r != CUDA_SUCCESS || !ctx || !ring_mine()) return NULL;
    tr_lock(&ring_lock);
    sample_t *s = NULL, *oldest = NULL;
    for (uint32_t i = 0; i < RING && !s; i++) {
        if (ring[i].state == S_FREE) s = &ring[i];
        else if (ring[i].state == S_PENDING && (!oldest || ring[i].seq < oldest->seq))
            oldest = &ring[i];
    }
    if (!s && oldest) {
        s = oldest;
        CUresult q = REAL_FN(cuEventSynchronize)(s->end);
        settle(s, q == CUDA_SUCCESS ? elapsed_ns(s->start, s->end) : -1);
        if (q != CUDA_SUCCESS) s->ctx = NULL;
        atomic_fetch_sub(&pending, 1);
    }
    if (s) {
        s->state = S_OWNED;
        s->seq = ++ring_seq;
    }
    tr_unlock(&ring_lock);
    if (!s) return NULL; /* every entry is being taken by another thread right now */
    uint64_t epoch = atomic_load(&tr_ctx_epoch);
    if (s->ctx != ctx || s->ctx_epoch != epoch) {
        /* Events of another context: destroyed only while no context has gone since they
         * were made (theirs may be gone, and with it the handles). */
        if (s->ctx && s->ctx_epoch == epoch) {
            REAL_FN(cuEventDestroy_v2)(s->start);
            REAL_FN(cuEventDestroy_v2)(s->end);
        }
        s->ctx = NULL;
        if (REAL_FN(cuEventCreate)(&s->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) goto fail;
        if (REAL_FN(cuEventCreate)(&s->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
            REAL_FN(cuEventDestroy_v2)(s->start);
            goto fail;
        }
        s->ctx = ctx;
        s->ctx_epoch = epoch;
    }
    return s;
fail:
    s->state = S_FREE; /* a plain store: only the owner changes an owned entry */
    return NULL;
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
        settle_ready(0); /* a debt still on the device is counted before we go on */
    }
    atomic_fetch_add(&d->throttled_ns, now - start);
}

enum { L_PLAIN, L_SAMPLE, L_SAMPLE_WAIT, L_HOST_TIMED };

typedef struct {
    int mode;
    int dev;
    CUstream stream;
    sample_t *s;  /* the ring's entry (L_SAMPLE, L_SAMPLE_WAIT) or `host` (L_HOST_TIMED) */
    sample_t host; /* a sample no event pair can time */
    uint64_t t0;  /* L_HOST_TIMED: when the drained stream took the launch */
} launch_t;

/* A sampled launch: charged its provisional figure, timed from an idle stream by a pair of
 * events from the ring, settled later (or at once, waiting for it, with `wait_now`). */
static void sample_begin(launch_t *l, tr_device_t *d, fstat_t *f, int64_t est, int64_t weight,
                         int wait_now) {
    charge(d, est);
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    if (REAL_FN(cuStreamIsCapturing)(l->stream, &cap) != CUDA_SUCCESS ||
        cap != CU_STREAM_CAPTURE_STATUS_NONE) {
        charge(d, -est * weight); /* captured, not run: the graph's launch is charged */
        return;
    }
    sample_t *s = sample_take(l->stream);
    if (s) {
        s->f = f;
        s->dev = l->dev;
        s->charged = est;
        s->weight = weight;
        if ((REAL_FN(cuStreamQuery)(l->stream) == CUDA_SUCCESS ||
             REAL_FN(cuStreamSynchronize)(l->stream) == CUDA_SUCCESS) &&
            REAL_FN(cuEventRecord)(s->start, l->stream) == CUDA_SUCCESS) {
            l->s = s;
            l->mode = wait_now ? L_SAMPLE_WAIT : L_SAMPLE;
            return;
        }
        s->state = S_FREE;
    }
    /* No event pair can time it: drained, the launch is timed by the host clock until its
     * stream drains again (longer than the kernel, never shorter). */
    l->host = (sample_t){.f = f, .dev = l->dev, .charged = est, .weight = weight};
    l->s = &l->host;
    if (REAL_FN(cuStreamSynchronize)(l->stream) == CUDA_SUCCESS) {
        l->mode = L_HOST_TIMED;
        l->t0 = tr_now_ns();
        return;
    }
    settle(l->s, -1); /* cannot be timed at all: the largest cost measured */
}

static void post_launch(launch_t *l, CUresult r) {
    if (l->mode == L_PLAIN) return;
    sample_t *s = l->s;
    if (r != CUDA_SUCCESS) { /* nothing ran: the provisional charge goes back */
        charge(&tr_region()->devices[s->dev], -s->charged);
        s->state = S_FREE;
        return;
    }
    if (l->mode == L_HOST_TIMED) {
        CUresult q = REAL_FN(cuStreamSynchronize)(l->stream);
        settle(s, q == CUDA_SUCCESS ? (int64_t)(tr_now_ns() - l->t0) : -1);
        return;
    }
    if (REAL_FN(cuEventRecord)(s->end, l->stream) != CUDA_SUCCESS) {
        settle(s, -1);
        s->state = S_FREE;
        return;
    }
    if (l->mode == L_SAMPLE_WAIT) {
        CUresult q = REAL_FN(cuEventSynchronize)(s->end);
        settle(s, q == CUDA_SUCCESS ? elapsed_ns(s->start, s->end) : -1);
        s->state = S_FREE;
        return;
    }
    tr_lock(&ring_lock);
    s->state = S_PENDING;
    atomic_fetch_add(&pending, 1);
    tr_unlock(&ring_lock);
}

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
    if (__builtin_expect(mt.launches % POLL_EVERY == 0, 0)) settle_ready(0);
    fstat_t *f = fstat_of(key);
    int64_t est = atomic_load_explicit(&f->est_ns, memory_order_relaxed);
    if (TR_LIKELY(atomic_load_explicit(&f->samples, memory_order_relaxed) >= TRUST_SAMPLES)) {
        if (TR_LIKELY(--mt.countdown != 0)) {
            spend(d, pct, est);
            return CUDA_SUCCESS;
        }
        mt.countdown = draw_countdown();
        wait_for_budget(d, pct);
        l->dev = dev;
        l->stream = (ptsz && s == NULL) ? CU_STREAM_PER_THREAD : s;
        sample_begin(l, d, f, est, SAMPLE_EVERY, 0);
        return CUDA_SUCCESS;
    }
    /* Not yet measured enough: every launch sampled, charged at least the largest cost seen;
     * nothing measured yet in this process: wait for this one. */
    int64_t floor_ = atomic_load(&dev_max[dev]);
    wait_for_budget(d, pct);
    l->dev = dev;
    l->stream = (ptsz && s == NULL) ? CU_STREAM_PER_THREAD : s;
    sample_begin(l, d, f, est > floor_ ? est : floor_, 1, floor_ == 0);
    return CUDA_SUCCESS;
}

#define LAUNCH_HOOK(sym, key, stream, ptsz, ...)                                               \
    do {                                                                                       \
        if (tr_guard) return REAL_FN(sym)(__VA_ARGS__);                                        \
        launch_t l;                                                                            \
        CUresult pre = pre_launch((uintptr_t)(key), (stream), (ptsz), &l);                     \
        if (pre != CUDA_SUCCESS) return pre;                                                   \
        /* Not sampled: nothing is left to do after the driver returns, so it is a tail call   \
         * (a driver re-entering an exported launch from inside it would be counted twice:     \
         * billed more, never less). */                                                        \
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
