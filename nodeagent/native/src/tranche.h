/* Internals shared by the hook families: the generated tables, init state and the guard. */
#ifndef TRANCHE_H
#define TRANCHE_H

#define __CUDA_API_VERSION_INTERNAL 1
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <cuda.h>
#include <nvml.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>

#include "config.h"
#include "region.h"

#define TR_EXPORT __attribute__((visibility("default")))
#define TR_LIKELY(x) __builtin_expect(!!(x), 1)

enum tr_sym {
#define HOOK(fam, sym, base) TR_##sym,
#define REAL(lib, sym) TR_##sym,
#include "hooks.def"
#undef HOOK
#undef REAL
    TR_SYM_COUNT
};

extern void *tr_real[TR_SYM_COUNT];
/* Typed pointer to the real implementation of sym (declared by cuda.h / nvml.h). */
#define REAL_FN(sym) ((__typeof__(&sym))tr_real[TR_##sym])

/* >0 while this thread runs inside the library: nested calls go straight to the driver. */
extern __thread int tr_guard __attribute__((tls_model("initial-exec")));

extern tr_config_t tr_cfg;
/* 1 when config and region are in place; 0 means fail closed. Runs init on first use. The
 * fast paths below are inline: they run on every launch (issue #27's overhead goals). */
extern _Atomic int tr_init_ok;
int tr_ready_slow(void);
static inline int tr_ready(void) {
    if (TR_LIKELY(atomic_load_explicit(&tr_init_ok, memory_order_acquire))) return 1;
    return tr_ready_slow();
}
void tr_resolve(void);
const char *tr_init_error(void);
/* Region device index for a CUDA device, or -1 if the slice does not cover it. */
int tr_dev_index(CUdevice dev);
/* Same for the current context's device; -2 when the thread has no context. Per-thread cache
 * of the current context's slice index: a context's address can come back as another
 * device's context once it is destroyed, so the cache is also keyed by the count of contexts
 * gone (bumped by every destroy, release to zero and reset). */
extern __thread CUcontext tr_cached_ctx __attribute__((tls_model("initial-exec")));
extern __thread int tr_cached_idx __attribute__((tls_model("initial-exec")));
extern __thread uint64_t tr_cached_epoch __attribute__((tls_model("initial-exec")));
extern _Atomic uint64_t tr_ctx_epoch;
int tr_current_dev_index_slow(CUcontext ctx, uint64_t epoch);
int tr_dev_uuid(CUdevice dev, char *out, size_t len);
int tr_dev_index_by_uuid(const char *uuid);
uint64_t tr_now_ns(void); /* CLOCK_MONOTONIC by raw system call */
void tr_sleep_ns(uint64_t ns);
/* A system call made directly, never through libc's syscall(), which the program may define:
 * the result, or -errno. */
long tr_syscall4(long nr, long a, long b, long c, long d);
/* Our pid, from the kernel: a program's own getpid() could name another process, whose death
 * would free our charge. */
static inline uint32_t tr_self_pid(void) { return (uint32_t)tr_syscall4(SYS_getpid, 0, 0, 0, 0); }
/* lookup.c: glibc's dlsym, and our hook for the variant cuGetProcAddress picked. */
void *tr_real_dlsym(void *handle, const char *symbol);
void *tr_hook_substitute(const char *symbol, void *real);

static inline int tr_current_dev_index(void) {
    uint64_t epoch = atomic_load_explicit(&tr_ctx_epoch, memory_order_acquire);
    CUcontext ctx = NULL;
    if (REAL_FN(cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS || !ctx) return -2;
    if (TR_LIKELY(ctx == tr_cached_ctx && epoch == tr_cached_epoch)) return tr_cached_idx;
    return tr_current_dev_index_slow(ctx, epoch);
}

/* A lock that may be held across a driver call (the pool lock is): taking and giving it back
 * uncontended is one locked instruction each, inline, with no call into libc (whose
 * pthread_mutex_* a program can define for itself and make a no-op); a waiter sleeps on a
 * futex by raw system call. 0 free, 1 held, 2 held and maybe waited for. Zero-initialised. */
typedef _Atomic int tr_lock_t;
void tr_lock_wait(tr_lock_t *m);
void tr_lock_wake(tr_lock_t *m);
static inline void tr_lock(tr_lock_t *m) {
    int free_ = 0;
    if (!TR_LIKELY(atomic_compare_exchange_strong_explicit(m, &free_, 1, memory_order_acquire,
                                                           memory_order_relaxed)))
        tr_lock_wait(m);
}
static inline void tr_unlock(tr_lock_t *m) {
    if (__builtin_expect(atomic_exchange_explicit(m, 0, memory_order_release) == 2, 0))
        tr_lock_wake(m);
}

/* Process-local bookkeeping of what each handle was charged (hooks_cuda_mem.c). */
/* TR_K_VMM, TR_K_GEXEC, TR_K_POOLDEV (the pool's device, and its charge record): the size
 * field holds a pointer to the hook file's own record; TR_K_ASYNC: its pool's record. */
enum tr_kind { TR_K_PTR = 1, TR_K_VMM, TR_K_ARRAY, TR_K_MIPMAP, TR_K_CTX, TR_K_ASYNC,
               TR_K_POOLDEV, TR_K_GEXEC, TR_K_LIMIT };
void tr_track_put(int kind, uint64_t key, int dev, uint64_t size);
int tr_track_take(int kind, uint64_t key, int *dev, uint64_t *size);
int tr_track_get(int kind, uint64_t key, int *dev, uint64_t *size);

/* Graph memory (hooks_cuda_graph.c): reserve what launching or uploading exec e may back
 * beyond its device's graph pool (CUDA_ERROR_OUT_OF_MEMORY over the cap), then settle to what
 * the pool holds once the driver returned r. Begin and end always come in pairs on success. */
typedef struct {
    void *rec;
    uint64_t need[TR_MAX_DEVICES];
} tr_commit_t;
CUresult tr_graph_commit_begin(CUgraphExec e, tr_commit_t *c);
/* Held around any call that adds a node to a graph (a captured async allocation included:
 * capture may target an existing graph another thread instantiates). */
void tr_graph_edit_begin(void);
void tr_graph_edit_end(void);
void tr_graph_commit_end(tr_commit_t *c, CUresult r);
/* A context went away (hooks_cuda_ctx.c): per-thread context caches must look again, since
 * its address may come back as another device's context. */
void tr_ctx_gone(void);
/* A context's charge record went (hooks_cuda_share.c): forget what its limits raised. */
void tr_ctx_limits_forget(uint64_t ctx_key);
#endif
