/*
 * A hostile tenant's static binary: it never runs the dynamic loader, so /etc/ld.so.preload
 * (the interception core) never loads, and it takes device memory from the simulated driver
 * directly (simgpu's shared state, what raw ioctls are on a real driver). Only the node
 * agent's backstop can stop it. Usage: tranche-bypass MIB
 * As a container's PID 1 it handles SIGTERM (else the kernel drops it): deleting its pod is prompt.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "simstate.h"

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

int main(int argc, char **argv) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    uint64_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 2048;
    if (sim_init() != 0 || sim_ndev < 1) {
        printf("bypass: no simulated GPU visible\n");
        return 1;
    }
    if (sim_mem_take(0, mib << 20) != 0) {
        printf("bypass: the device refused %llu MiB\n", (unsigned long long)mib);
        return 1;
    }
    printf("bypass: holding %llu MiB around the core\n", (unsigned long long)mib);
    fflush(stdout);
    for (;;) pause();
}
