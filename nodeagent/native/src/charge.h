/*
 * The charge / call / uncharge pattern every create and free hook shares, in one place: reserve
 * on the container's counter before the driver is asked, give it back if the driver refuses,
 * remember what the handle was charged so that its free gives back exactly that.
 */
#ifndef TRANCHE_CHARGE_H
#define TRANCHE_CHARGE_H

#include "tranche.h"

static inline void tr_uncharge(int dev, uint64_t size) {
    if (dev >= 0 && size) tr_mem_release(dev, size);
}

/* Charge memory the device already holds whatever the cap says (a pool the driver grew past
 * what was asked, memory that cannot be taken back): the counter must show what is held, so
 * the next allocation is refused instead of the excess going unseen. */
static inline void tr_mem_force(int dev, uint64_t size) {
    if (dev < 0 || !size || !TR_OWN_SLOT()) return;
    tr_region_t *r = tr_region();
    atomic_fetch_add(&r->slots[tr_region_slot()].mem_used[dev], size);
    uint64_t used = atomic_fetch_add(&r->devices[dev].mem_used, size) + size;
    uint64_t peak = atomic_load_explicit(&r->devices[dev].mem_peak, memory_order_relaxed);
    while (used > peak && !atomic_compare_exchange_weak(&r->devices[dev].mem_peak, &peak, used)) {
    }
}

/* Move a charge from `held` to `target` bytes: force what is missing, give back the rest. */
static inline void tr_mem_settle(int dev, uint64_t held, uint64_t target) {
    if (target > held) tr_mem_force(dev, target - held);
    else tr_uncharge(dev, held - target);
}

/* Create hook body: charge `size` to region device `dev` (< 0: outside the slice, refused),
 * run `call` with the guard up, keep the charge under (kind, key) on success (key is evaluated
 * after the call, so it may read the new handle), roll it back on failure. Returns. */
#define TR_CHARGED_CREATE(dev, size, kind, key, call)                                          \
    do {                                                                                       \
        int dev_ = (dev);                                                                      \
        uint64_t size_ = (size);                                                               \
        if (dev_ < 0 || tr_mem_reserve(dev_, size_) != 0) return CUDA_ERROR_OUT_OF_MEMORY;     \
        tr_guard++;                                                                            \
        CUresult r_ = (call);                                                                  \
        tr_guard--;                                                                            \
        if (r_ != CUDA_SUCCESS) tr_uncharge(dev_, size_);                                      \
        else tr_track_put((kind), (key), dev_, size_);                                         \
        return r_;                                                                             \
    } while (0)

/* Free hook body: forget what (kind, key) was charged, run `call`, give the charge back on
 * success, keep it if the driver refused (the memory is still held). Returns. */
#define TR_CHARGED_FREE(kind, key, call)                                                       \
    do {                                                                                       \
        uint64_t key_ = (key), size_;                                                          \
        int dev_;                                                                              \
        int known_ = tr_track_take((kind), key_, &dev_, &size_) == 0;                          \
        tr_guard++;                                                                            \
        CUresult r_ = (call);                                                                  \
        tr_guard--;                                                                            \
        if (known_) {                                                                          \
            if (r_ == CUDA_SUCCESS) tr_uncharge(dev_, size_);                                  \
            else tr_track_put((kind), key_, dev_, size_);                                      \
        }                                                                                      \
        return r_;                                                                             \
    } while (0)

/* Entry checks shared by every charged path. Inside the library: straight to the driver. */
#define MEM_ENTER(sym, ...)                                                                    \
    do {                                                                                       \
        if (tr_guard) return REAL_FN(sym)(__VA_ARGS__);                                        \
        if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;                                    \
    } while (0)

#endif
