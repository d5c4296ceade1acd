/*
 * A program whose own free() adds allocation nodes to the graph the core is about to
 * instantiate (issue #27, item 2): at 7382faa the core read the graph's nodes, called free()
 * and then the driver's instantiate, so the nodes added in between were backed uncharged.
 *   graphfree NODES MIB   a graph with one 4 MiB allocation node; free() adds NODES nodes of
 *                         MIB each the first time the core calls it while armed; instantiate,
 *                         launch, print "launch=<CUresult> added=<n>", "held", hold until
 *                         stdin closes
 */
#include "common.h"

extern void __libc_free(void *);

static int armed, added, nodes_to_add;
static size_t node_bytes;
static CUgraph graph;

static CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(size_t bytes) {
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = 0;
    p.bytesize = bytes;
    return p;
}

__attribute__((visibility("default"))) void free(void *ptr) {
    if (armed) {
        armed = 0;
        for (int i = 0; i < nodes_to_add; i++) {
            CUgraphNode n;
            CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params(node_bytes);
            if (cuGraphAddMemAllocNode(&n, graph, NULL, 0, &p) == CUDA_SUCCESS) added++;
        }
    }
    __libc_free(ptr);
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    nodes_to_add = atoi(argv[1]);
    node_bytes = (size_t)strtoull(argv[2], NULL, 10) << 20;
    CUdevice dev;
    CHECK(open_device(0, &dev));
    CHECK(cuGraphCreate(&graph, 0));
    CUgraphNode n;
    CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params(4 << 20);
    CHECK(cuGraphAddMemAllocNode(&n, graph, NULL, 0, &p));
    CUgraphExec exec;
    armed = 1;
    CUresult r = cuGraphInstantiateWithFlags(&exec, graph, 0);
    armed = 0;
    CUresult l = r == CUDA_SUCCESS ? cuGraphLaunch(exec, NULL) : r;
    if (l == CUDA_SUCCESS) cuCtxSynchronize();
    printf("launch=%d added=%d\nheld\n", (int)l, added);
    fflush(stdout);
    wait_stdin_closed();
    return 0;
}
