/*
 * Process-local map from a handle (pointer, VMM handle, array, pool, context) to the device
 * and bytes it was charged, so that the matching free releases exactly what was charged.
 * Open addressing under one mutex: the critical section is a few loads and stores.
 * Stream-ordered allocations (TR_K_ASYNC, one put and one take per allocation: a hot path)
 * have a table of their own, with no lock of its own: every caller holds the pool lock of
 * hooks_cuda_pool.c already.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tranche.h"

typedef struct {
    uint64_t key;
    uint64_t size;
    int32_t kind; /* 0 empty, -1 tombstone */
    int32_t dev;
} entry_t;

typedef struct {
    entry_t *tab;
    size_t cap, live, used; /* used counts live + tombstones */
} table_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static table_t handles, async_ptrs;

static table_t *table_lock(int kind) {
    if (kind == TR_K_ASYNC) return &async_ptrs;
    pthread_mutex_lock(&mu);
    return &handles;
}

static void table_unlock(int kind) {
    if (kind != TR_K_ASYNC) pthread_mutex_unlock(&mu);
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
        if (t->tab[i].kind <= 0) continue;
        size_t j = hash(t->tab[i].kind, t->tab[i].key) & (ncap - 1);
        while (n[j].kind) j = (j + 1) & (ncap - 1);
        n[j] = t->tab[i];
    }
    free(t->tab);
    t->tab = n;
    t->cap = ncap;
    t->used = t->live;
    return 0;
}

void tr_track_put(int kind, uint64_t key, int dev, uint64_t size) {
    table_t *t = table_lock(kind);
    entry_t *e = find(t, kind, key);
    if (e) {
        e->dev = dev;
        e->size = size;
    } else if ((t->used + 1) * 2 <= t->cap || grow(t) == 0) {
        size_t i = hash(kind, key) & (t->cap - 1);
        while (t->tab[i].kind > 0) i = (i + 1) & (t->cap - 1);
        if (t->tab[i].kind == 0) t->used++;
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
        e->kind = -1;
        t->live--;
    }
    table_unlock(kind);
    return e ? 0 : -1;
}

void tr_track_forget_all(void) {
    /* In a forked child: another thread of the parent may have held the mutex at fork time,
     * so it is made afresh. The parent's table is left to the child's heap, unused. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    mu = fresh;
    memset(&handles, 0, sizeof handles);
    memset(&async_ptrs, 0, sizeof async_ptrs);
}
