/*
 * The container's shared region: creation, validation, process slots and the memory counter.
 * The first process creates the file under a temporary name and renames it into place once
 * initialised, so nobody ever maps a half-written header.
 */
#define _GNU_SOURCE
#include "region.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "tranche.h"

tr_region_t *tr_region_ptr;
#define g_region tr_region_ptr
/* Until the region is open nothing is charged, so the check passes; then it points at a
 * MADV_WIPEONFORK page holding 1, which the kernel hands to any child (fork(), or clone()
 * without the atfork handlers) as 0. */
static uint32_t g_owner_before_init = 1;
volatile uint32_t *tr_slot_owner = &g_owner_before_init;
static uint64_t g_pid_ns; /* inode of our PID namespace, 0 if unknown */
static int g_fd = -1;
static int g_slot = -1;
static char g_path[4096]; /* region.bin, reopened by a forked child for a lock of its own */
/* Limits come from the read-only config, never from the tenant-writable region. */
static uint64_t g_limit[TR_MAX_DEVICES];

int tr_region_slot(void) { return g_slot; }

/* Open-file-description locks: they belong to our descriptor's open file, so a close() of
 * another descriptor of region.bin elsewhere in the process (which drops every POSIX record
 * lock the process holds on the file) leaves them in place. They still go when the process
 * dies, conflict with the agent's POSIX locks, and are seen by F_GETLK. */
static int lock_byte(int fd, int slot, short type) {
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET,
                       .l_start = TR_LOCK_BASE + slot, .l_len = 1, .l_pid = 0};
    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* Field 22 (starttime) of our own /proc/self/stat, recorded in the slot for the node agent
 * (which finds the process in the host's /proc). The core never judges liveness by it: a
 * tenant who can mount decides what /proc shows. The command name (field 2) may hold spaces,
 * so fields are counted from the last ')'. */
static uint64_t proc_start_time(void) {
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ') return 0;
    int field = 2;
    for (; *p && field < 22; p++)
        if (*p == ' ') field++;
    return strtoull(p, NULL, 10);
}

/* What liveness rests on: pidfds (Linux 5.3+), asked by raw system call (a program may define
 * libc's poll() or syscall() itself). A pidfd names a thread group through the kernel's own
 * pid table, in the caller's PID namespace: no /proc mount, start time or process state the
 * tenant can shape is read. */
#ifndef PIDFS_IOCTL_MAGIC
#define PIDFS_IOCTL_MAGIC 0xFF
#endif
#ifndef PIDFD_GET_PID_NAMESPACE
#define PIDFD_GET_PID_NAMESPACE _IO(PIDFS_IOCTL_MAGIC, 5) /* Linux 6.11+ */
#endif

static long pidfd_open_raw(uint32_t pid) {
    return tr_syscall4(SYS_pidfd_open, (long)(int32_t)pid, 0, 0, 0);
}

static void close_raw(long fd) { tr_syscall4(SYS_close, fd, 0, 0, 0); }

/* Our PID namespace as the kernel names it: the namespace of a pidfd of ourselves (Linux
 * 6.11+), the same inode /proc/self/ns/pid shows, but read without /proc. 0 if unknown. */
static uint64_t kernel_pid_ns(void) {
    long self = pidfd_open_raw(tr_self_pid());
    if (self < 0) return 0;
    long ns = tr_syscall4(SYS_ioctl, self, (long)PIDFD_GET_PID_NAMESPACE, 0, 0);
    close_raw(self);
    if (ns < 0) return 0;
    struct stat st;
    long rc = tr_syscall4(SYS_fstat, ns, (long)&st, 0, 0);
    close_raw(ns);
    return rc == 0 ? (uint64_t)st.st_ino : 0;
}

/* Older kernels: /proc/self/ns/pid, and only when /proc shows our own namespace (NSpid lists
 * more than one pid: the /proc mounted here belongs to an outer namespace). A tenant who can
 * mount over /proc (a user namespace of its own, which the runtime's seccomp profile refuses
 * on the node) can make this lie; the kernel's answer above cannot. 0 if unknown. */
static uint64_t proc_pid_ns(void) {
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) != 0) return 0;
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    const char *line = strstr(buf, "\nNSpid:");
    if (!line) return 0;
    char *end;
    unsigned long pid = strtoul(line + 7, &end, 10);
    if (pid != (unsigned long)tr_self_pid() || (*end != '\n' && *end != '\0')) return 0;
    return (uint64_t)st.st_ino;
}

static uint64_t own_pid_ns(void) {
    uint64_t ns = kernel_pid_ns();
    return ns ? ns : proc_pid_ns();
}

/* Whether a slot's process may still hold memory. Its lock says nothing (the owner can drop
 * it), nor does /proc (a zombie leader reads 'Z' while another thread keeps the process, its
 * descriptors and its memory; a bind mount over /proc/<pid> hides a live process). Only the
 * kernel's answer to a pidfd counts, and only two answers free a slot: no thread group has
 * that pid in our namespace (ESRCH; EINVAL: the pid is now a thread of another group), or the
 * pidfd polls readable, which the kernel reports once every thread of the group has exited.
 * Anything else, an error included (no pidfd_open before 5.3, a seccomp filter, no
 * descriptor left), keeps the slot: a charge may stay too long, never go too early. A process
 * that has since taken the pid is taken for the owner until it exits, for the same reason. A
 * slot of another PID namespace is not ours to judge: the node agent's. */
static int owner_alive(const tr_slot_t *s) {
    uint32_t pid = atomic_load(&s->pid);
    if (!g_pid_ns || s->pid_ns != g_pid_ns) return 1;
    long fd = pidfd_open_raw(pid);
    if (fd == -ESRCH || fd == -EINVAL) return 0;
    if (fd < 0) return 1;
    struct pollfd p = {.fd = (int)fd, .events = POLLIN};
    struct timespec now = {0, 0};
    long n = tr_syscall4(SYS_ppoll, (long)&p, 1, (long)&now, 0);
    close_raw(fd);
    return !(n == 1 && (p.revents & POLLIN));
}

/* Caller holds the slot's lock; the previous owner is gone. Returns bytes given back. */
static uint64_t scrub_slot(tr_slot_t *s) {
    uint64_t total = 0;
    for (int d = 0; d < TR_MAX_DEVICES; d++) {
        uint64_t held = atomic_exchange(&s->mem_used[d], 0);
        if (held) {
            atomic_fetch_sub(&g_region->devices[d].mem_used, held);
            total += held;
        }
    }
    atomic_fetch_add(&s->generation, 1);
    atomic_store(&s->pid, 0);
    return total;
}

uint64_t tr_region_reclaim_dead(void) {
    uint64_t total = 0;
    for (int i = 0; i < TR_MAX_SLOTS; i++) {
        if (i == g_slot) continue;
        tr_slot_t *s = &g_region->slots[i];
        if (atomic_load(&s->pid) == 0) continue;
        /* Holding the lock keeps other reclaimers out; a free lock alone does not prove the
         * owner dead (it may have dropped it), its process must be gone too. */
        if (lock_byte(g_fd, i, F_WRLCK) != 0) continue;
        if (atomic_load(&s->pid) != 0 && !owner_alive(s)) total += scrub_slot(s);
        lock_byte(g_fd, i, F_UNLCK);
    }
    return total;
}

static int claim_slot(char *err, size_t errlen) {
    g_pid_ns = own_pid_ns();
    if (!g_pid_ns) {
        snprintf(err, errlen, "this process cannot name its PID namespace (before Linux 6.11, "
                 "its /proc must show its own namespace: a PID namespace entered without "
                 "mounting its /proc does not), so its peers could not tell whether it is "
                 "alive; run GPU work in the container's own PID namespace");
        return -1;
    }
    for (int i = 0; i < TR_MAX_SLOTS; i++) {
        if (lock_byte(g_fd, i, F_WRLCK) != 0) continue; /* a live process has it */
        tr_slot_t *s = &g_region->slots[i];
        if (atomic_load(&s->pid) != 0) {
            if (owner_alive(s)) { /* its owner dropped the lock but lives: still its slot */
                lock_byte(g_fd, i, F_UNLCK);
                continue;
            }
            scrub_slot(s); /* left by a dead process */
        }
        s->start_time = proc_start_time();
        s->pid_ns = g_pid_ns;
        atomic_fetch_add(&s->generation, 1);
        atomic_store(&s->pid, tr_self_pid());
        g_slot = i;
        /* Nonzero, and different for every claim (generation and slot): per-thread state
         * keyed by it (the compute meter's budget lease) is never taken for its parent's. */
        *tr_slot_owner = (atomic_load(&s->generation) << 6) | (uint32_t)i | 1u << 31;
        return 0;
    }
    snprintf(err, errlen, "all %d process slots of the container's region are in use: at most "
             "%d processes of one container may use the GPU at once", TR_MAX_SLOTS, TR_MAX_SLOTS);
    return -1;
}

static int validate(const tr_region_t *r, struct stat *st, const tr_config_t *cfg, char *err,
                    size_t errlen) {
    if ((size_t)st->st_size < sizeof(tr_region_t) || r->magic != TR_REGION_MAGIC) {
        snprintf(err, errlen, "region is corrupt (bad magic or size %lld); the node agent "
                              "must recreate it", (long long)st->st_size);
        return -1;
    }
    if (r->major != TR_REGION_MAJOR || r->header_size != sizeof(tr_region_t)) {
        snprintf(err, errlen, "region has layout version %u.%u (size %u), this library speaks "
                              "%u.x (size %zu); restart the container with matching versions",
                 r->major, r->minor, r->header_size, TR_REGION_MAJOR, sizeof(tr_region_t));
        return -1;
    }
    if ((int)r->device_count != cfg->device_count || r->slot_count != TR_MAX_SLOTS) {
        snprintf(err, errlen, "region holds %u devices, the slice config %d", r->device_count,
                 cfg->device_count);
        return -1;
    }
    for (int i = 0; i < cfg->device_count; i++) {
        if (strncmp(r->devices[i].uuid, cfg->devices[i].uuid, TR_UUID_LEN) != 0) {
            snprintf(err, errlen, "region device %d is %.48s, the slice config says %s", i,
                     r->devices[i].uuid, cfg->devices[i].uuid);
            return -1;
        }
    }
    return 0;
}

static int create_region(const char *dir, const char *path, const tr_config_t *cfg) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s/.region.%d.tmp", dir, (int)getpid());
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return -1;
    tr_region_t *r = calloc(1, sizeof *r);
    if (!r) {
        close(fd);
        unlink(tmp);
        return -1;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r->magic = TR_REGION_MAGIC;
    r->major = TR_REGION_MAJOR;
    r->minor = TR_REGION_MINOR;
    r->header_size = sizeof *r;
    r->device_count = (uint32_t)cfg->device_count;
    r->slot_count = TR_MAX_SLOTS;
    r->created_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    snprintf(r->claim, sizeof r->claim, "%s", cfg->claim);
    for (int i = 0; i < cfg->device_count; i++) {
        snprintf(r->devices[i].uuid, TR_UUID_LEN, "%s", cfg->devices[i].uuid);
        r->devices[i].mem_limit = cfg->devices[i].memory_bytes;
        r->devices[i].compute_percent = cfg->devices[i].compute_percent;
    }
    ssize_t n = write(fd, r, sizeof *r);
    free(r);
    close(fd);
    /* link() fails if another process won the race; its region is as good as ours. */
    int rc = (n == (ssize_t)sizeof *r) ? link(tmp, path) : -1;
    unlink(tmp);
    return (rc == 0 || errno == EEXIST) ? 0 : -1;
}

int tr_region_open(const char *dir, const tr_config_t *cfg, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, TR_REGION_FILE);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        if (create_region(dir, path, cfg) != 0) {
            snprintf(err, errlen, "cannot create region in %s: %s", dir, strerror(errno));
            return -1;
        }
        fd = open(path, O_RDWR | O_CLOEXEC);
    }
    if (fd < 0) {
        snprintf(err, errlen, "cannot open region %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot stat region %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    size_t maplen = sizeof(tr_region_t);
    if ((size_t)st.st_size < maplen) {
        snprintf(err, errlen, "region %s is corrupt (size %lld, expected %zu); the node agent "
                              "must recreate it", path, (long long)st.st_size, maplen);
        close(fd);
        return -1;
    }
    void *m = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "cannot map region %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (validate(m, &st, cfg, err, errlen) != 0) {
        munmap(m, maplen);
        close(fd);
        return -1;
    }
    g_region = m;
    g_fd = fd;
    snprintf(g_path, sizeof g_path, "%s", path);
    for (int i = 0; i < cfg->device_count; i++) {
        g_limit[i] = cfg->devices[i].memory_bytes;
        g_region->devices[i].mem_limit = g_limit[i];
        g_region->devices[i].compute_percent = cfg->devices[i].compute_percent;
    }
    /* A child the kernel made without our atfork handler (a raw clone()) must not charge to
     * our slot: it shares our lock, so once we die and it drops the lock our slot would be
     * reclaimed under its allocations. The page reads 0 in every child. Without the kernel
     * feature (before 4.14) fork() children are still caught by the atfork handler. */
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page != MAP_FAILED) {
        madvise(page, 4096, MADV_WIPEONFORK);
        tr_slot_owner = page;
    }
    if (claim_slot(err, errlen) != 0) return -1;
    tr_region_reclaim_dead();
    return 0;
}

int tr_mem_reserve(int dev, uint64_t size) {
    if (!TR_OWN_SLOT()) return -1;
    tr_device_t *d = &g_region->devices[dev];
    uint64_t limit = g_limit[dev];
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t used = atomic_load_explicit(&d->mem_used, memory_order_relaxed);
        while (size <= limit && used <= limit - size) {
            if (atomic_compare_exchange_weak(&d->mem_used, &used, used + size)) {
                atomic_fetch_add(&g_region->slots[g_slot].mem_used[dev], size);
                uint64_t peak = atomic_load_explicit(&d->mem_peak, memory_order_relaxed);
                while (used + size > peak &&
                       !atomic_compare_exchange_weak(&d->mem_peak, &peak, used + size)) {
                }
                return 0;
            }
        }
        /* Over the cap: memory of a killed peer may still be counted; reclaim once, retry. */
        if (attempt == 0 && tr_region_reclaim_dead() == 0) break;
    }
    atomic_fetch_add(&d->mem_rejected, 1);
    return -1;
}

void tr_mem_release(int dev, uint64_t size) {
    /* A child that never took a slot gives back nothing: what it would free was charged by
     * its parent, who still holds it (the rebind forgets the inherited handles). */
    if (__builtin_expect(!*tr_slot_owner, 0)) {
        tr_region_rebind();
        return;
    }
    atomic_fetch_sub(&g_region->slots[g_slot].mem_used[dev], size);
    atomic_fetch_sub(&g_region->devices[dev].mem_used, size);
}

static _Atomic int g_rebinding;

int tr_region_rebind(void) {
    /* A child the atfork handler never ran in: do now what it would have done. One thread
     * rebinds, others wait for it. */
    int expected = 0;
    if (atomic_compare_exchange_strong(&g_rebinding, &expected, 1)) {
        if (!*tr_slot_owner) tr_region_after_fork();
        atomic_store(&g_rebinding, 0);
    } else {
        while (atomic_load(&g_rebinding)) {
        }
    }
    return *tr_slot_owner && g_slot >= 0 ? 0 : -1;
}

void tr_region_after_fork(void) {
    /* The child has the mapping but not the parent's slot: it takes one of its own, through a
     * descriptor and a mapping of its own (the inherited ones share the parent's open file
     * description, so its locks would be the parent's: the parent's slot would look like the
     * child's, and stay locked after the parent died). Never a shared slot: with none free, the child has no GPU.
     * Only async-signal-safe calls here. */
    if (!g_region) return;
    char err[400];
    tr_track_forget_all(); /* the parent's handles are not ours to free or settle */
    int fd = open(g_path, O_RDWR | O_CLOEXEC);
    g_slot = -1;
    close(g_fd); /* even on failure: holding it would keep the parent's lock past its death */
    g_fd = fd;
    if (fd < 0) {
        tr_refuse_after_fork("cannot reopen the shared region in a forked child");
        return;
    }
    /* The inherited mapping holds the parent's open file too (a mapping keeps its file open):
     * map the same bytes again through our own descriptor, at the same address. */
    if (mmap(g_region, sizeof(tr_region_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
             0) == MAP_FAILED) {
        tr_refuse_after_fork("cannot map the shared region in a forked child");
        return;
    }
    if (claim_slot(err, sizeof err) != 0) tr_refuse_after_fork(err);
}
