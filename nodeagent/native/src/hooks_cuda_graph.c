/*
 * Graph memory. Memory-allocation nodes (added with cuGraphAddMemAllocNode / cuGraphAddNode,
 * or captured from cuMemAllocAsync) take nothing when added or instantiated: the driver backs
 * them from the device's graph memory pool when the executable graph is uploaded or first
 * launched, and keeps that memory in the pool (reused by later launches, given back by
 * cuDeviceGraphMemTrim) even after the graph is destroyed. The core charges the pool like any
 * other: before an upload or launch it reserves what the graph's allocation nodes could need
 * beyond what the pool holds free, refusing with CUDA_ERROR_OUT_OF_MEMORY what exceeds the
 * slice; afterwards the charge is settled to the pool's reserved size as the driver reports it
 * (cuDeviceGetGraphMemAttribute), and re-settled on exec destroy and trim.
 *
 * What an executable graph allocates is read from the graph at instantiation (its nodes, their
 * pool properties and sizes, child graphs included), so graphs built any way are covered.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "charge.h" /* first: it sets up cuda.h the way the core needs it */
#include "array_bytes.h"

typedef struct {
    uint64_t bytes[TR_MAX_DEVICES]; /* allocation-node bytes per region device */
    CUdevice cudev[TR_MAX_DEVICES];
    int outside;                    /* allocates on a device outside the slice */
    uint32_t mapped_gen;            /* trim generation of its last backing; 0 = never backed */
} gexec_t;

static pthread_mutex_t graph_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t pool_charged[TR_MAX_DEVICES]; /* what each device's graph pool is charged */
static uint32_t trim_gen = 1;
static _Atomic int live_execs; /* execs with allocation nodes: 0 keeps launches lock-free */

static uint64_t graph_attr(CUdevice d, CUgraphMem_attribute a) {
    cuuint64_t v = 0;
    if (REAL_FN(cuDeviceGetGraphMemAttribute)(d, a, &v) != CUDA_SUCCESS) return 0;
    return (uint64_t)v;
}

/* What an exec allocates must be read from the very graph the driver instantiates. Between
 * the first read and the driver's instantiate nothing may change it (issue #27, item 2): the
 * hooked ways to add a node wait on edit_lock, which instantiation holds from the walk to
 * the driver's return, and the walk calls no code the program can interpose (no malloc, no
 * free, no pthread call: its node buffer is grown before the walk starts, and the lock is a
 * C11 atomic). A program's own malloc/free/pthread_* that adds a node from inside the core
 * would wait on the lock its thread holds: it stops itself, never the books. */
static atomic_flag edit_lock = ATOMIC_FLAG_INIT;

static void edit_begin(void) {
    for (unsigned spins = 0; atomic_flag_test_and_set_explicit(&edit_lock, memory_order_acquire);
         spins++)
        if (spins > 64) tr_sleep_ns(2000);
}

static void edit_end(void) { atomic_flag_clear_explicit(&edit_lock, memory_order_release); }

void tr_graph_edit_begin(void) { edit_begin(); }
void tr_graph_edit_end(void) { edit_end(); }

static CUgraphNode *walk_buf; /* under edit_lock: one stack of node lists for the whole walk */
static size_t walk_cap, walk_top, walk_need;

/* Add up the allocation nodes of g (and of its child graphs). -1 if the graph cannot be read,
 * -2 if walk_buf is too small (walk_need says how large it must be). */
static int walk(CUgraph g, gexec_t *x, int depth) {
    size_t n = 0;
    if (depth > 16 || REAL_FN(cuGraphGetNodes)(g, NULL, &n) != CUDA_SUCCESS) return -1;
    if (n == 0) return 0;
    if (walk_top + n > walk_cap) {
        walk_need = walk_top + n;
        return -2;
    }
    CUgraphNode *nodes = walk_buf + walk_top;
    size_t got = n;
    int rc = REAL_FN(cuGraphGetNodes)(g, nodes, &got) == CUDA_SUCCESS && got <= n ? 0 : -1;
    walk_top += n;
    for (size_t i = 0; rc == 0 && i < got; i++) {
        CUgraphNodeType t;
        if (REAL_FN(cuGraphNodeGetType)(nodes[i], &t) != CUDA_SUCCESS) {
            rc = -1;
        } else if (t == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            CUDA_MEM_ALLOC_NODE_PARAMS p;
            if (REAL_FN(cuGraphMemAllocNodeGetParams)(nodes[i], &p) != CUDA_SUCCESS) {
                rc = -1;
                continue;
            }
            int idx = p.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE
                          ? tr_dev_index((CUdevice)p.poolProps.location.id)
                          : -1;
            if (idx < 0) {
                x->outside = 1;
                continue;
            }
            x->cudev[idx] = (CUdevice)p.poolProps.location.id;
            x->bytes[idx] = tr_sat_add(x->bytes[idx], p.bytesize);
        } else if (t == CU_GRAPH_NODE_TYPE_GRAPH) {
            CUgraph child;
            if (REAL_FN(cuGraphChildGraphNodeGetGraph)(nodes[i], &child) != CUDA_SUCCESS)
                rc = -1;
            else
                rc = walk(child, x, depth + 1);
        }
    }
    return rc;
}

/* Read what graph g allocates into x, edit_lock held on return whatever the result (the
 * caller releases it once the driver has instantiated). */
static int walk_locked(CUgraph g, gexec_t *x) {
    for (int attempt = 0; attempt < 8; attempt++) {
        if (walk_need > walk_cap) { /* grown outside the lock: malloc may be the program's */
            size_t cap = walk_need * 2;
            CUgraphNode *b = calloc(cap, sizeof *b);
            if (!b) return -1;
            edit_begin();
            if (cap > walk_cap) {
                CUgraphNode *old = walk_buf;
                walk_buf = b, walk_cap = cap, b = old;
            }
            edit_end();
            free(b);
        }
        edit_begin();
        memset(x, 0, sizeof *x);
        walk_top = 0;
        int rc = walk(g, x, 0);
        if (rc != -2) return rc;
        edit_end();
    }
    edit_begin();
    return -1; /* a graph growing faster than we can read it: fail closed */
}

/* Read what graph g allocates; NULL with *err for a graph without allocation nodes (err 0)
 * or one the core cannot read or may not run (err set). edit_lock is held on return; *spare
 * is a record to free once it is released (malloc/free only outside the window). */
static gexec_t *graph_memory(CUgraph g, CUresult *err, gexec_t **spare) {
    *err = CUDA_SUCCESS;
    *spare = NULL;
    gexec_t *x = calloc(1, sizeof *x);
    if (!x) {
        *err = CUDA_ERROR_OUT_OF_MEMORY;
        edit_begin();
        return NULL;
    }
    if (walk_locked(g, x) != 0) *err = CUDA_ERROR_NOT_SUPPORTED; /* fail closed */
    else if (x->outside) *err = CUDA_ERROR_OUT_OF_MEMORY;      /* not in the slice */
    for (int i = 0; *err == CUDA_SUCCESS && i < TR_MAX_DEVICES; i++)
        if (x->bytes[i] > (i < tr_cfg.device_count ? tr_cfg.devices[i].memory_bytes : 0))
            *err = CUDA_ERROR_OUT_OF_MEMORY; /* more than the whole slice: can never run */
    int any = 0;
    for (int i = 0; i < TR_MAX_DEVICES; i++) any |= x->bytes[i] != 0;
    if (*err != CUDA_SUCCESS || !any) {
        *spare = x;
        return NULL;
    }
    return x;
}

/* Caller holds graph_mu; `held[i]` is charged for device i's pool beyond pool_charged[i].
 * Settle every device the exec touches to the pool's reserved size. */
static void settle(const gexec_t *x, const uint64_t *held) {
    for (int i = 0; i < TR_MAX_DEVICES; i++) {
        if (!x->bytes[i]) continue;
        uint64_t now = graph_attr(x->cudev[i], CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
        tr_mem_settle(i, pool_charged[i] + (held ? held[i] : 0), now);
        pool_charged[i] = now;
    }
}

CUresult tr_graph_commit_begin(CUgraphExec e, tr_commit_t *c) {
    c->rec = NULL;
    if (atomic_load_explicit(&live_execs, memory_order_relaxed) == 0) return CUDA_SUCCESS;
    int unused;
    uint64_t v;
    if (tr_track_get(TR_K_GEXEC, (uint64_t)(uintptr_t)e, &unused, &v) != 0) return CUDA_SUCCESS;
    gexec_t *x = (gexec_t *)(uintptr_t)v;
    pthread_mutex_lock(&graph_mu);
    for (int i = 0; i < TR_MAX_DEVICES; i++) {
        c->need[i] = 0;
        if (!x->bytes[i] || x->mapped_gen == trim_gen) continue;
        uint64_t reserved = graph_attr(x->cudev[i], CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
        uint64_t used = graph_attr(x->cudev[i], CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
        uint64_t free = reserved > used ? reserved - used : 0;
        uint64_t need = x->bytes[i] > free ? x->bytes[i] - free : 0;
        if (need && tr_mem_reserve(i, need) != 0) {
            for (int j = 0; j < i; j++) tr_uncharge(j, c->need[j]);
            pthread_mutex_unlock(&graph_mu);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        c->need[i] = need;
    }
    c->rec = x;
    return CUDA_SUCCESS; /* graph_mu stays held until tr_graph_commit_end */
}

void tr_graph_commit_end(tr_commit_t *c, CUresult r) {
    gexec_t *x = c->rec;
    if (!x) return;
    settle(x, c->need);
    if (r == CUDA_SUCCESS) x->mapped_gen = trim_gen;
    pthread_mutex_unlock(&graph_mu);
}

/* What graph `g` allocates (*x, NULL for no graph), read under edit_lock, which stays held
 * until the caller's edit_end() once the driver call is done; on an error the lock is already
 * released. Shared by instantiation and cuGraphExecUpdate. */
static CUresult read_graph(CUgraph g, gexec_t **x, gexec_t **spare) {
    CUresult err = CUDA_SUCCESS;
    *spare = NULL;
    *x = g ? graph_memory(g, &err, spare) : NULL;
    if (g && err != CUDA_SUCCESS) {
        edit_end();
        free(*spare);
        *spare = NULL;
        return err;
    }
    return CUDA_SUCCESS;
}

/* ---- Instantiation: record what the exec allocates; with CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD
 * the driver backs it right away, so it is charged like an upload. */

static CUresult instantiated(CUgraphExec *pe, CUgraph g, unsigned long long flags,
                             CUresult (*call)(CUgraphExec *, CUgraph, void *), void *arg) {
    if (tr_guard) return call(pe, g, arg);
    if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    gexec_t *x, *spare;
    CUresult err = read_graph(g, &x, &spare);
    if (err != CUDA_SUCCESS) return err;
    tr_guard++;
    CUresult r = call(pe, g, arg);
    tr_guard--;
    if (g) edit_end();
    free(spare);
    if (!x) return r;
    if (r != CUDA_SUCCESS) {
        free(x);
        return r;
    }
    atomic_fetch_add(&live_execs, 1);
    tr_track_put(TR_K_GEXEC, (uint64_t)(uintptr_t)*pe, 0, (uint64_t)(uintptr_t)x);
    if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) {
        /* Already backed by the driver: settle to what its pool now holds. */
        pthread_mutex_lock(&graph_mu);
        settle(x, NULL);
        x->mapped_gen = trim_gen;
        pthread_mutex_unlock(&graph_mu);
    }
    return r;
}

static CUresult call_with_flags(CUgraphExec *pe, CUgraph g, void *arg) {
    return REAL_FN(cuGraphInstantiateWithFlags)(pe, g, *(unsigned long long *)arg);
}

TR_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *pe, CUgraph g,
                                               unsigned long long flags) {
    return instantiated(pe, g, 0, call_with_flags, &flags); /* no upload flag here */
}

typedef struct {
    CUDA_GRAPH_INSTANTIATE_PARAMS *p;
    int id;
} with_params_t;

static CUresult call_with_params(CUgraphExec *pe, CUgraph g, void *arg) {
    with_params_t *a = arg;
    return ((CUresult(*)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *))
                tr_real[a->id])(pe, g, a->p);
}

static CUresult with_params(CUgraphExec *pe, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p, int id) {
    tr_resolve();
    if (!tr_real[id]) return CUDA_ERROR_NOT_FOUND;
    /* An upload at instantiation is a commit: reserve first, like cuGraphUpload. Without a
     * known size yet, the exec is instantiated, then uploaded through the charged path. */
    unsigned long long flags = p ? p->flags : 0;
    if (!(flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD) || tr_guard) {
        with_params_t a = {p, id};
        return instantiated(pe, g, 0, call_with_params, &a);
    }
    CUDA_GRAPH_INSTANTIATE_PARAMS q = *p;
    q.flags &= ~(cuuint64_t)CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
    with_params_t a = {&q, id};
    CUresult r = instantiated(pe, g, 0, call_with_params, &a);
    p->result_out = q.result_out;
    p->hErrNode_out = q.hErrNode_out;
    if (r != CUDA_SUCCESS) return r;
    r = cuGraphUpload(*pe, p->hUploadStream);
    if (r != CUDA_SUCCESS) {
        tr_guard++;
        REAL_FN(cuGraphExecDestroy)(*pe);
        tr_guard--;
        int unused;
        uint64_t v;
        if (tr_track_take(TR_K_GEXEC, (uint64_t)(uintptr_t)*pe, &unused, &v) == 0) {
            free((void *)(uintptr_t)v);
            atomic_fetch_sub(&live_execs, 1);
        }
    }
    return r;
}

TR_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *pe, CUgraph g,
                                                CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
    return with_params(pe, g, p, TR_cuGraphInstantiateWithParams);
}
TR_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *pe, CUgraph g,
                                                     CUDA_GRAPH_INSTANTIATE_PARAMS *p) {
    return with_params(pe, g, p, TR_cuGraphInstantiateWithParams_ptsz);
}

/* The pre-11.4 entry points (error node and log buffer instead of flags), still exported. */
typedef struct {
    CUgraphNode *err_node;
    char *log;
    size_t len;
    int id;
} legacy_t;

static CUresult call_legacy(CUgraphExec *pe, CUgraph g, void *arg) {
    legacy_t *a = arg;
    return ((CUresult(*)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t))tr_real[a->id])(
        pe, g, a->err_node, a->log, a->len);
}

TR_EXPORT CUresult cuGraphInstantiate(CUgraphExec *pe, CUgraph g, CUgraphNode *err_node,
                                      char *log, size_t len) {
    tr_resolve();
    if (!tr_real[TR_cuGraphInstantiate]) return CUDA_ERROR_NOT_FOUND;
    legacy_t a = {err_node, log, len, TR_cuGraphInstantiate};
    return instantiated(pe, g, 0, call_legacy, &a);
}
TR_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *pe, CUgraph g, CUgraphNode *err_node,
                                         char *log, size_t len) {
    tr_resolve();
    if (!tr_real[TR_cuGraphInstantiate_v2]) return CUDA_ERROR_NOT_FOUND;
    legacy_t a = {err_node, log, len, TR_cuGraphInstantiate_v2};
    return instantiated(pe, g, 0, call_legacy, &a);
}

/* ---- Upload, destroy, trim. */

static CUresult upload(CUgraphExec e, CUstream s, int id) {
    CUresult (*real)(CUgraphExec, CUstream) = (CUresult(*)(CUgraphExec, CUstream))tr_real[id];
    if (tr_guard) return real(e, s);
    if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    tr_commit_t c;
    CUresult r = tr_graph_commit_begin(e, &c);
    if (r != CUDA_SUCCESS) return r;
    tr_guard++;
    r = real(e, s);
    tr_guard--;
    tr_graph_commit_end(&c, r);
    return r;
}

TR_EXPORT CUresult cuGraphUpload(CUgraphExec e, CUstream s) {
    return upload(e, s, TR_cuGraphUpload);
}
TR_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s) {
    return upload(e, s, TR_cuGraphUpload_ptsz);
}

TR_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) {
    MEM_ENTER(cuGraphExecDestroy, e);
    int unused;
    uint64_t v;
    gexec_t *x = tr_track_take(TR_K_GEXEC, (uint64_t)(uintptr_t)e, &unused, &v) == 0
                     ? (gexec_t *)(uintptr_t)v
                     : NULL;
    tr_guard++;
    CUresult r = REAL_FN(cuGraphExecDestroy)(e);
    tr_guard--;
    if (!x) return r;
    if (r != CUDA_SUCCESS) {
        tr_track_put(TR_K_GEXEC, (uint64_t)(uintptr_t)e, 0, v);
        return r;
    }
    pthread_mutex_lock(&graph_mu);
    settle(x, NULL); /* the pool keeps the memory until trimmed: usually no change */
    pthread_mutex_unlock(&graph_mu);
    atomic_fetch_sub(&live_execs, 1);
    free(x);
    return r;
}

TR_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev) {
    MEM_ENTER(cuDeviceGraphMemTrim, dev);
    pthread_mutex_lock(&graph_mu);
    tr_guard++;
    CUresult r = REAL_FN(cuDeviceGraphMemTrim)(dev);
    tr_guard--;
    int idx = tr_dev_index(dev);
    if (r == CUDA_SUCCESS && idx >= 0) {
        uint64_t now = graph_attr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
        tr_mem_settle(idx, pool_charged[idx], now);
        pool_charged[idx] = now;
        trim_gen++; /* idle execs may have lost their backing: the next launch is re-checked */
    }
    pthread_mutex_unlock(&graph_mu);
    return r;
}

/* ---- cuGraphExecUpdate gives an exec the node parameters of another graph: what it
 * allocates is read from that graph under edit_lock like an instantiation, and replaces the
 * exec's record once the driver has updated it, so the next upload or launch reserves what the
 * new allocation nodes need (at 7382faa an update grew an exec's allocations unseen). */
static CUresult exec_update(CUgraphExec e, CUgraph g, CUresult (*call)(void *), void *arg) {
    if (tr_guard) return call(arg);
    if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    gexec_t *x, *spare;
    CUresult err = read_graph(g, &x, &spare);
    if (err != CUDA_SUCCESS) return err;
    pthread_mutex_lock(&graph_mu); /* no launch of e between the update and the new record */
    tr_guard++;
    CUresult r = call(arg);
    tr_guard--;
    if (g) edit_end();
    int unused;
    uint64_t v;
    gexec_t *old = tr_track_get(TR_K_GEXEC, (uint64_t)(uintptr_t)e, &unused, &v) == 0
                       ? (gexec_t *)(uintptr_t)v
                       : NULL;
    if (r == CUDA_SUCCESS && old) {
        if (x) *old = *x;
        else memset(old->bytes, 0, sizeof old->bytes);
        old->mapped_gen = 0; /* re-checked at the next upload or launch */
    } else if (r == CUDA_SUCCESS && x) {
        x->mapped_gen = 0;
        atomic_fetch_add(&live_execs, 1);
        tr_track_put(TR_K_GEXEC, (uint64_t)(uintptr_t)e, 0, (uint64_t)(uintptr_t)x);
        x = NULL;
    }
    pthread_mutex_unlock(&graph_mu);
    free(spare);
    free(x);
    return r;
}

typedef struct {
    CUgraphExec e;
    CUgraph g;
    CUgraphNode *err_node;
    CUgraphExecUpdateResult *res;
    CUgraphExecUpdateResultInfo *info;
} update_args_t;

static CUresult call_update_v1(void *arg) {
    update_args_t *a = arg;
    return REAL_FN(cuGraphExecUpdate)(a->e, a->g, a->err_node, a->res);
}

static CUresult call_update_v2(void *arg) {
    update_args_t *a = arg;
    return REAL_FN(cuGraphExecUpdate_v2)(a->e, a->g, a->info);
}

TR_EXPORT CUresult cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph,
                                     CUgraphNode *hErrorNode_out,
                                     CUgraphExecUpdateResult *updateResult_out) {
    update_args_t a = {hGraphExec, hGraph, hErrorNode_out, updateResult_out, NULL};
    tr_resolve();
    if (!tr_real[TR_cuGraphExecUpdate]) return CUDA_ERROR_NOT_FOUND;
    return exec_update(hGraphExec, hGraph, call_update_v1, &a);
}

TR_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                        CUgraphExecUpdateResultInfo *resultInfo) {
    update_args_t a = {hGraphExec, hGraph, NULL, NULL, resultInfo};
    tr_resolve();
    if (!tr_real[TR_cuGraphExecUpdate_v2]) return CUDA_ERROR_NOT_FOUND;
    return exec_update(hGraphExec, hGraph, call_update_v2, &a);
}

/* ---- Adding allocation nodes takes nothing; one on a device outside the slice, or larger
 * than the whole slice, could never run and is refused right away. */

static CUresult check_node(const CUmemPoolProps *props, size_t bytes) {
    if (!tr_ready()) return CUDA_ERROR_NOT_INITIALIZED;
    int idx = props->location.type == CU_MEM_LOCATION_TYPE_DEVICE
                  ? tr_dev_index((CUdevice)props->location.id)
                  : -1;
    if (idx < 0 || bytes > tr_cfg.devices[idx].memory_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
    return CUDA_SUCCESS;
}

TR_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                          const CUgraphNode *dependencies, size_t numDependencies,
                                          CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams) {
    MEM_ENTER(cuGraphAddMemAllocNode, phGraphNode, hGraph, dependencies, numDependencies,
              nodeParams);
    CUresult r = nodeParams ? check_node(&nodeParams->poolProps, nodeParams->bytesize)
                            : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS) return r;
    edit_begin();
    r = REAL_FN(cuGraphAddMemAllocNode)(phGraphNode, hGraph, dependencies, numDependencies,
                                        nodeParams);
    edit_end();
    return r;
}

TR_EXPORT CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                  const CUgraphNode *dependencies, size_t numDependencies,
                                  CUgraphNodeParams *nodeParams) {
    tr_resolve();
    if (!tr_real[TR_cuGraphAddNode]) return CUDA_ERROR_NOT_FOUND;
    if (!tr_guard && nodeParams && nodeParams->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        CUresult r = check_node(&nodeParams->alloc.poolProps, nodeParams->alloc.bytesize);
        if (r != CUDA_SUCCESS) return r;
    }
    if (tr_guard) return REAL_FN(cuGraphAddNode)(phGraphNode, hGraph, dependencies,
                                                 numDependencies, nodeParams);
    edit_begin();
    CUresult r = REAL_FN(cuGraphAddNode)(phGraphNode, hGraph, dependencies, numDependencies,
                                         nodeParams);
    edit_end();
    return r;
}

TR_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                     const CUgraphNode *dependencies,
                                     const CUgraphEdgeData *dependencyData,
                                     size_t numDependencies, CUgraphNodeParams *nodeParams) {
    tr_resolve();
    if (!tr_real[TR_cuGraphAddNode_v2]) return CUDA_ERROR_NOT_FOUND;
    if (!tr_guard && nodeParams && nodeParams->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
        CUresult r = check_node(&nodeParams->alloc.poolProps, nodeParams->alloc.bytesize);
        if (r != CUDA_SUCCESS) return r;
    }
    if (tr_guard) return REAL_FN(cuGraphAddNode_v2)(phGraphNode, hGraph, dependencies,
                                                    dependencyData, numDependencies, nodeParams);
    edit_begin();
    CUresult r = REAL_FN(cuGraphAddNode_v2)(phGraphNode, hGraph, dependencies, dependencyData,
                                            numDependencies, nodeParams);
    edit_end();
    return r;
}
