/*
 * Process-local map from a handle (pointer, VMM handle, array, pool, context) to the device
 * and bytes it was charged, so that the matching free releases exactly what was charged.
 * Open addressing under one mutex: the critical section is a few loads and stores.
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

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static entry_t *tab;
static size_t cap, live, used; /* used counts live + tombstones */

static size_t hash(int kind, uint64_t key) {
    uint64_t h = (key ^ ((uint64_t)kind << 56)) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17);
}

static entry_t *find(int kind, uint64_t key) {
    if (!tab) return NULL;
    for (size_t i = hash(kind, key) & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (tab[i].kind == 0) return NULL;
        if (tab[i].kind == kind && tab[i].key == key) return &tab[i];
    }
}

static int grow(void) {
    size_t ncap = cap ? (live * 4 > cap ? cap * 2 : cap) : 1024;
    entry_t *n = calloc(ncap, sizeof *n);
    if (!n) return -1;
    for (size_t i = 0; i < cap; i++) {
        if (tab[i].kind <= 0) continue;
        size_t j = hash(tab[i].kind, tab[i].key) & (ncap - 1);
        while (n[j].kind) j = (j + 1) & (ncap - 1);
        n[j] = tab[i];
    }
    free(tab);
    tab = n;
    cap = ncap;
    used = live;
    return 0;
}

void tr_track_put(int kind, uint64_t key, int dev, uint64_t size) {
    pthread_mutex_lock(&mu);
    entry_t *e = find(kind, key);
    if (e) {
        e->dev = dev;
        e->size = size;
    } else if ((used + 1) * 2 <= cap || grow() == 0) {
        size_t i = hash(kind, key) & (cap - 1);
        while (tab[i].kind > 0) i = (i + 1) & (cap - 1);
        if (tab[i].kind == 0) used++;
        tab[i] = (entry_t){.key = key, .size = size, .kind = kind, .dev = dev};
        live++;
    }
    pthread_mutex_unlock(&mu);
}

int tr_track_get(int kind, uint64_t key, int *dev, uint64_t *size) {
    pthread_mutex_lock(&mu);
    entry_t *e = find(kind, key);
    if (e) {
        *dev = e->dev;
        *size = e->size;
    }
    pthread_mutex_unlock(&mu);
    return e ? 0 : -1;
}

int tr_track_take(int kind, uint64_t key, int *dev, uint64_t *size) {
    pthread_mutex_lock(&mu);
    entry_t *e = find(kind, key);
    if (e) {
        *dev = e->dev;
        *size = e->size;
        e->kind = -1;
        live--;
    }
    pthread_mutex_unlock(&mu);
    return e ? 0 : -1;
}

void tr_track_forget_all(void) {
    /* In a forked child: another thread of the parent may have held the mutex at fork time,
     * so it is made afresh. The parent's table is left to the child's heap, unused. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    mu = fresh;
    tab = NULL;
    cap = live = used = 0;
}
