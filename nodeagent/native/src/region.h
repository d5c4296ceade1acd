/*
 * Shared accounting region of one container (one file per container, shared by all its
 * processes and read by the node agent). Layout is fixed-width and little-endian; only
 * plain integers and C11 atomics live here (no sem_t, no pthread types) so that a process
 * killed mid-update can never leave a lock held. nodeagent/region.py mirrors this layout and
 * tests/native/test_region_layout.py pins the offsets on both sides.
 *
 * A process slot is in use while EITHER its open-file-description (OFD) lock on byte
 * TR_LOCK_BASE + slot is held OR the kernel says its thread group (pid, in the PID namespace
 * recorded with it) still has a thread. The lock alone cannot be trusted: the process holding
 * it can drop it (F_OFD_SETLK F_UNLCK on its own descriptor, or a remap and close), and a peer
 * that took a "dead" slot would give back bytes the live process still holds. Nor can /proc:
 * a zombie leader whose other threads run reads 'Z', and a bind mount hides /proc/<pid>. So
 * a slot is reclaimed only when its lock is free and a pidfd of its pid says the whole thread
 * group is gone (region.c, owner_alive), by a reclaimer in the owner's PID namespace. A forked
 * child (fork(), or a raw clone() that skips the atfork handlers: a wipe-on-fork page tells)
 * takes a slot of its own.
 */
#ifndef TRANCHE_REGION_H
#define TRANCHE_REGION_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define TR_REGION_MAGIC 0x47525254u /* "TRRG" little-endian */
#define TR_REGION_MAJOR 2u
#define TR_REGION_MINOR 0u
#define TR_MAX_DEVICES 16
#define TR_MAX_SLOTS 64
#define TR_UUID_LEN 48
#define TR_CLAIM_LEN 64
#define TR_LOCK_BASE 0x40000000LL /* lock bytes live past the mapped data */
#define TR_REGION_FILE "region.bin"

typedef struct {
    char uuid[TR_UUID_LEN];           /*   0: GPU UUID as in the slice config */
    uint64_t mem_limit;               /*  48: bytes, copied from the config (informational) */
    _Atomic uint64_t mem_used;        /*  56: bytes charged, all processes of the container */
    _Atomic uint64_t mem_rejected;    /*  64: allocations refused over the cap */
    _Atomic uint64_t mem_peak;        /*  72: high-water mark of mem_used */
    uint32_t compute_percent;         /*  80: target share, copied from the config */
    uint32_t reserved0;               /*  84 */
    _Atomic int64_t tokens_ns;        /*  88: compute budget left (may go negative) */
    _Atomic uint64_t last_refill_ns;  /*  96: CLOCK_MONOTONIC of the last refill */
    _Atomic uint64_t compute_used_ns; /* 104: device time charged to launches */
    _Atomic uint64_t throttled_ns;    /* 112: time launches waited for budget */
    _Atomic uint64_t launches;        /* 120: launches seen */
} tr_device_t;                        /* 128 bytes */

typedef struct {
    _Atomic uint32_t pid;             /*   0: 0 = free; pid in the process's own namespace */
    _Atomic uint32_t generation;      /*   4: bumped on every claim and every reclaim */
    uint64_t start_time;              /*   8: /proc/self/stat starttime (ticks), for the agent */
    uint64_t pid_ns;                  /*  16: inode of the owner's /proc/self/ns/pid */
    _Atomic uint64_t mem_used[TR_MAX_DEVICES]; /* 24: bytes this process holds, per device */
} tr_slot_t;                          /* 152 bytes */

typedef struct {
    uint32_t magic;                   /*   0 */
    uint16_t major;                   /*   4 */
    uint16_t minor;                   /*   6 */
    uint32_t header_size;             /*   8: sizeof(tr_region_t) */
    uint32_t device_count;            /*  12 */
    uint32_t slot_count;              /*  16 */
    uint32_t reserved0;               /*  20 */
    uint64_t created_ns;              /*  24: CLOCK_REALTIME at creation */
    char claim[TR_CLAIM_LEN];         /*  32 */
    tr_device_t devices[TR_MAX_DEVICES]; /* 96 */
    tr_slot_t slots[TR_MAX_SLOTS];    /* 96 + 16*128 = 2144 */
} tr_region_t;                        /* 2144 + 64*152 = 11872 bytes */

_Static_assert(sizeof(tr_device_t) == 128, "device record layout");
_Static_assert(sizeof(tr_slot_t) == 152, "slot record layout");
_Static_assert(offsetof(tr_region_t, devices) == 96, "devices offset");
_Static_assert(offsetof(tr_region_t, slots) == 2144, "slots offset");
_Static_assert(sizeof(tr_region_t) == 11872, "region size");

struct tr_config;

/* Open (or create) the region in dir for cfg. Returns 0, or -1 with a message in err. */
int tr_region_open(const char *dir, const struct tr_config *cfg, char *err, size_t errlen);
extern tr_region_t *tr_region_ptr;
static inline tr_region_t *tr_region(void) { return tr_region_ptr; }
int tr_region_slot(void);
/* Reclaim slots whose process is gone; returns bytes reclaimed over all devices. */
uint64_t tr_region_reclaim_dead(void);

/* 0 in a process created by fork()/clone() until it has a slot of its own (wipe-on-fork). */
extern volatile uint32_t *tr_slot_owner;
/* Called when *tr_slot_owner reads 0: take a slot of our own; -1 when there is none. */
int tr_region_rebind(void);
#define TR_OWN_SLOT() (__builtin_expect(*tr_slot_owner != 0, 1) || tr_region_rebind() == 0)

/* Memory admission: reserve size on device dev if used + size <= limit (CAS). */
int tr_mem_reserve(int dev, uint64_t size);
void tr_mem_release(int dev, uint64_t size);
void tr_region_after_fork(void);
/* track.c: a forked child owns none of its parent's handles. */
void tr_track_forget_all(void);
/* core.c: in a forked child that cannot account (no free slot): no GPU from now on. */
void tr_refuse_after_fork(const char *why);

#endif
