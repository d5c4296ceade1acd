/*
 * simgpu: a SIMULATED GPU for machines without one. Device descriptions come from the
 * SIMGPU_CONFIG file; device memory use and busy time live in the SIMGPU_STATE file, mapped by
 * every process, so two processes on one simulated GPU really contend. Never part of the
 * interception core.
 */
#ifndef SIMGPU_STATE_H
#define SIMGPU_STATE_H

#include <stdatomic.h>
#include <stdint.h>

#define SIM_MAX_DEV 16
#define SIM_MAX_SLOTS 256
#define SIM_MAGIC 0x55504753u /* "SGPU" */
#define SIM_VERSION 1u
#define SIM_LOCK_BASE 0x40000000LL
#define SIM_DRIVER_VERSION "550.00-simgpu (SIMULATED)"

typedef struct {
    char name[96];
    char uuid[48];
    unsigned char uuid_bytes[16];
    uint64_t memory_bytes;
    uint64_t context_bytes; /* charged per context, like a real driver's context footprint */
    int sm_count;
    int cc_major, cc_minor;
} sim_devcfg_t;

typedef struct {
    _Atomic uint64_t used;       /* bytes held by all live processes */
    _Atomic uint64_t busy_until; /* CLOCK_MONOTONIC ns when queued work ends (one FIFO) */
    _Atomic uint64_t busy_total; /* ns of kernel time ever queued */
    _Atomic uint64_t util_t;     /* last utilisation sample: time, busy-done, percent */
    _Atomic uint64_t util_b;
    _Atomic uint64_t util_pct;
} sim_dev_t;

typedef struct {
    _Atomic uint32_t pid; /* as the process sees itself (its own PID namespace) */
    uint32_t pidns;       /* that namespace's inode (low 32 bits); 0: written by an old simgpu */
    _Atomic uint64_t used[SIM_MAX_DEV];
} sim_slot_t;

/* SIMULATED faults (simgpu-fault, never a real driver's behaviour): health events as a real
 * driver raises them (XID, ECC) in a ring that NVML's event sets read, and GPUs that stopped
 * answering. Appended after the slots, so a state file of an older simgpu is extended with
 * zeroes (no event, every GPU answering) and keeps working. */
#define SIM_EVENT_RING 64
typedef struct {
    uint32_t dev;     /* host index */
    uint32_t pid;     /* the process the driver names in its kernel log line (0: none) */
    uint64_t type;    /* one nvmlEventType* bit */
    uint64_t data;    /* the XID for nvmlEventTypeXidCriticalError, else 0 */
    uint64_t time_ns; /* CLOCK_REALTIME */
} sim_event_t;

typedef struct {
    _Atomic uint64_t published;       /* events written so far; event n is ring[(n-1) % RING] */
    sim_event_t ring[SIM_EVENT_RING];
    _Atomic uint32_t lost[SIM_MAX_DEV]; /* nonzero: the GPU has fallen off the bus */
} sim_faults_t;

/* Per-process busy time, as a real driver keeps it for nvmlDeviceGetProcessUtilization: the
 * kernel time each process slot queued on each (host) device, when its last kernel ends, and
 * the last utilisation sample taken of it (time, busy done then, percent over the sample).
 * Appended after the faults like them, so an older state file is extended with zeroes. */
typedef struct {
    _Atomic uint64_t total[SIM_MAX_DEV]; /* ns of kernel time queued by this process */
    _Atomic uint64_t until[SIM_MAX_DEV]; /* CLOCK_MONOTONIC ns when its last kernel ends */
    _Atomic uint64_t sample_t[SIM_MAX_DEV];
    _Atomic uint64_t sample_b[SIM_MAX_DEV];
    _Atomic uint64_t sample_pct[SIM_MAX_DEV];
    _Atomic uint64_t sample_wall_us[SIM_MAX_DEV]; /* CLOCK_REALTIME µs, NVML's timeStamp */
} sim_busy_t;

typedef struct {
    uint32_t magic, version, ndev, pad;
    sim_dev_t dev[SIM_MAX_DEV];
    sim_slot_t slots[SIM_MAX_SLOTS];
    sim_faults_t unused_faults; /* the faults live in their own file (sim_faults); kept so the
                                 * busy table stays where older state files have it */
    sim_busy_t busy[SIM_MAX_SLOTS];
} sim_state_t;

/* The faults are the node's, not a tenant's: a real driver raises XIDs and loses GPUs in the
 * kernel, where no process can forge them. They live in their own file, SIMGPU_FAULTS (default
 * "$SIMGPU_STATE.faults"), which the node (simgpu-fault, the agent's NVML) opens read-write and
 * a container gets read-only (the CDI spec's mount): a process that cannot write it maps it
 * read-only and still sees every event; where it is missing, no event and every GPU answering.
 * sim_faults is never NULL after sim_init. */
#define SIM_FAULTS_SUFFIX ".faults"
extern sim_faults_t *sim_faults;
/* Whether this process may raise faults (it opened the faults file for writing). */
int sim_faults_writable(void);

/* Per-container visibility, as a real runtime gives a container only its GPUs' device nodes:
 * where SIM_DEVICE_DIR exists (the CDI spec mounts it read-only), only the devices whose file
 * SIM_DEVICE_DIR/simgpu<host index> exists are listed and opened, renumbered from 0. Without
 * the folder (the host) every device is visible. Shared state is indexed by host index. */
#define SIM_DEVICE_DIR "/dev/simgpu"
#define SIM_DEV(d) (&sim_state->dev[sim_host[d]])

extern int sim_ndev;
extern int sim_host[SIM_MAX_DEV]; /* visible ordinal -> host device index */
extern sim_devcfg_t sim_cfg[SIM_MAX_DEV];
extern sim_state_t *sim_state;
/* SIMULATED/TEST-ONLY fault injection: SIMGPU_DRIVER_OVERHEAD_PERMILLE (default 0, read once at
 * init). Each dev_alloc also takes size * permille / 1000 bytes for the calling process, as a
 * real driver's internal allocations the interception core cannot see; freed with it. */
extern uint64_t sim_overhead_permille;

/* Load config and map state once per process; 0 on success. */
int sim_init(void);
uint64_t sim_now(void);
/* Charge / release physical device memory for this process. 0 or -1 (out of memory). */
int sim_mem_take(int dev, uint64_t size);
void sim_mem_give(int dev, uint64_t size);
/* Queue a kernel of dur ns after max(now, earliest); returns its start time, *end its end. */
uint64_t sim_run(int dev, uint64_t earliest, uint64_t dur, uint64_t *end);
unsigned sim_utilisation(int dev);
/* Slot `slot`'s share of visible device `dev` over its last sample (at least 100 ms, taken
 * when older), in percent; *wall_us: the sample's CLOCK_REALTIME µs. -1: it never ran there. */
int sim_proc_utilisation(int slot, int dev, uint64_t *wall_us);
/* The pid of slot `i`'s process in this process's PID namespace (a container's process listed
 * by the host, as NVML lists host pids); 0 when it cannot be found. */
uint32_t sim_slot_pid(int i);
void sim_sleep_until(uint64_t t);
/* SIMULATED faults: is host device `host` lost; raise one event (simgpu-fault only). */
int sim_host_lost(int host);
/* Whether slot i's process still runs (it holds its slot lock until it exits). */
int sim_slot_alive(int i);
void sim_raise_event(int host, uint64_t type, uint64_t data, uint32_t pid);
/* SIMULATED: sleep until an event is raised after `published` read `seen` (its low 32 bits), or
 * `ns` pass; may return early (spuriously or on a signal): the caller looks again. */
void sim_wait_event(uint32_t seen, uint64_t ns);
/* The simulated PCI bus of host device `host` (NVML's busId and the kernel log's PCI tag). */
#define SIM_PCI_BUS(host) (0x10u + (unsigned)(host))

#endif
