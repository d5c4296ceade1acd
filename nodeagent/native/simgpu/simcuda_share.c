/*
 * SIMULATED driver entry points that hold device memory or run work outside the plain
 * allocation and launch paths (issue #27, item 7), modelled on the real driver so the tests
 * show the interception core, not simgpu, keeping a slice:
 * - cuCtxSetLimit reserves device memory for the context: the malloc heap and the printf FIFO
 *   their size, the stack its size for every thread the device can hold resident (SMs x 2048),
 *   beyond the defaults already in the context's footprint (stack 1 KiB, FIFO 1 MiB, heap
 *   8 MiB); it is given back when the context goes;
 * - legacy IPC (cuIpcGetMemHandle / cuIpcOpenMemHandle): the handle names the exporting
 *   process, pointer, size and device; a process opening it gets the allocation mapped and
 *   takes no memory of its own (SIMULATED: host-backed memory cannot be shared between
 *   processes, so the contents are a zeroed mapping of the same size);
 * - pool export (cuMemPoolExportToShareableHandle as a file descriptor, cuMemPoolExportPointer)
 *   and import: an imported pool names the exporter's device and reserves nothing itself;
 * - cuMemHostRegister pins host memory (no device memory); cuLaunchHostFunc runs the function
 *   once the stream's earlier work is done, as the driver's callback thread does;
 * - cuGraphExecUpdate (permissive reading: the allocation nodes of the new graph replace the
 *   exec's, so tests show the core refusing an update that would grow them).
 * - cuMemGetHandleForAddressRange hands out a dma-buf (a memfd here).
 * VMM export/import (cuMemExportToShareableHandle, cuMemImportFromShareableHandle) live with
 * the VMM handles in simcuda_mem.c.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "simcuda.h"

#define MAX_RESIDENT_THREADS_PER_SM 2048ull
#define IPC_MAGIC 0x49504753u /* "SGPI" */

static pthread_mutex_t share_mu = PTHREAD_MUTEX_INITIALIZER;

static const size_t limit_default[5] = {1024, 1u << 20, 8u << 20, 2, 2048};

static size_t limit_value(const struct CUctx_st *c, int l) {
    return c->limits[l] ? c->limits[l] : limit_default[l];
}

/* Device memory the context's limits reserve beyond their defaults; UINT64_MAX if it wraps. */
static uint64_t limits_extra(const struct CUctx_st *c) {
    uint64_t per_stack = (uint64_t)sim_cfg[c->dev].sm_count * MAX_RESIDENT_THREADS_PER_SM, total = 0;
    uint64_t stack, fifo = limit_value(c, CU_LIMIT_PRINTF_FIFO_SIZE),
                    heap = limit_value(c, CU_LIMIT_MALLOC_HEAP_SIZE);
    if (__builtin_mul_overflow((uint64_t)limit_value(c, CU_LIMIT_STACK_SIZE), per_stack, &stack))
        return UINT64_MAX;
    uint64_t parts[3] = {stack > 1024 * per_stack ? stack - 1024 * per_stack : 0,
                         fifo > limit_default[1] ? fifo - limit_default[1] : 0,
                         heap > limit_default[2] ? heap - limit_default[2] : 0};
    for (int i = 0; i < 3; i++)
        if (__builtin_add_overflow(total, parts[i], &total)) return UINT64_MAX;
    return total;
}

void sim_ctx_limits_drop(struct CUctx_st *c) {
    pthread_mutex_lock(&share_mu);
    uint64_t give = c->limit_bytes;
    c->limit_bytes = 0;
    memset(c->limits, 0, sizeof c->limits);
    pthread_mutex_unlock(&share_mu);
    if (give) sim_mem_give(c->dev, give);
}

SIM_API CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if ((int)limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
    if (limit >= 5) return limit <= CU_LIMIT_PERSISTING_L2_CACHE_SIZE ? CUDA_SUCCESS
                                                                      : CUDA_ERROR_NOT_SUPPORTED;
    struct CUctx_st *c = sim_cur;
    pthread_mutex_lock(&share_mu);
    size_t old = c->limits[limit];
    c->limits[limit] = value ? value : limit_default[limit];
    uint64_t extra = limits_extra(c);
    r = CUDA_SUCCESS;
    if (extra == UINT64_MAX) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (extra > c->limit_bytes) {
        if (sim_mem_take(c->dev, extra - c->limit_bytes) != 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    } else if (extra < c->limit_bytes) {
        sim_mem_give(c->dev, c->limit_bytes - extra);
    }
    if (r == CUDA_SUCCESS) c->limit_bytes = extra;
    else c->limits[limit] = old;
    pthread_mutex_unlock(&share_mu);
    return r;
}

SIM_API CUresult cuCtxGetLimit(size_t *value, CUlimit limit) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!value || (int)limit < 0 || limit >= CU_LIMIT_MAX) return CUDA_ERROR_INVALID_VALUE;
    *value = limit < 5 ? limit_value(sim_cur, limit) : 0;
    return CUDA_SUCCESS;
}

/* ---- Legacy IPC. */

typedef struct {
    uint32_t magic, pid;
    uint64_t ptr, size;
    int32_t dev;
} ipc_t;

SIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!h || !p) return CUDA_ERROR_INVALID_VALUE;
    ipc_t i = {IPC_MAGIC, (uint32_t)getpid(), p, 0, sim_cur->dev};
    if (sim_alloc_size(p, &i.size, &i.dev) != 0) return CUDA_ERROR_INVALID_VALUE;
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, &i, sizeof i);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags) {
    (void)flags;
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    ipc_t i;
    memcpy(&i, h.reserved, sizeof i);
    if (!p || i.magic != IPC_MAGIC || !i.size) return CUDA_ERROR_INVALID_VALUE;
    if (i.pid == (uint32_t)getpid()) return CUDA_ERROR_INVALID_CONTEXT; /* as a real driver */
    void *m = mmap(NULL, i.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags) {
    return cuIpcOpenMemHandle_v2(p, h, flags);
}

SIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    (void)p; /* the size lives in the handle; the mapping is left to process exit */
    return CUDA_SUCCESS;
}

/* ---- Pool export and import. */

SIM_API CUresult cuMemPoolExportToShareableHandle(void *out, CUmemoryPool pool,
                                                  CUmemAllocationHandleType type,
                                                  unsigned long long flags) {
    (void)flags;
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || !pool || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    char name[32];
    snprintf(name, sizeof name, "simgpu-pool-dev%d", pool->dev);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)out = fd;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *out, void *handle,
                                                    CUmemAllocationHandleType type,
                                                    unsigned long long flags) {
    (void)flags;
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
    char link[64], target[128];
    snprintf(link, sizeof link, "/proc/self/fd/%d", (int)(intptr_t)handle);
    ssize_t n = readlink(link, target, sizeof target - 1);
    int dev = -1;
    if (n > 0) {
        target[n] = '\0';
        const char *d = strstr(target, "simgpu-pool-dev");
        if (d) dev = atoi(d + strlen("simgpu-pool-dev"));
    }
    if (dev < 0 || dev >= sim_ndev) return CUDA_ERROR_INVALID_VALUE;
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    p->dev = dev;
    *out = p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr p) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    uint64_t size;
    int dev;
    if (!out || sim_alloc_size(p, &size, &dev) != 0) return CUDA_ERROR_INVALID_VALUE;
    memset(out, 0, sizeof *out);
    memcpy(out->reserved, &p, sizeof p);
    memcpy(out->reserved + sizeof p, &size, sizeof size);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolImportPointer(CUdeviceptr *p, CUmemoryPool pool,
                                        CUmemPoolPtrExportData *data) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!p || !pool || !data) return CUDA_ERROR_INVALID_VALUE;
    uint64_t size;
    memcpy(&size, data->reserved + sizeof(CUdeviceptr), sizeof size);
    if (!size) return CUDA_ERROR_INVALID_VALUE;
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}

/* ---- Host memory and host functions. */

SIM_API CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags) {
    (void)flags;
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    return p && size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemHostRegister(void *p, size_t size, unsigned int flags) {
    return cuMemHostRegister_v2(p, size, flags);
}

SIM_API CUresult cuMemHostUnregister(void *p) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    struct CUstream_st *st = sim_stream(s);
    if (!fn || !st) return CUDA_ERROR_INVALID_VALUE;
    sim_sleep_until(atomic_load(&st->tail)); /* host work: no device time of its own */
    fn(data);
    return CUDA_SUCCESS;
}

/* dma-buf export of a device range (a real driver hands out a dma-buf file descriptor that
 * keeps the memory alive while another device or process holds it): a memfd stands in. */
SIM_API CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p, size_t size,
                                               CUmemRangeHandleType type,
                                               unsigned long long flags) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle || !p || !size || flags || type != CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = memfd_create("simgpu-dmabuf", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)handle = fd;
    return CUDA_SUCCESS;
}
