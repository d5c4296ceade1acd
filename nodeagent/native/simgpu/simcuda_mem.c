/*
 * SIMULATED device memory: host-backed (mmap, reserved lazily so a 32 GiB card costs no RAM
 * until touched), charged against the simulated card's capacity in the shared state file.
 * Device pointers are host addresses, so memcpy/memset are plain memory operations.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "simcuda.h" /* first: it sets up cuda.h */
#include "array_bytes.h"

#define GRANULARITY (2ull << 20)

typedef struct alloc {
    uint64_t ptr, size;
    uint64_t overhead; /* SIMULATED driver overhead taken with this allocation (test-only) */
    int dev;
    struct CUmemPoolHandle_st *pool;
    struct alloc *next;
} alloc_t;

#define NBUCKET 4096
static alloc_t *buckets[NBUCKET];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUmemPoolHandle_st default_pool[SIM_MAX_DEV];

static size_t bucket(uint64_t p) { return (size_t)((p >> 8) * 0x9E3779B97F4A7C15ull >> 52); }

static int remember(uint64_t p, uint64_t size, uint64_t overhead, int dev,
                    struct CUmemPoolHandle_st *pool) {
    alloc_t *a = malloc(sizeof *a);
    if (!a) return -1;
    *a = (alloc_t){p, size, overhead, dev, pool, NULL};
    pthread_mutex_lock(&mu);
    a->next = buckets[bucket(p)];
    buckets[bucket(p)] = a;
    pthread_mutex_unlock(&mu);
    return 0;
}

static alloc_t *forget(uint64_t p) {
    pthread_mutex_lock(&mu);
    alloc_t **pp = &buckets[bucket(p)];
    while (*pp && (*pp)->ptr != p) pp = &(*pp)->next;
    alloc_t *a = *pp;
    if (a) *pp = a->next;
    pthread_mutex_unlock(&mu);
    return a;
}

int sim_alloc_size(uint64_t p, uint64_t *size, int *dev) {
    pthread_mutex_lock(&mu);
    alloc_t *a = buckets[bucket(p)];
    while (a && a->ptr != p) a = a->next;
    if (a) *size = a->size, *dev = a->dev;
    pthread_mutex_unlock(&mu);
    return a ? 0 : -1;
}

#define SMALL_ALLOC (1ull << 20)

void *sim_host_map(uint64_t size) {
    /* Small blocks from the heap (cheap, like a real driver's sub-allocator); large ones as
     * lazily-backed mappings so a simulated 32 GiB card needs no host RAM until written. */
    if (size < SMALL_ALLOC) return aligned_alloc(256, (size + 255) & ~255ull);
    void *p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void sim_host_unmap(void *p, uint64_t size) {
    if (size < SMALL_ALLOC) free(p);
    else munmap(p, size);
}

static CUresult dev_alloc(CUdeviceptr *dptr, uint64_t size, struct CUmemPoolHandle_st *pool) {
    /* A pool names its device: served without a current context (the permissive reading of
     * the driver documentation, so tests show the core, not simgpu, refusing that case). */
    CUresult r = pool ? (sim_ready() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED) : sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    int dev = pool ? pool->dev : sim_cur->dev;
    /* SIMULATED driver overhead (test-only fault injection): floor(size * permille / 1000),
     * computed without overflow; charged to this process, invisible to the core. */
    uint64_t pm = pool && pool->host ? 0 : sim_overhead_permille, overhead = 0;
    if (pm) {
        if (size / 1000 > UINT64_MAX / pm) return CUDA_ERROR_OUT_OF_MEMORY;
        overhead = size / 1000 * pm + size % 1000 * pm / 1000;
    }
    if (!pool && sim_mem_take(dev, size) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (overhead && sim_mem_take(dev, overhead) != 0) {
        if (!pool) sim_mem_give(dev, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *p = sim_host_map(size);
    if (!p) {
        if (!pool) sim_mem_give(dev, size);
        if (overhead) sim_mem_give(dev, overhead);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p;
    if (remember(*dptr, size, overhead, dev, pool) != 0 && overhead)
        sim_mem_give(dev, overhead); /* untracked, as before; at least do not leak the overhead */
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size) {
    return dev_alloc(dptr, size, NULL);
}

SIM_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags) {
    (void)flags;
    return dev_alloc(dptr, size, NULL);
}

SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t w, size_t h,
                                    unsigned int elem) {
    if (!pitch || w == 0 || h == 0 || (elem != 4 && elem != 8 && elem != 16))
        return CUDA_ERROR_INVALID_VALUE;
    *pitch = (w + 511) & ~(size_t)511;
    return dev_alloc(dptr, (uint64_t)*pitch * h, NULL);
}

static CUresult dev_free(CUdeviceptr p, int want_pool) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!p) return CUDA_SUCCESS;
    alloc_t *a = forget(p);
    if (!a) return CUDA_ERROR_INVALID_VALUE;
    (void)want_pool;
    sim_host_unmap((void *)(uintptr_t)a->ptr, a->size);
    if (a->overhead) sim_mem_give(a->dev, a->overhead);
    if (a->pool) {
        struct CUmemPoolHandle_st *pl = a->pool;
        pthread_mutex_lock(&mu);
        pl->in_use -= a->size;
        /* Memory above the release threshold goes back to the card at once. */
        uint64_t keep = pl->in_use > pl->threshold ? pl->in_use : pl->threshold;
        uint64_t give = pl->reserved > keep ? pl->reserved - keep : 0;
        pl->reserved -= give;
        pthread_mutex_unlock(&mu);
        if (give && !pl->host) sim_mem_give(pl->dev, give);
    } else {
        sim_mem_give(a->dev, a->size);
    }
    free(a);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemFree_v2(CUdeviceptr p) { return dev_free(p, 0); }

SIM_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    int d = sim_cur->dev;
    uint64_t used = atomic_load(&SIM_DEV(d)->used), tot = sim_cfg[d].memory_bytes;
    *free = used < tot ? tot - used : 0;
    *total = tot;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAllocHost_v2(void **pp, size_t size) {
    *pp = malloc(size ? size : 1);
    return *pp ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult cuMemHostAlloc(void **pp, size_t size, unsigned int flags) {
    (void)flags;
    return cuMemAllocHost_v2(pp, size);
}

SIM_API CUresult cuMemFreeHost(void *p) {
    free(p);
    return CUDA_SUCCESS;
}

/* ---- Copies and sets: host memory underneath. */

SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) {
    memcpy((void *)(uintptr_t)d, h, n);
    return CUDA_SUCCESS;
}
SIM_API CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) {
    memcpy(h, (const void *)(uintptr_t)d, n);
    return CUDA_SUCCESS;
}
SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
    memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
    return CUDA_SUCCESS;
}
SIM_API CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) { return cuMemcpyDtoD_v2(d, s, n); }
SIM_API CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
    (void)st;
    return cuMemcpyDtoD_v2(d, s, n);
}
SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, CUstream st) {
    (void)st;
    return cuMemcpyHtoD_v2(d, h, n);
}
SIM_API CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, CUstream st) {
    (void)st;
    return cuMemcpyDtoH_v2(h, d, n);
}
SIM_API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
    memset((void *)(uintptr_t)d, v, n);
    return CUDA_SUCCESS;
}
SIM_API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) {
    unsigned int *p = (unsigned int *)(uintptr_t)d;
    for (size_t i = 0; i < n; i++) p[i] = v;
    return CUDA_SUCCESS;
}
SIM_API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st) {
    (void)st;
    return cuMemsetD8_v2(d, v, n);
}

/* ---- Stream-ordered allocation: pools hold reserved memory charged to the card. */

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice d) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (d < 0 || d >= sim_ndev) return CUDA_ERROR_INVALID_DEVICE;
    default_pool[d].dev = d;
    *pool = &default_pool[d];
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice d) {
    return cuDeviceGetDefaultMemPool(pool, d);
}

SIM_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!props || (props->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
                   (props->location.id < 0 || props->location.id >= sim_ndev)))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    p->dev = props->location.id;
    p->host = props->location.type != CU_MEM_LOCATION_TYPE_DEVICE; /* system memory */
    *pool = p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    if (pool->reserved && !pool->host) sim_mem_give(pool->dev, pool->reserved);
    if (pool < &default_pool[0] || pool >= &default_pool[SIM_MAX_DEV]) free(pool);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
    if (!pool || !v) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    cuuint64_t x = a == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ? pool->reserved
                   : a == CU_MEMPOOL_ATTR_USED_MEM_CURRENT    ? pool->in_use
                   : a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD   ? pool->threshold
                                                              : 0;
    pthread_mutex_unlock(&mu);
    *(cuuint64_t *)v = x;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute a, void *v) {
    if (!pool || !v) return CUDA_ERROR_INVALID_VALUE;
    if (a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) pool->threshold = *(cuuint64_t *)v;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    uint64_t floor = pool->in_use > keep ? pool->in_use : keep;
    uint64_t give = pool->reserved > floor ? pool->reserved - floor : 0;
    pool->reserved -= give;
    pthread_mutex_unlock(&mu);
    if (give && !pool->host) sim_mem_give(pool->dev, give);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                         CUstream s) {
    if (!pool || size == 0) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *st = sim_stream(s);
    if (st && st->capture) {
        if (pool->host) return CUDA_ERROR_NOT_SUPPORTED; /* graph memory lives on a device */
        return sim_capture_alloc(st, dptr, size, pool->dev);
    }
    pthread_mutex_lock(&mu);
    /* The pool grows in whole granules, like the real driver's pools. */
    uint64_t need = pool->in_use + size;
    uint64_t grow = need > pool->reserved
                        ? ((need - pool->reserved + GRANULARITY - 1) / GRANULARITY) * GRANULARITY
                        : 0;
    if (grow && !pool->host && sim_mem_take(pool->dev, grow) != 0) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool->reserved += grow;
    pool->in_use += size;
    pthread_mutex_unlock(&mu);
    CUresult r = dev_alloc(dptr, size, pool);
    if (r != CUDA_SUCCESS) {
        pthread_mutex_lock(&mu);
        pool->in_use -= size;
        pthread_mutex_unlock(&mu);
    }
    return r;
}

/* The pool of the stream's device, which for an explicit stream need not be the current
 * context's (as with a real driver). */
SIM_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    CUmemoryPool pool;
    struct CUstream_st *st = sim_stream(s);
    cuDeviceGetDefaultMemPool(&pool, st && st->ctx ? st->ctx->dev : sim_cur->dev);
    return cuMemAllocFromPoolAsync(dptr, size, pool, s);
}

SIM_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
    struct CUstream_st *st = sim_stream(s);
    if (st && st->capture) return sim_capture_free(st, p); /* freed when the graph runs */
    return dev_free(p, 1);
}

SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s)
    __attribute__((alias("cuMemAllocAsync")));
SIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s)
    __attribute__((alias("cuMemAllocFromPoolAsync")));
SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
    __attribute__((alias("cuMemFreeAsync")));

/* ---- Virtual memory management: physical handles are memfds mapped into reserved ranges.
 * Device-located handles take simulated device memory; host-located ones (HOST, HOST_NUMA,
 * HOST_NUMA_CURRENT) are system memory, as on a real driver, and take none. Like a real driver,
 * a handle released while still mapped keeps its memory until its last mapping is unmapped. */

typedef struct {
    int fd, dev; /* dev -1: host memory */
    uint64_t size;
    int maps, released;
    int refs; /* handles held: cuMemCreate, each cuMemRetainAllocationHandle and import */
    int types;    /* requestedHandleTypes at creation: what it may be exported as */
    int borrowed; /* imported from another process: that process holds the memory */
} vmm_t;

typedef struct {
    uint64_t va, size;
    vmm_t *v;
} vmm_map_t;

static vmm_map_t vmaps[4096];
static size_t nvmaps;

#define MAX_VMM_LIVE 4096
static vmm_t *vmm_live[MAX_VMM_LIVE]; /* handles made here, for same-process imports */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER; /* taken alone or inside mu */

static void vmm_drop(vmm_t *v) {
    pthread_mutex_lock(&live_mu);
    for (size_t i = 0; i < MAX_VMM_LIVE; i++)
        if (vmm_live[i] == v) vmm_live[i] = NULL;
    pthread_mutex_unlock(&live_mu);
    close(v->fd);
    if (v->dev >= 0 && !v->borrowed) sim_mem_give(v->dev, v->size);
    free(v);
}

SIM_API CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *prop,
                                               CUmemAllocationGranularity_flags o) {
    (void)prop, (void)o;
    *g = GRANULARITY;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                             const CUmemAllocationProp *prop, unsigned long long flags) {
    (void)flags;
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!prop || size == 0 || size % GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    int dev;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (prop->location.id < 0 || prop->location.id >= sim_ndev) return CUDA_ERROR_INVALID_VALUE;
        dev = prop->location.id;
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: dev = -1; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    vmm_t *v = calloc(1, sizeof *v);
    if (!v) return CUDA_ERROR_OUT_OF_MEMORY;
    if (dev >= 0 && sim_mem_take(dev, size) != 0) {
        free(v);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    v->dev = dev;
    v->refs = 1;
    v->size = size;
    v->types = (int)prop->requestedHandleTypes;
    char name[32];
    snprintf(name, sizeof name, "simgpu-vmm-dev%d", dev);
    v->fd = memfd_create(name, MFD_CLOEXEC);
    if (v->fd < 0 || ftruncate(v->fd, (off_t)size) != 0) {
        vmm_drop(v);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&live_mu);
    for (size_t i = 0; i < MAX_VMM_LIVE; i++)
        if (!vmm_live[i]) {
            vmm_live[i] = v;
            break;
        }
    pthread_mutex_unlock(&live_mu);
    *h = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
    vmm_t *v = (vmm_t *)(uintptr_t)h;
    if (!v || v->released) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    int gone = --v->refs <= 0; /* the last handle: the memory goes with the last mapping */
    int mapped = v->maps > 0;
    if (gone) v->released = 1;
    pthread_mutex_unlock(&mu);
    if (gone && !mapped) vmm_drop(v);
    return CUDA_SUCCESS;
}

/* As a real driver: the handle that backs a mapped address, retained once more (each retain
 * is matched by a cuMemRelease); the memory stays while any handle or mapping holds it. */
SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr) {
    if (!h) return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr a = (CUdeviceptr)(uintptr_t)addr;
    pthread_mutex_lock(&mu);
    vmm_t *v = NULL;
    for (size_t i = 0; i < nvmaps && !v; i++)
        if (a >= vmaps[i].va && a - vmaps[i].va < vmaps[i].size) v = vmaps[i].v;
    if (v) {
        v->refs++;
        v->released = 0;
        *h = (CUmemGenericAllocationHandle)(uintptr_t)v;
    }
    pthread_mutex_unlock(&mu);
    return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Export as a file descriptor (a dup of the handle's memfd), only if it was created asking
 * for that type, as a real driver. Importing it in the same process retains the same
 * allocation (refcounted like cuMemRetainAllocationHandle: the memory stays while any handle
 * or mapping holds it); in another process it yields a handle over the exporter's memory,
 * which that process keeps holding (SIMULATED: no cross-process reference count). */
SIM_API CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h,
                                              CUmemAllocationHandleType type,
                                              unsigned long long flags) {
    (void)flags;
    vmm_t *v = (vmm_t *)(uintptr_t)h;
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || !v || v->released) return CUDA_ERROR_INVALID_VALUE;
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !(v->types & (int)type))
        return CUDA_ERROR_NOT_SUPPORTED;
    int fd = dup(v->fd);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

static vmm_t *vmm_by_inode(ino_t ino) {
    for (size_t i = 0; i < MAX_VMM_LIVE; i++) {
        struct stat st;
        if (vmm_live[i] && fstat(vmm_live[i]->fd, &st) == 0 && st.st_ino == ino)
            return vmm_live[i];
    }
    return NULL;
}

SIM_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os,
                                                CUmemAllocationHandleType type) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    int fd = (int)(intptr_t)os;
    struct stat st;
    if (!h || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fstat(fd, &st) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    pthread_mutex_lock(&live_mu);
    vmm_t *v = vmm_by_inode(st.st_ino);
    pthread_mutex_unlock(&live_mu);
    if (v) {
        v->refs++;
        v->released = 0;
    }
    pthread_mutex_unlock(&mu);
    if (!v) {
        char link[64], target[128];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        const char *d = n > 0 ? (target[n] = '\0', strstr(target, "simgpu-vmm-dev")) : NULL;
        if (!d || !(v = calloc(1, sizeof *v))) return CUDA_ERROR_INVALID_VALUE;
        *v = (vmm_t){.fd = dup(fd), .dev = atoi(d + strlen("simgpu-vmm-dev")),
                     .size = (uint64_t)st.st_size, .refs = 1, .borrowed = 1};
    }
    *h = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align,
                                     CUdeviceptr addr, unsigned long long flags) {
    (void)align, (void)addr, (void)flags;
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    munmap((void *)(uintptr_t)ptr, size);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle h, unsigned long long flags) {
    (void)flags;
    vmm_t *v = (vmm_t *)(uintptr_t)h;
    if (!v || v->released) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (nvmaps == sizeof vmaps / sizeof vmaps[0]) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                   v->fd, (off_t)offset);
    if (p != MAP_FAILED) {
        vmaps[nvmaps++] = (vmm_map_t){ptr, size, v};
        v->maps++;
    }
    pthread_mutex_unlock(&mu);
    return p == MAP_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nvmaps;) {
        if (vmaps[i].va < ptr || vmaps[i].va - ptr >= size) {
            i++;
            continue;
        }
        vmm_t *v = vmaps[i].v;
        vmaps[i] = vmaps[--nvmaps];
        if (--v->maps == 0 && v->released) vmm_drop(v); /* the last mapping held the memory */
    }
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *d,
                                size_t n) {
    (void)ptr, (void)size, (void)d, (void)n;
    return CUDA_SUCCESS;
}

/* ---- Arrays: element bytes over every level, by the formula the core charges (array_bytes.h). */

static CUresult make_array(CUarray *out, uint64_t bytes) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    struct CUarray_st *a = calloc(1, sizeof *a);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    if (sim_mem_take(sim_cur->dev, bytes) != 0) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->dev = sim_cur->dev;
    a->bytes = bytes;
    *out = a;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuArrayCreate_v2(CUarray *h, const CUDA_ARRAY_DESCRIPTOR *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    return make_array(h, tr_array_bytes(d->Width, d->Height, 0, d->NumChannels, d->Format, 1));
}

SIM_API CUresult cuArray3DCreate_v2(CUarray *h, const CUDA_ARRAY3D_DESCRIPTOR *d) {
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    return make_array(h, tr_array_bytes(d->Width, d->Height, d->Depth, d->NumChannels, d->Format, 1));
}

SIM_API CUresult cuArrayDestroy(CUarray a) {
    if (!a) return CUDA_ERROR_INVALID_HANDLE;
    sim_mem_give(a->dev, a->bytes);
    free(a);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *h, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                        unsigned int levels) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!d || levels == 0) return CUDA_ERROR_INVALID_VALUE;
    /* Like the driver: no more levels than 1 + log2 of the largest dimension. */
    if (levels > tr_max_levels(d->Width, d->Height, d->Depth)) return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = tr_array_bytes(d->Width, d->Height, d->Depth, d->NumChannels, d->Format, levels);
    struct CUmipmappedArray_st *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    if (sim_mem_take(sim_cur->dev, bytes) != 0) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->dev = sim_cur->dev;
    m->bytes = bytes;
    *h = m;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray m) {
    if (!m) return CUDA_ERROR_INVALID_HANDLE;
    sim_mem_give(m->dev, m->bytes);
    free(m);
    return CUDA_SUCCESS;
}
