/*
 * A tenant's shim, opened by tests/native/progs/lookups.c with RTLD_DEEPBIND: it links the
 * driver directly, so under DEEPBIND its references bind to libcuda (and its dlsym to libc's)
 * before the global scope where the core sits. The core drops the flag; both functions must
 * then hand out the core's hook.
 */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>

__attribute__((visibility("default"))) void *shim_direct(void) { return (void *)&cuMemAlloc_v2; }

__attribute__((visibility("default"))) void *shim_dlsym(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    return h ? dlsym(h, "cuMemAlloc_v2") : NULL;
}

/* Loaded with dlmopen(LM_ID_NEWLM) by `lookups escape dlmopen`: a link-map namespace of its
 * own, with its own copy of the driver (and the copy of the core that dlmopen put there). Allocates bytes on device ordinal there;
 * 0 on success. */
__attribute__((visibility("default"))) int shim_alloc(unsigned long long bytes, int ordinal) {
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    if (cuInit(0) || cuDeviceGet(&dev, ordinal) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cuCtxSetCurrent(ctx))
        return -1;
    return (int)cuMemAlloc_v2(&p, bytes);
}
