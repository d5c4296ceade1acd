/*
 * Ways around the interposed dlsym to the real driver (issue #13, item 2). Usage:
 *   lookups alloc WAY SHIM    obtain cuMemAlloc_v2 one WAY, then allocate 1 GiB with it
 *     WAY: dlvsym-2.34 dlvsym-2.2.5   glibc's dlsym through dlvsym(RTLD_DEFAULT, "dlsym", V)
 *          libc-dlsym                 glibc's dlsym through dlsym(dlopen("libc.so.6"), "dlsym")
 *          dlvsym-driver              dlvsym(libcuda, "cuMemAlloc_v2", "GLIBC_2.2.5")
 *          getproc-suffixed           cuGetProcAddress_v2("cuMemAlloc_v2")
 *          deepbind-direct deepbind-dlsym   a shim opened with RTLD_DEEPBIND (SHIM: its path)
 *   lookups suffixed NAME...  cuGetProcAddress and cuGetProcAddress_v2 of each (suffixed) name
 *   lookups escape HOW BYTES SHIM   what the core cannot stop, for the NVML backstop's tests:
 *     HOW: dlmopen   SHIM loaded into a new link-map namespace allocates BYTES with its own
 *                    copy of the driver
 *          elfwalk   the driver's cuMemAlloc_v2 found by reading libcuda's symbol table
 *                    (what a program issuing the driver's ioctls itself amounts to)
 *     prints "held <BYTES>" once allocated, then waits for stdin to close
 *   lookups spin SECONDS   the driver's cuLaunchKernel from libcuda's symbol table: 1 ms
 *     kernels back to back (the whole device), unmetered, for the compute backstop's tests
 * Prints "way=<WAY> in_core=<0|1> alloc=<CUresult>" (in_core: the pointer lies in the core),
 * or per NAME "name=<NAME> v1=<CUresult> v1_in_core=<0|1> v2=<CUresult> v2_in_core=<0|1>".
 */
#include "common.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <unistd.h>

typedef void *(*dlsym_fn)(void *, const char *);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);

static int in_core(void *p) {
    Dl_info info;
    return p && dladdr(p, &info) && info.dli_fname && strstr(info.dli_fname, "libtranche");
}

static void *by_glibc_dlsym(dlsym_fn f) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    return f && cuda ? f(cuda, "cuMemAlloc_v2") : NULL;
}

static void *obtain(const char *way, const char *shim) {
    if (!strcmp(way, "dlvsym-2.34"))
        return by_glibc_dlsym((dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34"));
    if (!strcmp(way, "dlvsym-2.2.5"))
        return by_glibc_dlsym((dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5"));
    if (!strcmp(way, "libc-dlsym")) {
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        return libc ? by_glibc_dlsym((dlsym_fn)dlsym(libc, "dlsym")) : NULL;
    }
    if (!strcmp(way, "dlvsym-driver")) {
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
        return cuda ? dlvsym(cuda, "cuMemAlloc_v2", "GLIBC_2.2.5") : NULL;
    }
    if (!strcmp(way, "getproc-suffixed")) {
        void *p = NULL;
        return cuGetProcAddress_v2("cuMemAlloc_v2", &p, 12090, 0, NULL) == CUDA_SUCCESS ? p : NULL;
    }
    if (!strncmp(way, "deepbind-", 9)) {
        void *h = dlopen(shim, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        void *(*get)(void) = h ? (void *(*)(void))dlsym(h, way[9] == 'd' && way[10] == 'i'
                                                               ? "shim_direct"
                                                               : "shim_dlsym")
                               : NULL;
        return get ? get() : NULL;
    }
    return NULL;
}

/* A symbol (sought->name, cuMemAlloc_v2 by default) from libcuda's dynamic symbol table,
 * without asking the dynamic linker. */
typedef struct {
    const char *name;
    void *found;
} sought_t;

static int find_in_libcuda(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    sought_t *sought = arg;
    if (!strstr(info->dlpi_name, "libcuda")) return 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *hash = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
        const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        for (; d->d_tag != DT_NULL; d++) {
            uintptr_t p = d->d_un.d_ptr < info->dlpi_addr ? d->d_un.d_ptr + info->dlpi_addr
                                                          : d->d_un.d_ptr;
            if (d->d_tag == DT_SYMTAB) symtab = (const ElfW(Sym) *)p;
            if (d->d_tag == DT_STRTAB) strtab = (const char *)p;
            if (d->d_tag == DT_GNU_HASH) hash = (const uint32_t *)p;
        }
    }
    if (!symtab || !strtab || !hash) return 0;
    /* Symbols up to the last one in the GNU hash chains. */
    uint32_t nb = hash[0], off = hash[1], bloom = hash[2], last = 0;
    const uint32_t *buckets = hash + 4 + bloom * (sizeof(ElfW(Addr)) / 4), *chain = buckets + nb;
    for (uint32_t b = 0; b < nb; b++)
        if (buckets[b] > last) last = buckets[b];
    while (last >= off && !(chain[last - off] & 1)) last++;
    for (uint32_t i = 0; i <= last; i++) {
        if (symtab[i].st_value && !strcmp(strtab + symtab[i].st_name, sought->name)) {
            sought->found = (void *)(info->dlpi_addr + symtab[i].st_value);
            return 1;
        }
    }
    return 0;
}

static int escape(const char *how, unsigned long long bytes, const char *shim) {
    CUdevice dev;
    int ordinal = visible_ordinal();
    CHECK(open_device(ordinal, &dev)); /* through the core: a slot, a charged context */
    int r = -1;
    if (!strcmp(how, "dlmopen")) {
        void *h = dlmopen(LM_ID_NEWLM, shim, RTLD_NOW);
        int (*alloc)(unsigned long long, int) =
            h ? (int (*)(unsigned long long, int))dlsym(h, "shim_alloc") : NULL;
        r = alloc ? alloc(bytes, ordinal) : -2;
    } else if (!strcmp(how, "elfwalk")) {
        sought_t s = {"cuMemAlloc_v2", NULL};
        dl_iterate_phdr(find_in_libcuda, &s);
        alloc_fn f = (alloc_fn)s.found;
        CUdeviceptr p;
        r = f && !in_core((void *)f) ? (int)f(&p, bytes) : -2;
    }
    if (r != 0) {
        printf("FAIL escape %s = %d\n", how, r);
        return 1;
    }
    printf("held %llu\n", bytes);
    fflush(stdout);
    wait_stdin_closed();
    return 0;
}

/* Compute the core never meters: the driver's cuLaunchKernel read from libcuda's symbol
 * table, 1 ms kernels back to back for `seconds` (each waited for, as a training step is).
 * Prints "running" once the first has run. */
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);

static int spin(double seconds) {
    CUdevice dev;
    CUmodule mod;
    CUfunction fn;
    CHECK(open_device(visible_ordinal(), &dev)); /* through the core: a slot, a context */
    CHECK(cuModuleLoadData(&mod, "spin"));
    CHECK(cuModuleGetFunction(&fn, mod, "busy"));
    sought_t s = {"cuLaunchKernel", NULL};
    dl_iterate_phdr(find_in_libcuda, &s);
    launch_fn launch = (launch_fn)s.found;
    EXPECT(launch && !in_core((void *)launch));
    uint64_t dur = 1000000, end = now_ns() + (uint64_t)(seconds * 1e9);
    void *params[] = {&dur};
    for (int i = 0; now_ns() < end; i++) {
        CHECK(launch(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
        CHECK(cuCtxSynchronize());
        if (i == 0) {
            printf("running\n");
            fflush(stdout);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "spin")) return spin(strtod(argv[2], NULL));
    if (argc == 5 && !strcmp(argv[1], "escape"))
        return escape(argv[2], strtoull(argv[3], NULL, 10), argv[4]);
    if (argc >= 3 && !strcmp(argv[1], "alloc")) {
        CUdevice dev;
        CHECK(open_device(0, &dev));
        alloc_fn f = (alloc_fn)obtain(argv[2], argc > 3 ? argv[3] : "");
        EXPECT(f != NULL);
        CUdeviceptr p = 0;
        CUresult r = f(&p, 1ull << 30);
        printf("way=%s in_core=%d alloc=%d\n", argv[2], in_core((void *)f), (int)r);
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "suffixed")) {
        CUdevice dev;
        CHECK(open_device(0, &dev));
        for (int i = 2; i < argc; i++) {
            void *p1 = NULL, *p2 = NULL;
            CUresult r1 = cuGetProcAddress(argv[i], &p1, 12090, 0);
            CUresult r2 = cuGetProcAddress_v2(argv[i], &p2, 12090, 0, NULL);
            printf("name=%s v1=%d v1_in_core=%d v2=%d v2_in_core=%d\n", argv[i], (int)r1,
                   in_core(p1), (int)r2, in_core(p2));
        }
        return 0;
    }
    fprintf(stderr, "usage: lookups alloc WAY [SHIM] | lookups suffixed NAME...\n");
    return 2;
}
