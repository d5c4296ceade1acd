/*
 * simgpu-fault: SIMULATED GPU faults for tests and the demo (never part of a real driver).
 *
 *   simgpu-fault xid DEV XID [PID [NAME]]   raise XID on host GPU DEV (79 also makes it lost)
 *   simgpu-fault ecc DEV single|double      raise an ECC error event
 *   simgpu-fault lose DEV                   the GPU stops answering (NVML_ERROR_GPU_IS_LOST)
 *   simgpu-fault recover DEV                the GPU answers again (as after a reset)
 *
 * It acts on the simgpu of SIMGPU_CONFIG / SIMGPU_STATE, as NVML does. Each XID also goes to
 * the simulated kernel log (SIMGPU_KMSG, default "$SIMGPU_STATE.kmsg") in the driver's own
 * format, "NVRM: Xid (PCI:0000:BB:00): XID, pid=PID, name=NAME, ...", which is where a real
 * node learns which process an application XID belongs to.
 */
#define _GNU_SOURCE
#include <nvml.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "simstate.h"

static int usage(void) {
    fprintf(stderr, "usage: simgpu-fault xid DEV XID [PID [NAME]] | ecc DEV single|double | "
                    "lose DEV | recover DEV   (SIMULATED faults of simgpu)\n");
    return 2;
}

static int kernel_log(int dev, unsigned xid, unsigned pid, const char *name) {
    const char *state = getenv("SIMGPU_STATE"), *path = getenv("SIMGPU_KMSG");
    char fallback[4096];
    if (!path || !*path) {
        snprintf(fallback, sizeof fallback, "%s.kmsg", state && *state ? state : "/tmp/simgpu-state");
        path = fallback;
    }
    FILE *f = fopen(path, "ae");
    if (!f) {
        perror(path);
        return 1;
    }
    if (pid)
        fprintf(f, "NVRM: Xid (PCI:0000:%02x:00): %u, pid=%u, name=%s, SIMULATED by simgpu-fault\n",
                SIM_PCI_BUS(dev), xid, pid, name);
    else
        fprintf(f, "NVRM: Xid (PCI:0000:%02x:00): %u, pid='<unknown>', name=<unknown>, "
                   "SIMULATED by simgpu-fault\n", SIM_PCI_BUS(dev), xid);
    return fclose(f) != 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    if (sim_init() != 0) {
        fprintf(stderr, "simgpu-fault: simgpu could not start (SIMGPU_CONFIG/SIMGPU_STATE)\n");
        return 1;
    }
    if (!sim_faults_writable()) {
        fprintf(stderr, "simgpu-fault: cannot write the faults file (SIMGPU_FAULTS, default "
                        "$SIMGPU_STATE" SIM_FAULTS_SUFFIX "): faults are the node's to raise\n");
        return 1;
    }
    char *end;
    long dev = strtol(argv[2], &end, 10);
    if (*end || dev < 0 || dev >= sim_ndev) {
        fprintf(stderr, "simgpu-fault: no GPU %s (this simgpu has %d)\n", argv[2], sim_ndev);
        return 2;
    }
    const char *what = argv[1];
    if (!strcmp(what, "xid") && argc >= 4) {
        unsigned long xid = strtoul(argv[3], &end, 10);
        if (*end || !xid || xid > 999) return usage();
        unsigned long pid = argc >= 5 ? strtoul(argv[4], NULL, 10) : 0;
        const char *name = argc >= 6 ? argv[5] : "process";
        if (kernel_log((int)dev, (unsigned)xid, (unsigned)pid, name)) return 1;
        sim_raise_event((int)dev, nvmlEventTypeXidCriticalError, xid, (uint32_t)pid);
        if (xid == 79) atomic_store(&sim_faults->lost[dev], 1); /* fallen off the bus */
    } else if (!strcmp(what, "ecc") && argc >= 4) {
        int dbe = !strcmp(argv[3], "double");
        if (!dbe && strcmp(argv[3], "single")) return usage();
        sim_raise_event((int)dev, dbe ? nvmlEventTypeDoubleBitEccError
                                      : nvmlEventTypeSingleBitEccError, 0, 0);
    } else if (!strcmp(what, "lose")) {
        atomic_store(&sim_faults->lost[dev], 1);
    } else if (!strcmp(what, "recover")) {
        atomic_store(&sim_faults->lost[dev], 0);
    } else {
        return usage();
    }
    return 0;
}
