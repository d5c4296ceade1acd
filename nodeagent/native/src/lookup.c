/*
 * Symbol lookup: the generated hook table, the dynamic-linker interposers (dlsym, dlvsym,
 * dlopen, dlmopen) and the matching of what cuGetProcAddress returned to our hooks. Built without
 * sanitizers and with sibling calls:
 * - dlsym/dlvsym run before a sanitizer runtime has initialised (ASan resolves its
 *   interceptors through them), so nothing they touch may be instrumented;
 * - the calls into glibc's dlsym/dlvsym/dlopen have to be tail calls so that glibc sees the
 *   original caller's return address, which is what RTLD_NEXT and $ORIGIN resolve against.
 *
 * Why four interposers: a program that reaches glibc's own dlsym reaches the real driver.
 * dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34") asks for glibc's versioned definition, which our
 * unversioned dlsym does not satisfy, and dlsym(dlopen("libc.so.6"), "dlsym") names glibc's
 * object; both now hand out our interposers. A library opened with RTLD_DEEPBIND binds its own
 * references to its own dependencies (libc's dlsym, libcuda's cuMemAlloc_v2) before the
 * global scope where the core sits, so the flag is dropped: the library binds like any other.
 * dlmopen(LM_ID_NEWLM) gives a library a namespace of its own, with its own copy of the driver
 * and no core; the core loads itself there first (see dlmopen below).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <unistd.h>

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

/* Does s end in suffix (of length n)? Returns the length of s without it, or -1. */
static long strip(const char *s, long len, const char *suffix, long n) {
    if (len <= n) return -1;
    for (long i = 0; i < n; i++)
        if (s[len - n + i] != suffix[i]) return -1;
    return len - n;
}

/* The base name callers would pass for symbol: without any _ptsz/_ptds and _vN suffixes, so
 * that cuGetProcAddress("cuMemAlloc_v2") is matched like cuGetProcAddress("cuMemAlloc"). */
static long base_length(const char *symbol) {
    long len = 0;
    while (symbol[len]) len++;
    for (;;) {
        long cut = strip(symbol, len, "_ptsz", 5);
        if (cut < 0) cut = strip(symbol, len, "_ptds", 5);
        if (cut < 0) {
            long i = len;
            while (i > 0 && symbol[i - 1] >= '0' && symbol[i - 1] <= '9') i--;
            if (i < len && i >= 2 && symbol[i - 1] == 'v' && symbol[i - 2] == '_') cut = i - 2;
        }
        if (cut <= 0) return len;
        len = cut;
    }
}

static int same_base(const char *base, const char *symbol, long len) {
    long i = 0;
    for (; i < len; i++)
        if (base[i] != symbol[i]) return 0;
    return base[i] == '\0';
}

/* The driver picked a variant for (name, version, flags); hand back our hook for it, the hook
 * of that very variant, so the caller's signature matches. The name may be a base name or a
 * suffixed one (cuMemAlloc_v2): both are matched by the real pointer the driver returned. A
 * variant of a hooked base name that none of our hooks covers (a newer driver's _vN) is
 * refused: NULL, fail closed. */
void *tr_hook_substitute(const char *symbol, void *real) {
    /* The driver may answer a base name with an entry point listed under another one (CUDA 12
     * answers "cuGraphInstantiate" with cuGraphInstantiateWithFlags): the pointer decides. */
    for (int i = 0; i < HOOK_COUNT; i++)
        if (tr_real[hook_table[i].id] == real) return hook_table[i].hook;
    long len = base_length(symbol);
    int known_base = 0;
    for (int i = 0; i < HOOK_COUNT; i++) {
        if (!same_base(hook_table[i].base, symbol, len)) continue;
        known_base = 1;
        if (tr_real[hook_table[i].id] == real) return hook_table[i].hook;
    }
    return known_base ? NULL : real;
}

/* ---- glibc's own dlsym/dlvsym, found in libc's dynamic symbol table. Going through the
 * dynamic linker would find our interposers (we are first in the global scope, and with
 * -Bsymbolic our own references bind to ourselves). */

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);
typedef void *(*dlopen_fn)(const char *, int);
typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);
static dlsym_fn real_dlsym;
static dlvsym_fn real_dlvsym;
static dlopen_fn real_dlopen;
static dlmopen_fn real_dlmopen;

static unsigned long gnu_hash(const char *s) {
    unsigned long h = 5381;
    for (; *s; s++) h = (h * 33 + (unsigned char)*s) & 0xffffffffu;
    return h;
}

static void *elf_lookup(const struct link_map *lm, const char *name) {
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *gnuhash = NULL;
    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        /* glibc relocates these in place; a loader that does not leaves them unrelocated. */
        uintptr_t p = d->d_un.d_ptr < lm->l_addr ? d->d_un.d_ptr + lm->l_addr : d->d_un.d_ptr;
        if (d->d_tag == DT_SYMTAB) symtab = (const ElfW(Sym) *)p;
        else if (d->d_tag == DT_STRTAB) strtab = (const char *)p;
        else if (d->d_tag == DT_GNU_HASH) gnuhash = (const uint32_t *)p;
    }
    if (!symtab || !strtab || !gnuhash) return NULL;
    uint32_t nbuckets = gnuhash[0], symoffset = gnuhash[1], bloom_size = gnuhash[2];
    const uint32_t *buckets = gnuhash + 4 + bloom_size * (sizeof(ElfW(Addr)) / 4);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t h = (uint32_t)gnu_hash(name);
    uint32_t i = buckets[h % nbuckets];
    if (i < symoffset) return NULL;
    for (;; i++) {
        uint32_t ch = chain[i - symoffset];
        const ElfW(Sym) *s = &symtab[i];
        if ((ch | 1) == (h | 1) && s->st_shndx != SHN_UNDEF && s->st_value &&
            same(strtab + s->st_name, name))
            return (void *)(lm->l_addr + s->st_value);
        if (ch & 1) return NULL;
    }
}

static void die(const char *msg) {
    size_t n = 0;
    while (msg[n]) n++;
    if (write(2, msg, n) < 0) { /* nothing more to do */
    }
    _exit(127);
}

static void find_real_dl(void) {
    Dl_info info;
    struct link_map *libc = NULL;
    /* dladdr1 lives in libc (glibc >= 2.34 holds the dl* functions there). */
    if (!dladdr1((void *)&dladdr1, &info, (void **)&libc, RTLD_DL_LINKMAP) || !libc)
        die("tranche: cannot locate libc's dynamic symbol table; refusing to run\n");
    dlvsym_fn v = (dlvsym_fn)elf_lookup(libc, "dlvsym");
    dlsym_fn s = (dlsym_fn)elf_lookup(libc, "dlsym");
    dlopen_fn o = (dlopen_fn)elf_lookup(libc, "dlopen");
    dlmopen_fn m = (dlmopen_fn)elf_lookup(libc, "dlmopen");
    if (!v || !s || !o || !m)
        die("tranche: libc lacks dlsym/dlvsym/dlopen/dlmopen; refusing to run\n");
    real_dlvsym = v;
    real_dlopen = o;
    real_dlmopen = m;
    __atomic_store_n(&real_dlsym, s, __ATOMIC_RELEASE);
}

void *tr_real_dlsym(void *handle, const char *symbol) {
    if (!real_dlsym) find_real_dl();
    return real_dlsym(handle, symbol);
}

/* Our replacement for a name a program may look up, or NULL: the dynamic-linker entry points
 * always; driver and NVML hooks unless we are inside the library. */
static void *replacement(const char *symbol) {
    if (symbol[0] == 'd' && symbol[1] == 'l') {
        if (same(symbol, "dlsym")) return (void *)&dlsym;
        if (same(symbol, "dlvsym")) return (void *)&dlvsym;
        if (same(symbol, "dlopen")) return (void *)&dlopen;
        if (same(symbol, "dlmopen")) return (void *)&dlmopen;
        return NULL;
    }
    if (!tr_guard && ((symbol[0] == 'c' && symbol[1] == 'u') || symbol[0] == 'n')) {
        int i = hook_index(symbol);
        if (i >= 0) {
            tr_resolve();
            /* Never advertise an entry point the real driver lacks (older drivers). */
            if (tr_real[hook_table[i].id]) return hook_table[i].hook;
        }
    }
    return NULL;
}

TR_EXPORT void *dlsym(void *restrict handle, const char *restrict symbol) {
    if (__builtin_expect(!real_dlsym, 0)) find_real_dl();
    void *ours = replacement(symbol);
    if (ours) return ours;
    return real_dlsym(handle, symbol); /* must stay a tail call, see above */
}

TR_EXPORT void *dlvsym(void *restrict handle, const char *restrict symbol,
                       const char *restrict version) {
    if (__builtin_expect(!real_dlsym, 0)) find_real_dl();
    void *ours = replacement(symbol);
    if (ours) return ours;
    return real_dlvsym(handle, symbol, version); /* must stay a tail call, see above */
}

TR_EXPORT void *dlopen(const char *file, int mode) {
    if (__builtin_expect(!real_dlsym, 0)) find_real_dl();
    return real_dlopen(file, mode & ~RTLD_DEEPBIND); /* must stay a tail call, see above */
}

/* A new link-map namespace gets the core first: the first object loaded into a namespace
 * provides its global scope, so every library opened there afterwards binds the driver's
 * names (and dlsym) to that copy of the core, which accounts in the same region. If the core
 * cannot be loaded there, nothing is: dlmopen fails (fail closed). */
/* A new namespace holding a copy of the core, or -1 (LM_ID_NEWLM) when it cannot be made.
 * Apart from dlmopen so that no local of dlmopen has its address taken (that would stop the
 * tail call). */
static __attribute__((noinline)) Lmid_t namespace_with_core(void) {
    Dl_info self;
    Lmid_t ns = LM_ID_NEWLM;
    if (!dladdr((void *)&dlmopen, &self) || !self.dli_fname) return LM_ID_NEWLM;
    void *core = real_dlmopen(LM_ID_NEWLM, self.dli_fname, RTLD_NOW | RTLD_LOCAL);
    if (!core || dlinfo(core, RTLD_DI_LMID, &ns) != 0) return LM_ID_NEWLM;
    return ns;
}

TR_EXPORT void *dlmopen(Lmid_t lmid, const char *file, int mode) {
    if (__builtin_expect(!real_dlsym, 0)) find_real_dl();
    if (lmid == LM_ID_NEWLM && (lmid = namespace_with_core()) == LM_ID_NEWLM) return NULL;
    return real_dlmopen(lmid, file, mode & ~RTLD_DEEPBIND); /* a tail call, see above */
}
