/*
 * SIMULATED graphs, stream capture and graph memory, modelled on the real driver:
 * - a graph is a list of nodes (kernel, memory allocation, memory free, child graph); memory
 *   allocation nodes get their virtual address when added and take NO device memory then;
 * - an executable graph (instantiate) records what its allocation nodes take per device; it is
 *   backed from the process's graph memory pool of that device when uploaded or first
 *   launched (the pool grows in 2 MiB granules, taking simulated device memory), and gives its
 *   share back to the pool when destroyed;
 * - the pool keeps what it reserved until cuDeviceGraphMemTrim, as the CUDA programming guide
 *   documents ("destroying a graph ... will not immediately return physical memory to the OS");
 * - cuDeviceGetGraphMemAttribute reports the pool's used/reserved current and high figures.
 * Capture: between cuStreamBeginCapture and cuStreamEndCapture nothing runs; kernels,
 * cuMemAllocAsync and cuMemFreeAsync on the capturing stream become nodes. An instantiated
 * graph runs as one "kernel" of 10 us plus its kernel nodes.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "simcuda.h"

#undef cuGraphInstantiate /* cuda.h maps the old name to WithFlags */

#define GRANULE (2ull << 20)

struct sim_node {
    CUgraphNodeType type;
    CUDA_MEM_ALLOC_NODE_PARAMS alloc; /* MEM_ALLOC */
    uint64_t dur;                     /* KERNEL */
    CUgraph child;                    /* GRAPH: the embedded copy */
    struct sim_node *next;
};

struct sim_graph {
    struct sim_node *head, *tail;
    size_t count;
};

typedef struct {
    uint64_t reserved, used, reserved_high, used_high;
} gpool_t;

static pthread_mutex_t gmu = PTHREAD_MUTEX_INITIALIZER;
static gpool_t gpool[SIM_MAX_DEV];

static struct sim_node *add(CUgraph g, CUgraphNodeType type) {
    struct sim_graph *sg = (struct sim_graph *)g;
    struct sim_node *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->type = type;
    pthread_mutex_lock(&gmu);
    if (sg->tail) sg->tail->next = n;
    else sg->head = n;
    sg->tail = n;
    sg->count++;
    pthread_mutex_unlock(&gmu);
    return n;
}

SIM_API CUresult cuGraphCreate(CUgraph *g, unsigned int flags) {
    (void)flags;
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    *g = (CUgraph)calloc(1, sizeof(struct sim_graph));
    return *g ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Allocation nodes' virtual addresses stay reserved for the process (lazily backed host
 * mappings cost nothing): an executable graph may outlive its graph. */
SIM_API CUresult cuGraphDestroy(CUgraph g) {
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    struct sim_graph *sg = (struct sim_graph *)g;
    for (struct sim_node *n = sg->head, *next; n; n = next) {
        next = n->next;
        free(n);
    }
    free(sg);
    return CUDA_SUCCESS;
}

static CUresult add_alloc_node(CUgraphNode *node, CUgraph g, CUDA_MEM_ALLOC_NODE_PARAMS *p) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!node || !g || !p || p->bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    if (p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        p->poolProps.location.id < 0 || p->poolProps.location.id >= sim_ndev)
        return CUDA_ERROR_INVALID_VALUE;
    void *va = sim_host_map(p->bytesize);
    if (!va) return CUDA_ERROR_OUT_OF_MEMORY;
    struct sim_node *n = add(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    p->dptr = (CUdeviceptr)(uintptr_t)va;
    n->alloc = *p;
    *node = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphAddMemAllocNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                        size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *p) {
    (void)deps, (void)ndeps;
    return add_alloc_node(node, g, p);
}

static CUresult add_node(CUgraphNode *node, CUgraph g, CUgraphNodeParams *p) {
    if (!node || !g || !p) return CUDA_ERROR_INVALID_VALUE;
    if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        CUDA_MEM_ALLOC_NODE_PARAMS a = {.poolProps = p->alloc.poolProps,
                                        .bytesize = p->alloc.bytesize};
        CUresult r = add_alloc_node(node, g, &a);
        if (r == CUDA_SUCCESS) p->alloc.dptr = a.dptr;
        return r;
    }
    struct sim_node *n = add(g, p->type);
    *node = (CUgraphNode)n;
    return n ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                size_t ndeps, CUgraphNodeParams *p) {
    (void)deps, (void)ndeps;
    return add_node(node, g, p);
}

SIM_API CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                   const CUgraphEdgeData *edges, size_t ndeps,
                                   CUgraphNodeParams *p) {
    (void)deps, (void)edges, (void)ndeps;
    return add_node(node, g, p);
}

SIM_API CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *n) {
    if (!g || !n) return CUDA_ERROR_INVALID_VALUE;
    struct sim_graph *sg = (struct sim_graph *)g;
    pthread_mutex_lock(&gmu);
    if (nodes) {
        size_t i = 0;
        for (struct sim_node *x = sg->head; x && i < *n; x = x->next) nodes[i++] = (CUgraphNode)x;
        *n = i;
    } else {
        *n = sg->count;
    }
    pthread_mutex_unlock(&gmu);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *t) {
    if (!node || !t) return CUDA_ERROR_INVALID_VALUE;
    *t = ((struct sim_node *)node)->type;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *p) {
    struct sim_node *n = (struct sim_node *)node;
    if (!n || !p || n->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_INVALID_VALUE;
    *p = n->alloc;
    return CUDA_SUCCESS;
}

/* ---- Executable graphs and the graph memory pool. */

/* Caller holds gmu: add up what g (and the child graphs embedded in it) allocates and runs. */
static void tally(CUgraph g, struct CUgraphExec_st *x, int depth) {
    for (struct sim_node *n = ((struct sim_graph *)g)->head; n && depth < 16; n = n->next) {
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
            x->bytes[n->alloc.poolProps.location.id] += n->alloc.bytesize;
        else if (n->type == CU_GRAPH_NODE_TYPE_KERNEL)
            x->dur += n->dur;
        else if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->child)
            tally(n->child, x, depth + 1);
    }
}

static CUresult instantiate(CUgraphExec *e, CUgraph g) {
    if (!e || !g) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *x = calloc(1, sizeof *x);
    if (!x) return CUDA_ERROR_OUT_OF_MEMORY;
    x->dur = 10000;
    pthread_mutex_lock(&gmu);
    tally(g, x, 0);
    pthread_mutex_unlock(&gmu);
    *e = x;
    return CUDA_SUCCESS;
}

/* Back the exec's allocations from the pools (first upload or launch). */
static CUresult back(struct CUgraphExec_st *x) {
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&gmu);
    if (!x->mapped) {
        int d = 0;
        for (; d < sim_ndev; d++) {
            gpool_t *p = &gpool[d];
            uint64_t need = p->used + x->bytes[d];
            if (need > p->reserved) {
                uint64_t grow = (need - p->reserved + GRANULE - 1) / GRANULE * GRANULE;
                if (sim_mem_take(d, grow) != 0) break;
                p->reserved += grow;
                if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
            }
            p->used = need;
            if (p->used > p->used_high) p->used_high = p->used;
        }
        if (d < sim_ndev) { /* out of memory on device d: undo the others */
            for (int u = 0; u < d; u++) gpool[u].used -= x->bytes[u];
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            x->mapped = 1;
        }
    }
    pthread_mutex_unlock(&gmu);
    return r;
}

SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long fl) {
    (void)fl;
    return instantiate(e, g);
}

/* The pre-11.4 entry points (error node and log buffer), still exported by real drivers. */
SIM_API CUresult cuGraphInstantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log,
                                       size_t len) {
    (void)err, (void)log, (void)len;
    return instantiate(e, g);
}
SIM_API CUresult cuGraphInstantiate(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log,
                                    size_t len) __attribute__((alias("cuGraphInstantiate_v2")));

SIM_API CUresult cuGraphInstantiateWithParams(CUgraphExec *e, CUgraph g,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
    CUresult r = instantiate(e, g);
    if (r == CUDA_SUCCESS && p && (p->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)) r = back(*e);
    if (p) p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS
                                             : CUDA_GRAPH_INSTANTIATE_ERROR;
    return r;
}
SIM_API CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *e, CUgraph g,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS *p)
    __attribute__((alias("cuGraphInstantiateWithParams")));

SIM_API CUresult cuGraphUpload(CUgraphExec e, CUstream s) {
    (void)s;
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    return back(e);
}
SIM_API CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s) __attribute__((alias("cuGraphUpload")));

SIM_API CUresult cuGraphExecDestroy(CUgraphExec e) {
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&gmu);
    if (e->mapped)
        for (int d = 0; d < sim_ndev; d++) gpool[d].used -= e->bytes[d];
    pthread_mutex_unlock(&gmu);
    free(e);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
    if (!e) return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = back(e);
    if (r != CUDA_SUCCESS) return r;
    uint64_t dur = e->dur;
    void *params[1] = {&dur};
    return sim_run_kernel(s, params);
}

SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) {
    return cuGraphLaunch(e, s ? s : CU_STREAM_PER_THREAD);
}

SIM_API CUresult cuDeviceGraphMemTrim(CUdevice d) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (d < 0 || d >= sim_ndev) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&gmu);
    uint64_t keep = (gpool[d].used + GRANULE - 1) / GRANULE * GRANULE;
    uint64_t give = gpool[d].reserved > keep ? gpool[d].reserved - keep : 0;
    gpool[d].reserved -= give;
    pthread_mutex_unlock(&gmu);
    if (give) sim_mem_give(d, give);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetGraphMemAttribute(CUdevice d, CUgraphMem_attribute a, void *v) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (d < 0 || d >= sim_ndev) return CUDA_ERROR_INVALID_DEVICE;
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&gmu);
    gpool_t p = gpool[d];
    pthread_mutex_unlock(&gmu);
    switch (a) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)v = p.used; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *(cuuint64_t *)v = p.used_high; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)v = p.reserved; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)v = p.reserved_high; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* Only the high-water marks can be reset (to 0), as with a real driver. */
SIM_API CUresult cuDeviceSetGraphMemAttribute(CUdevice d, CUgraphMem_attribute a, void *v) {
    if (!sim_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    if (d < 0 || d >= sim_ndev) return CUDA_ERROR_INVALID_DEVICE;
    if (!v || *(cuuint64_t *)v != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&gmu);
    if (a == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) gpool[d].used_high = 0;
    else if (a == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) gpool[d].reserved_high = 0;
    pthread_mutex_unlock(&gmu);
    return a == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH || a == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH
               ? CUDA_SUCCESS
               : CUDA_ERROR_INVALID_VALUE;
}

/* ---- Stream capture. */

SIM_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
    (void)mode;
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    /* The legacy and per-thread default streams cannot be captured here. */
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct CUstream_st *st = sim_stream(s);
    if (st->capture) return CUDA_ERROR_ILLEGAL_STATE;
    return cuGraphCreate(&st->capture, 0);
}

SIM_API CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    struct CUstream_st *st = sim_stream(s);
    if (!g) return CUDA_ERROR_INVALID_VALUE;
    if (!st || !st->capture) return CUDA_ERROR_ILLEGAL_STATE;
    *g = st->capture;
    st->capture = NULL;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status) {
    CUresult r = sim_check_ctx();
    if (r != CUDA_SUCCESS) return r;
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *st = sim_stream(s);
    *status = st && st->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *status) {
    return cuStreamIsCapturing(s ? s : CU_STREAM_PER_THREAD, status);
}

CUresult sim_capture_alloc(struct CUstream_st *st, CUdeviceptr *dptr, size_t size, int dev) {
    CUgraphNode node;
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = dev;
    p.bytesize = size;
    CUresult r = add_alloc_node(&node, st->capture, &p);
    if (r == CUDA_SUCCESS && dptr) *dptr = p.dptr;
    return r;
}

CUresult sim_capture_free(struct CUstream_st *st, CUdeviceptr p) {
    (void)p;
    return add(st->capture, CU_GRAPH_NODE_TYPE_MEM_FREE) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void sim_capture_kernel(struct CUstream_st *st, uint64_t dur) {
    struct sim_node *n = add(st->capture, CU_GRAPH_NODE_TYPE_KERNEL);
    if (n) n->dur = dur;
}

/* Permissive reading of the driver documentation: a topologically identical graph's node
 * parameters replace the exec's, allocation sizes included (a backed exec is backed afresh at
 * its next upload or launch), so the tests show the core refusing an update that grows them. */
static CUresult exec_update(CUgraphExec e, CUgraph g, CUgraphExecUpdateResult *res) {
    *res = CU_GRAPH_EXEC_UPDATE_ERROR;
    if (!e || !g) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st fresh = {.dur = 10000};
    pthread_mutex_lock(&gmu);
    tally(g, &fresh, 0);
    if (e->mapped)
        for (int d = 0; d < sim_ndev; d++) gpool[d].used -= e->bytes[d];
    memcpy(e->bytes, fresh.bytes, sizeof e->bytes);
    e->dur = fresh.dur;
    e->mapped = 0;
    pthread_mutex_unlock(&gmu);
    *res = CU_GRAPH_EXEC_UPDATE_SUCCESS;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo *info) {
    CUgraphExecUpdateResult res;
    CUresult r = exec_update(e, g, &res);
    if (info) *info = (CUgraphExecUpdateResultInfo){.result = res};
    return r;
}

SIM_API CUresult cuGraphExecUpdate(CUgraphExec e, CUgraph g, CUgraphNode *err,
                                   CUgraphExecUpdateResult *res) {
    CUgraphExecUpdateResult tmp;
    if (err) *err = NULL;
    return exec_update(e, g, res ? res : &tmp);
}

/* ---- Child graphs and clones, as the driver documents them: a graph holding memory
 * (allocation or free) or conditional nodes can be neither embedded nor cloned; embedding
 * clones the child. Nodes may still be added to the embedded copy afterwards (through
 * cuGraphChildGraphNodeGetGraph; the permissive reading), so the tests show the core reading
 * child graphs at instantiation. */

static int holds_memory(CUgraph g, int depth) {
    for (struct sim_node *n = ((struct sim_graph *)g)->head; n; n = n->next)
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || n->type == CU_GRAPH_NODE_TYPE_MEM_FREE ||
            n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL ||
            (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->child &&
             (depth > 16 || holds_memory(n->child, depth + 1))))
            return 1;
    return 0;
}

/* Caller holds gmu; g holds no memory nodes. */
static CUgraph copy_graph(CUgraph g) {
    struct sim_graph *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    for (struct sim_node *n = ((struct sim_graph *)g)->head; n; n = n->next) {
        struct sim_node *m = calloc(1, sizeof *m);
        if (!m) break;
        *m = *n;
        m->next = NULL;
        if (n->type == CU_GRAPH_NODE_TYPE_GRAPH && n->child) m->child = copy_graph(n->child);
        if (c->tail) c->tail->next = m;
        else c->head = m;
        c->tail = m;
        c->count++;
    }
    return (CUgraph)c;
}

SIM_API CUresult cuGraphClone(CUgraph *out, CUgraph g) {
    if (!out || !g) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&gmu);
    CUresult r = holds_memory(g, 0) ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS && !(*out = copy_graph(g))) r = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&gmu);
    return r;
}

SIM_API CUresult cuGraphAddChildGraphNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                          size_t ndeps, CUgraph child) {
    (void)deps, (void)ndeps;
    if (!node || !g || !child) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&gmu);
    CUgraph copy = holds_memory(child, 0) ? NULL : copy_graph(child);
    pthread_mutex_unlock(&gmu);
    if (!copy) return CUDA_ERROR_INVALID_VALUE;
    struct sim_node *n = add(g, CU_GRAPH_NODE_TYPE_GRAPH);
    if (!n) return CUDA_ERROR_OUT_OF_MEMORY;
    n->child = copy;
    *node = (CUgraphNode)n;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph *g) {
    struct sim_node *n = (struct sim_node *)node;
    if (!n || !g || n->type != CU_GRAPH_NODE_TYPE_GRAPH || !n->child)
        return CUDA_ERROR_INVALID_VALUE;
    *g = n->child;
    return CUDA_SUCCESS;
}
