/*
 * Symbol lookup: the generated hook table, the dlsym() interposer and the matching of what
 * cuGetProcAddress returned to our hooks. Built without sanitizers and with sibling calls:
 * - dlsym runs before a sanitizer runtime has initialised (ASan resolves its interceptors
 *   through dlsym), so nothing it touches may be instrumented;
 * - the call into glibc's dlsym has to be a tail call so that glibc sees the original
 *   caller's return address, which is what RTLD_NEXT resolves against.
 */
#define _GNU_SOURCE
#include <dlfcn.h>

#include "tranche.h"

typedef struct {
    const char *name;
    const char *base;
    void *hook;
    int id;
} tr_hook_entry_t;

static const tr_hook_entry_t hook_table[] = {
#define HOOK(fam, sym, base) {#sym, #base, (void *)&sym, TR_##sym},
#define REAL(lib, sym)
#include "hooks.def"
#undef HOOK
#undef REAL
};
#define HOOK_COUNT ((int)(sizeof hook_table / sizeof hook_table[0]))


/* Plain loop: strcmp may be a sanitizer interceptor that is not ready yet. */
static int same(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

static int hook_index(const char *name) {
    for (int i = 0; i < HOOK_COUNT; i++)
        if (same(hook_table[i].name, name)) return i;
    return -1;
}

/* The driver picked a variant for (base name, version, flags); hand back our hook for it,
 * the hook of that very variant, so the caller's signature matches. A variant of a hooked base
 * name that none of our hooks covers (a newer driver's _vN) is refused: NULL, fail closed. */
void *tr_hook_substitute(const char *symbol, void *real) {
    int known_base = 0;
    for (int i = 0; i < HOOK_COUNT; i++) {
        if (!same(hook_table[i].base, symbol)) continue;
        known_base = 1;
        if (tr_real[hook_table[i].id] == real) return hook_table[i].hook;
    }
    return known_base ? NULL : real;
}

typedef void *(*dlsym_fn)(void *, const char *);
static dlsym_fn real_dlsym;

static void find_real_dlsym(void) {
    /* glibc >= 2.34 versions dlsym in libc; older ones only have GLIBC_2.2.5. */
    real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real_dlsym) real_dlsym = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
}

void *tr_real_dlsym(void *handle, const char *symbol) {
    if (!real_dlsym) find_real_dlsym();
    return real_dlsym(handle, symbol);
}

TR_EXPORT void *dlsym(void *restrict handle, const char *restrict symbol) {
    if (__builtin_expect(!real_dlsym, 0)) find_real_dlsym();
    /* Only driver and NVML names are ours; while inside the library, always the real one. */
    if (!tr_guard && ((symbol[0] == 'c' && symbol[1] == 'u') || symbol[0] == 'n')) {
        int i = hook_index(symbol);
        if (i >= 0) {
            tr_resolve();
            /* Never advertise an entry point the real driver lacks (older drivers). */
            if (tr_real[hook_table[i].id]) return hook_table[i].hook;
        }
    }
    return real_dlsym(handle, symbol); /* must stay a tail call, see above */
}
