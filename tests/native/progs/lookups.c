/*
 * Ways around the interposed dlsym to the real driver (issue #13, item 2). Usage:
 *   lookups alloc WAY SHIM    obtain cuMemAlloc_v2 one WAY, then allocate 1 GiB with it
 *     WAY: dlvsym-2.34 dlvsym-2.2.5   glibc's dlsym through dlvsym(RTLD_DEFAULT, "dlsym", V)
 *          libc-dlsym                 glibc's dlsym through dlsym(dlopen("libc.so.6"), "dlsym")
 *          dlvsym-driver              dlvsym(libcuda, "cuMemAlloc_v2", "GLIBC_2.2.5")
 *          getproc-suffixed           cuGetProcAddress_v2("cuMemAlloc_v2")
 *          deepbind-direct deepbind-dlsym   a shim opened with RTLD_DEEPBIND (SHIM: its path)
 *   lookups suffixed NAME...  cuGetProcAddress and cuGetProcAddress_v2 of each (suffixed) name
 * Prints "way=<WAY> in_core=<0|1> alloc=<CUresult>" (in_core: the pointer lies in the core),
 * or per NAME "name=<NAME> v1=<CUresult> v1_in_core=<0|1> v2=<CUresult> v2_in_core=<0|1>".
 */
#include "common.h"

#include <dlfcn.h>

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

int main(int argc, char **argv) {
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
