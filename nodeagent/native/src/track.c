/*
 * Process-local map from a handle (pointer, VMM handle, array, pool, context) to the device
 * and bytes it was charged, so that the matching free releases exactly what was charged.
 * Open addressing (linear probing) under one spin lock: the critical section is a few loads
 * and stores, and every cuMemAlloc/cuMemFree takes it (issue #27's overhead goal), so the lock
 * is one exchange and a release store, not a call into libc's mutex. An entry is removed by
 * shifting the entries after it back (no tombstones): a driver hands out ever new addresses,
 * and tombstones would lengthen every probe and force a rehash every few hundred frees.
 * Stream-ordered allocations (TR_K_ASYNC, one put and one take per allocation: a hot path)
 * have a table of their own, with no lock of its own: every caller holds the pool lock of
 * hooks_cuda_pool.c already.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "tranche.h"

typedef struct {
    uint64_t key;
    uint64_t size;
    int32_t kind; /* 0 empty */
    int32_t dev;
} entry_t;

typedef struct {
    entry_t *tab;
    size_t cap, live;
} table_t;

static _Atomic int mu; /* 1 while held */

static inline void cpu_relax(void) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}
static table_t handles, async_ptrs;

static table_t *table_lock(int kind) {
    if (kind == TR_K_ASYNC) return &async_ptrs;
    for (int spins = 0; atomic_exchange_explicit(&mu, 1, memory_order_acquire);) {
        /* Held for a few loads and stores: wait on a plain load; a holder that lost its CPU
         * (2 threads on 1 core) gets it back by a yield. */
        while (atomic_load_explicit(&mu, memory_order_relaxed)) {
            if (++spins > 64) sched_yield();
            else cpu_relax();
        }
    }
    return &handles;
}

static void table_unlock(int kind) {
    if (kind != TR_K_ASYNC) atomic_store_explicit(&mu, 0, memory_order_release);
}

static size_t hash(int kind, uint64_t key) {
    uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17);
}

static entry_t *find(table_t *t, int kind, uint64_t key) {
    if (!t->tab) return NULL;
    for (size_t i = hash(kind, key) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        if (t->tab[i].kind == 0) return NULL;
        if (t->tab[i].kind == kind && t->tab[i].key == key) return &t->tab[i];
    }
}

static int grow(table_t *t) {
    size_t ncap = t->cap ? (t->live * 4 > t->cap ? t->cap * 2 : t->cap) : 1024;
    entry_t *n = calloc(ncap, sizeof *n);
    if (!n) return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (t->tab[i].kind == 0) continue;
        size_t j = hash(t->tab[i].kind, t->tab[i].key) & (ncap - 1);
        while (n[j].kind) j = (j + 1) & (ncap - 1);
        n[j] = t->tab[i];
    }
    free(t->tab);
    t->tab = n;
    t->cap = ncap;
    return 0;
}

/* Remove entry i, moving back each later entry of the run that its home slot allows (so that
 * every entry stays reachable from its home without tombstones). */
static void erase(table_t *t, size_t i) {
    size_t mask = t->cap - 1;
    for (size_t j = (i + 1) & mask; t->tab[j].kind != 0; j = (j + 1) & mask) {
        size_t home = hash(t->tab[j].kind, t->tab[j].key) & mask;
        /* j stays if its home lies cyclically in (i, j] */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j)) continue;
        t->tab[i] = t->tab[j];
        i = j;
    }
    t->tab[i].kind = 0;
    t->live--;
}

void tr_track_put(int kind, uint64_t key, int dev, uint64_t size) {
    table_t *t = table_lock(kind);
    entry_t *e = find(t, kind, key);
    if (e) {
        e->dev = dev;
        e->size = size;
    } else if ((t->live + 1) * 2 <= t->cap || grow(t) == 0) {
        size_t i = hash(kind, key) & (t->cap - 1);
        while (t->tab[i].kind != 0) i = (i + 1) & (t->cap - 1);
        t->tab[i] = (entry_t){.key = key, .size = size, .kind = kind, .dev = dev};
        t->live++;
    }
    table_unlock(kind);
}

int tr_track_get(int kind, uint64_t key, int *dev, uint64_t *size) {
    table_t *t = table_lock(kind);
    entry_t *e = find(t, kind, key);
    if (e) {
        *dev = e->dev;
        *size = e->size;
    }
    table_unlock(kind);
    return e ? 0 : -1;
}

int tr_track_take(int kind, uint64_t key, int *dev, uint64_t *size) {
    table_t *t = table_lock(kind);
    entry_t *e = find(t, kind, key);
    if (e) {
        *dev = e->dev;
        *size = e->size;
        erase(t, (size_t)(e - t->tab));
    }
    table_unlock(kind);
    return e ? 0 : -1;
}

void tr_track_forget_all(void) {
    /* In a forked child: another thread of the parent may have held the lock at fork time,
     * so it is made afresh. The parent's table is left to the child's heap, unused. */
    atomic_store(&mu, 0);
    memset(&handles, 0, sizeof handles);
    memset(&async_ptrs, 0, sizeof async_ptrs);
}
