/*
 * Device bytes of a CUDA array: element bytes of every mipmap level. One formula, included by
 * the interception core (what it charges) and by simgpu (what the simulated card takes), so a
 * wrong formula cannot pass its own test. Saturating arithmetic: a hostile descriptor whose
 * product overflows gets UINT64_MAX (refused over any cap), never a small wrapped charge. The
 * loop stops once every dimension is 1 and counts the remaining levels at once, so a level
 * count of 2^32-1 costs at most 64 iterations.
 */
#ifndef TRANCHE_ARRAY_BYTES_H
#define TRANCHE_ARRAY_BYTES_H

#include <cuda.h> /* includers define __CUDA_API_VERSION_INTERNAL first */
#include <stdint.h>

static inline uint64_t tr_format_bytes(CUarray_format f) {
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8: return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: return 2;
    default: return 4;
    }
}

static inline uint64_t tr_sat_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static inline uint64_t tr_sat_add(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* Levels an array of this extent can have: 1 + log2 of its largest dimension (the driver
 * refuses more). At most 64. */
static inline unsigned tr_max_levels(uint64_t w, uint64_t h, uint64_t d) {
    uint64_t m = w > h ? w : h;
    if (d > m) m = d;
    unsigned n = 1;
    while (m >>= 1) n++;
    return n;
}

/* w, h, d as in the descriptor (0 = dimension absent); levels 0 means 1. */
static inline uint64_t tr_array_bytes(uint64_t w, uint64_t h, uint64_t d, unsigned channels,
                                      CUarray_format f, unsigned levels) {
    uint64_t elem = tr_sat_mul(channels, tr_format_bytes(f)), total = 0;
    uint64_t n = levels ? levels : 1;
    for (uint64_t l = 0; l < n; l++) {
        uint64_t lw = l < 64 && w >> l ? w >> l : 1, lh = l < 64 && h >> l ? h >> l : 1,
                 ld = l < 64 && d >> l ? d >> l : 1;
        uint64_t level = tr_sat_mul(tr_sat_mul(tr_sat_mul(lw, h ? lh : 1), d ? ld : 1), elem);
        if (lw == 1 && lh == 1 && ld == 1) /* every further level is one texel too */
            return tr_sat_add(total, tr_sat_mul(level, n - l));
        total = tr_sat_add(total, level);
    }
    return total;
}

#endif
