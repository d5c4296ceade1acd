/*
 * Arguments that would make the core loop or wrap (issue #13, item 9). Usage:
 *   hugeloops mipmap HOW   cuMipmappedArrayCreate of a 64x64 array with 2^32-1 levels
 *   hugeloops wrap HOW     cuArray3DCreate_v2 of 2^22 x 2^21 x 2^21 (2^64 bytes: wraps to 0)
 *   HOW: direct dlsym getproc
 * Prints "code=<CUresult> cpu_ms=<CPU time the call took>".
 */
#include "common.h"

#include <dlfcn.h>

static void *entry(const char *how, const char *name, void *direct) {
    if (!strcmp(how, "dlsym")) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        return h ? dlsym(h, name) : NULL;
    }
    if (!strcmp(how, "getproc")) {
        void *p = NULL;
        char base[64];
        snprintf(base, sizeof base, "%s", name);
        char *v = strstr(base, "_v2");
        if (v) *v = '\0';
        return cuGetProcAddress_v2(base, &p, 12090, 0, NULL) == CUDA_SUCCESS ? p : NULL;
    }
    return direct;
}

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: hugeloops mipmap|wrap direct|dlsym|getproc\n");
        return 2;
    }
    CUdevice dev;
    CHECK(open_device(0, &dev));
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = 64, .Height = 64, .Depth = 0,
                                 .Format = CU_AD_FORMAT_UNSIGNED_INT8, .NumChannels = 1};
    CUresult r;
    double t0 = cpu_ms();
    if (!strcmp(argv[1], "mipmap")) {
        CUresult (*create)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned) =
            entry(argv[2], "cuMipmappedArrayCreate", (void *)&cuMipmappedArrayCreate);
        EXPECT(create != NULL);
        CUmipmappedArray m;
        r = create(&m, &d, 0xffffffffu);
    } else {
        CUresult (*create)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *) =
            entry(argv[2], "cuArray3DCreate_v2", (void *)&cuArray3DCreate_v2);
        EXPECT(create != NULL);
        d.Width = 1ull << 22, d.Height = 1ull << 21, d.Depth = 1ull << 21;
        CUarray a;
        r = create(&a, &d);
    }
    printf("code=%d cpu_ms=%.1f\n", (int)r, cpu_ms() - t0);
    return 0;
}
