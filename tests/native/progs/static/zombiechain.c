/*
 * A tenant's static binary that chains zombie leaders around the interception core (issue
 * #44, item 1, with the core bypassed): it never runs the dynamic loader, so the core never
 * loads, and it takes device memory from the simulated driver directly (simgpu's shared state,
 * what raw ioctls are on a real driver). Usage: zombiechain MIB COUNT PACE_S
 *
 * COUNT processes, PACE_S seconds apart: each takes MIB of its container's GPU (the one
 * NVIDIA_VISIBLE_DEVICES names, as a runtime gives a container only that GPU's device node;
 * device 0 without it), starts a thread that keeps
 * the process (its descriptors and its memory) and leaves by SYS_exit from its main thread, so
 * /proc/<pid>/stat reads "Z" and, on a cgroup v1 hierarchy, /proc/<pid>/cgroup reads "/": only
 * /proc/<pid>/task/<tid>/cgroup of the live thread names the pod. Each prints
 * "held <i> <pid>"; the launcher prints "chain done" after the last and waits for its children.
 * Built by the test that runs it (cc -static, with simgpu's simstate.c), not by the Makefile.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "simstate.h"

static void *hold(void *arg) {
    (void)arg;
    for (;;) pause();
    return NULL;
}

/* The ordinal of the GPU NVIDIA_VISIBLE_DEVICES names, else 0. */
static int container_gpu(void) {
    const char *uuid = getenv("NVIDIA_VISIBLE_DEVICES");
    for (int d = 0; uuid && d < sim_ndev; d++)
        if (strcmp(sim_cfg[d].uuid, uuid) == 0) return d;
    return 0;
}

static void link_in_chain(int i, unsigned long long mib) {
    if (sim_init() != 0 || sim_ndev < 1) {
        printf("FAIL no simulated GPU visible\n");
        fflush(stdout);
        _exit(1);
    }
    if (sim_mem_take(container_gpu(), mib << 20) != 0) {
        printf("FAIL the device refused %llu MiB\n", mib);
        fflush(stdout);
        _exit(1);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, hold, NULL) != 0) _exit(1);
    printf("held %d %d\n", i, (int)getpid());
    fflush(stdout);
    syscall(SYS_exit, 0); /* the leader leaves; the holder keeps the process */
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: zombiechain MIB COUNT PACE_S\n");
        return 2;
    }
    unsigned long long mib = strtoull(argv[1], NULL, 10);
    int count = atoi(argv[2]);
    double pace = strtod(argv[3], NULL);
    struct timespec gap = {(time_t)pace, (long)((pace - (time_t)pace) * 1e9)};
    for (int i = 0; i < count; i++) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) link_in_chain(i, mib);
        nanosleep(&gap, NULL);
    }
    printf("chain done\n");
    fflush(stdout);
    while (wait(NULL) > 0) {
    }
    for (;;) pause();
}
