/*
 * The rest of the driver surface (issue #27, item 7), each case on a 64 MiB slice of device 0,
 * entry points reached the way HOW says (direct, dlsym, getproc). Usage: surface CASE HOW
 *   limit      raise the malloc heap by 40 MiB, then the stack by 256 B a thread (80 SMs x
 *              2048 threads: 40 MiB), each followed by a 32 MiB allocation; lower both again
 *              and allocate; a created context whose heap was raised, destroyed, gives it back
 *   devrtlimit raise the device runtime's sync depth by one (refused), set it to what it is
 *   vmmshare   a 32 MiB handle exported as a file descriptor and imported again, the original
 *              released and unmapped, then 48 MiB allocated
 *   hostshare  the same with a host-located handle (system memory): export and import pass
 *   ipc        cuIpcGetMemHandle of a 16 MiB allocation
 *   pool       cuMemPoolExportToShareableHandle and cuMemPoolExportPointer on the default pool
 *   execupdate an exec instantiated from a graph allocating 4 MiB and launched, 40 MiB held,
 *              then updated (cuGraphExecUpdate_v2) from a graph allocating 40 MiB and launched
 *   childgraph a graph allocating 4 MiB embedded as a child and cloned (the driver refuses
 *              both); then 48 MiB added to an embedded child's own graph, 40 MiB held, the
 *              parent launched; freed, launched again
 * Prints "RESULT codes=<CUresults> phys=<bytes this process holds on device 0 by NVML, at the
 * fullest point>".
 */
#include "common.h"

#include "reach.h"

#include <sys/mman.h>

#define MiB (1ull << 20)

typedef CUresult (*setlimit_fn)(CUlimit, size_t);
typedef CUresult (*export_fn)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                              unsigned long long);
typedef CUresult (*import_fn)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
typedef CUresult (*ipcget_fn)(CUipcMemHandle *, CUdeviceptr);
typedef CUresult (*poolexp_fn)(void *, CUmemoryPool, CUmemAllocationHandleType, unsigned long long);
typedef CUresult (*poolptr_fn)(CUmemPoolPtrExportData *, CUdeviceptr);
typedef CUresult (*update_fn)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo *);

static char codes[1024];
static size_t len;
static long long fullest;
#define RECORD(r) len += (size_t)snprintf(codes + len, sizeof codes - len, "%s%d", len ? "," : "", (int)(r))

static void look(void) {
    long long b = nvml_process_bytes(0);
    if (b > fullest) fullest = b;
}

static CUmemAllocationProp vmm_prop(CUmemLocationType type, int id) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = type;
    prop.location.id = id;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return prop;
}

static int graph_with_alloc(CUgraph *g, size_t bytes, int dev) {
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = dev;
    p.bytesize = bytes;
    CUgraphNode n;
    CHECK(cuGraphCreate(g, 0));
    CHECK(cuGraphAddMemAllocNode(&n, *g, NULL, 0, &p));
    return 0;
}

static int share(CUdevice dev, CUmemLocationType where) {
    export_fn exp = (export_fn)entry("cuMemExportToShareableHandle", "cuMemExportToShareableHandle",
                                     10020, (void *)&cuMemExportToShareableHandle);
    import_fn imp = (import_fn)entry("cuMemImportFromShareableHandle",
                                     "cuMemImportFromShareableHandle", 10020,
                                     (void *)&cuMemImportFromShareableHandle);
    EXPECT(exp && imp);
    CUmemAllocationProp prop = vmm_prop(where, where == CU_MEM_LOCATION_TYPE_DEVICE ? dev : 0);
    CUmemGenericAllocationHandle h, again = 0;
    CUdeviceptr va, p;
    int fd = -1;
    CHECK(cuMemCreate(&h, 32 * MiB, &prop, 0));
    CHECK(cuMemAddressReserve(&va, 32 * MiB, 0, 0, 0));
    CHECK(cuMemMap(va, 32 * MiB, 0, h, 0));
    CUresult r = exp(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    RECORD(r);
    /* A file descriptor from somewhere else when the export was refused: the import is tried
     * anyway, as a process handed one over a socket would. */
    if (r != CUDA_SUCCESS && (fd = memfd_create("simgpu-vmm-dev0", 0)) >= 0 &&
        ftruncate(fd, 32 * MiB) != 0)
        return 1;
    r = imp(&again, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    RECORD(r);
    CHECK(cuMemRelease(h));
    CHECK(cuMemUnmap(va, 32 * MiB));
    r = cuMemAlloc_v2(&p, 48 * MiB);
    RECORD(r);
    look();
    if (r == CUDA_SUCCESS) CHECK(cuMemFree_v2(p));
    if (again) cuMemRelease(again);
    CHECK(cuMemAddressFree(va, 32 * MiB));
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *what = argv[1];
    how = argv[2];
    CUdevice dev;
    CHECK(open_device(0, &dev));
    CUdeviceptr p;
    CUresult r;

    if (!strcmp(what, "limit")) {
        setlimit_fn set = (setlimit_fn)entry("cuCtxSetLimit", "cuCtxSetLimit", 3010,
                                             (void *)&cuCtxSetLimit);
        EXPECT(set != NULL);
        size_t heap, stack;
        CHECK(cuCtxGetLimit(&heap, CU_LIMIT_MALLOC_HEAP_SIZE));
        CHECK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
        RECORD(set(CU_LIMIT_MALLOC_HEAP_SIZE, heap + 40 * MiB));
        RECORD(r = cuMemAlloc_v2(&p, 32 * MiB)); /* 4 + 40 + 32 > 64 */
        look();
        if (r == CUDA_SUCCESS) CHECK(cuMemFree_v2(p));
        CHECK(set(CU_LIMIT_MALLOC_HEAP_SIZE, heap));
        RECORD(set(CU_LIMIT_STACK_SIZE, stack + 256));
        RECORD(r = cuMemAlloc_v2(&p, 32 * MiB));
        look();
        if (r == CUDA_SUCCESS) CHECK(cuMemFree_v2(p));
        CHECK(set(CU_LIMIT_STACK_SIZE, stack));
        RECORD(r = cuMemAlloc_v2(&p, 48 * MiB)); /* both lowered: 4 + 48 fits */
        look();
        if (r == CUDA_SUCCESS) CHECK(cuMemFree_v2(p));
        /* A created context (4 MiB) whose heap is raised by 40 MiB, then destroyed. */
        CUcontext primary, ctx;
        CHECK(cuCtxGetCurrent(&primary));
        CHECK(cuCtxCreate_v2(&ctx, 0, dev));
        RECORD(set(CU_LIMIT_MALLOC_HEAP_SIZE, heap + 40 * MiB));
        look();
        CHECK(cuCtxDestroy_v2(ctx));
        CHECK(cuCtxSetCurrent(primary));
        RECORD(r = cuMemAlloc_v2(&p, 48 * MiB)); /* given back with the context */
        if (r == CUDA_SUCCESS) CHECK(cuMemFree_v2(p));
    } else if (!strcmp(what, "devrtlimit")) {
        setlimit_fn set = (setlimit_fn)entry("cuCtxSetLimit", "cuCtxSetLimit", 3010,
                                             (void *)&cuCtxSetLimit);
        EXPECT(set != NULL);
        size_t depth;
        CHECK(cuCtxGetLimit(&depth, CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH));
        RECORD(set(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, depth + 1));
        RECORD(set(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, depth));
        look();
    } else if (!strcmp(what, "vmmshare")) {
        if (share(dev, CU_MEM_LOCATION_TYPE_DEVICE)) return 1;
    } else if (!strcmp(what, "hostshare")) {
        if (share(dev, CU_MEM_LOCATION_TYPE_HOST)) return 1;
    } else if (!strcmp(what, "ipc")) {
        ipcget_fn get = (ipcget_fn)entry("cuIpcGetMemHandle", "cuIpcGetMemHandle", 4010,
                                         (void *)&cuIpcGetMemHandle);
        EXPECT(get != NULL);
        CUipcMemHandle h;
        CHECK(cuMemAlloc_v2(&p, 16 * MiB));
        RECORD(get(&h, p));
        look();
        CHECK(cuMemFree_v2(p));
    } else if (!strcmp(what, "pool")) {
        poolexp_fn exp = (poolexp_fn)entry("cuMemPoolExportToShareableHandle",
                                           "cuMemPoolExportToShareableHandle", 11020,
                                           (void *)&cuMemPoolExportToShareableHandle);
        poolptr_fn ptr = (poolptr_fn)entry("cuMemPoolExportPointer", "cuMemPoolExportPointer",
                                           11020, (void *)&cuMemPoolExportPointer);
        EXPECT(exp && ptr);
        CUmemoryPool pool;
        CUmemPoolPtrExportData data;
        int fd = -1;
        CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
        RECORD(exp(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CHECK(cuMemAllocAsync(&p, 16 * MiB, NULL));
        RECORD(ptr(&data, p));
        look();
        CHECK(cuMemFreeAsync(p, NULL));
    } else if (!strcmp(what, "execupdate")) {
        update_fn update = (update_fn)entry("cuGraphExecUpdate_v2", "cuGraphExecUpdate", 12000,
                                            (void *)&cuGraphExecUpdate_v2);
        EXPECT(update != NULL);
        CUgraph small, big;
        CUgraphExec e;
        CUgraphExecUpdateResultInfo info;
        if (graph_with_alloc(&small, 4 * MiB, dev) || graph_with_alloc(&big, 40 * MiB, dev))
            return 1;
        CHECK(cuGraphInstantiateWithFlags(&e, small, 0));
        RECORD(cuGraphLaunch(e, NULL));
        CHECK(cuStreamSynchronize(NULL));
        CHECK(cuMemAlloc_v2(&p, 40 * MiB));
        RECORD(update(e, big, &info));
        RECORD(cuGraphLaunch(e, NULL)); /* 4 + 40 + 40 > 64 */
        cuStreamSynchronize(NULL);
        look();
        CHECK(cuMemFree_v2(p));
        RECORD(cuGraphLaunch(e, NULL)); /* 4 + 40 fits */
        cuStreamSynchronize(NULL);
        look();
    } else if (!strcmp(what, "childgraph")) {
        CUgraph alloc4, clone, parent, empty, embedded;
        CUgraphNode node;
        CUgraphExec e;
        if (graph_with_alloc(&alloc4, 4 * MiB, dev)) return 1;
        CHECK(cuGraphCreate(&parent, 0));
        RECORD(cuGraphAddChildGraphNode(&node, parent, NULL, 0, alloc4));
        RECORD(cuGraphClone(&clone, alloc4));
        CHECK(cuGraphCreate(&empty, 0));
        CHECK(cuGraphAddChildGraphNode(&node, parent, NULL, 0, empty));
        CHECK(cuGraphChildGraphNodeGetGraph(node, &embedded));
        CUDA_MEM_ALLOC_NODE_PARAMS ap;
        memset(&ap, 0, sizeof ap);
        ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        ap.poolProps.location.id = dev;
        ap.bytesize = 48 * MiB;
        CUgraphNode an;
        CHECK(cuGraphAddMemAllocNode(&an, embedded, NULL, 0, &ap));
        CHECK(cuMemAlloc_v2(&p, 40 * MiB));
        CHECK(cuGraphInstantiateWithFlags(&e, parent, 0));
        RECORD(cuGraphLaunch(e, NULL)); /* 4 + 40 + 48 > 64 */
        cuStreamSynchronize(NULL);
        look();
        CHECK(cuMemFree_v2(p));
        RECORD(cuGraphLaunch(e, NULL)); /* 4 + 48 fits */
        cuStreamSynchronize(NULL);
        look();
    } else {
        return 2;
    }
    printf("RESULT codes=%s phys=%lld\n", codes, fullest);
    return 0;
}
