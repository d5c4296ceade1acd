/* simgpu shared state: config parsing, the host state file and process liveness. */
#define _GNU_SOURCE
#include "simstate.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int sim_ndev;
int sim_host[SIM_MAX_DEV];
sim_devcfg_t sim_cfg[SIM_MAX_DEV];
sim_state_t *sim_state;
sim_faults_t *sim_faults;
uint64_t sim_overhead_permille;
static int state_fd = -1;
static int faults_fd = -1;
static int faults_rw;
static sim_faults_t no_faults; /* no faults file: no event, every GPU answering */
static int my_slot = -1;
static int init_rc = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

uint64_t sim_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sim_sleep_until(uint64_t t) {
    for (uint64_t now = sim_now(); now < t; now = sim_now()) {
        struct timespec ts = {(time_t)((t - now) / 1000000000ull), (long)((t - now) % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
}

static void default_device(sim_devcfg_t *d, int i) {
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "Tesla V100-PCIE-32GB");
    d->memory_bytes = 32768ull << 20;
    d->context_bytes = 300ull << 20;
    d->sm_count = 80;
    d->cc_major = 7;
    d->cc_minor = 0;
    (void)i;
}

static void set_uuid(sim_devcfg_t *d, int i) {
    if (!d->uuid[0])
        snprintf(d->uuid, sizeof d->uuid, "GPU-51a1a7ed-0000-4000-8000-%012x", i);
    /* Bytes of the textual UUID, so cuDeviceGetUuid and NVML agree. */
    const char *p = d->uuid + 4;
    for (int b = 0; b < 16 && *p; b++) {
        if (*p == '-') p++;
        unsigned v = 0;
        if (sscanf(p, "%2x", &v) != 1) break;
        d->uuid_bytes[b] = (unsigned char)v;
        p += 2;
    }
}

static void apply_visibility(void) {
    struct stat st;
    if (stat(SIM_DEVICE_DIR, &st) != 0 || !S_ISDIR(st.st_mode)) return;
    int n = 0;
    for (int i = 0; i < sim_ndev; i++) {
        char path[64];
        snprintf(path, sizeof path, SIM_DEVICE_DIR "/simgpu%d", i);
        if (access(path, F_OK) != 0) continue;
        sim_cfg[n] = sim_cfg[i];
        sim_host[n++] = i;
    }
    sim_ndev = n;
}

static uint32_t pidns_of(const char *proc_entry) {
    char path[300];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%s/ns/pid", proc_entry);
    return stat(path, &st) == 0 ? (uint32_t)st.st_ino : 0;
}

/* The last NSpid field of /proc/<entry>/status: the pid in the process's own namespace. */
static uint32_t inner_pid(const char *proc_entry) {
    char path[300], line[256];
    snprintf(path, sizeof path, "/proc/%s/status", proc_entry);
    FILE *f = fopen(path, "re");
    uint32_t pid = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "NSpid:", 6) != 0) continue;
        for (char *save, *tok = strtok_r(line + 6, " \t\n", &save); tok;
             tok = strtok_r(NULL, " \t\n", &save))
            pid = (uint32_t)strtoul(tok, NULL, 10);
        break;
    }
    fclose(f);
    return pid;
}

/* This process's PID namespace, looked up once per process (a forked child, whose namespace
 * may differ, has another pid): NVML's listings ask it of every slot on every call. */
static uint32_t own_pidns(void) {
    static _Atomic int64_t cached; /* pid << 32 | namespace inode */
    int64_t c = atomic_load(&cached), pid = getpid();
    if (c >> 32 != pid) {
        c = pid << 32 | pidns_of("self");
        atomic_store(&cached, c);
    }
    return (uint32_t)c;
}

/* Whether host pid `host` (a /proc entry of this process's namespace) is the process that sees
 * itself as `pid` in namespace `ns`. */
static int is_slot_owner(uint32_t host, uint32_t pid, uint32_t ns) {
    char entry[16];
    snprintf(entry, sizeof entry, "%u", host);
    return host && pidns_of(entry) == ns && inner_pid(entry) == pid;
}

uint32_t sim_slot_pid(int i) {
    /* The last answer per slot, checked before it is used again (a guess, never trusted): a
     * /proc scan per listed process per call was most of an NVML listing's cost. */
    static _Atomic uint64_t last_key[SIM_MAX_SLOTS];
    static _Atomic uint32_t last_host[SIM_MAX_SLOTS];
    uint32_t pid = atomic_load(&sim_state->slots[i].pid), ns = sim_state->slots[i].pidns;
    if (!pid || !ns || ns == own_pidns()) return pid;
    uint64_t key = (uint64_t)ns << 32 | pid;
    uint32_t guess = atomic_load(&last_host[i]);
    if (atomic_load(&last_key[i]) == key && is_slot_owner(guess, pid, ns)) return guess;
    DIR *d = opendir("/proc");
    uint32_t found = 0;
    if (!d) return 0;
    for (struct dirent *e; !found && (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        if (pidns_of(e->d_name) == ns && inner_pid(e->d_name) == pid)
            found = (uint32_t)strtoul(e->d_name, NULL, 10);
    }
    closedir(d);
    if (found) {
        atomic_store(&last_host[i], found);
        atomic_store(&last_key[i], key);
    }
    return found;
}

/* One line per device: device name="..." memory_mib=N sm_count=N cc=M.m context_mib=N
 * count=N uuid=GPU-... ; '#' starts a comment. */
static int load_config(void) {
    const char *path = getenv("SIMGPU_CONFIG");
    sim_ndev = 0;
    FILE *f = path && *path ? fopen(path, "re") : NULL;
    if (path && *path && !f) {
        fprintf(stderr, "simgpu: cannot read SIMGPU_CONFIG %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!f) {
        for (int i = 0; i < 4; i++) default_device(&sim_cfg[sim_ndev++], i);
    } else {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            char *s = line;
            while (*s == ' ' || *s == '\t') s++;
            if (strncmp(s, "device", 6) != 0) continue;
            sim_devcfg_t d;
            default_device(&d, sim_ndev);
            int count = 1;
            for (char *p = s + 6; *p;) {
                while (*p == ' ' || *p == '\t' || *p == '\n') p++;
                if (!*p || *p == '#') break;
                char *eq = strchr(p, '=');
                if (!eq) break;
                *eq = '\0';
                char *key = p, *val = eq + 1, *end;
                if (*val == '"') {
                    val++;
                    end = strchr(val, '"');
                    if (!end) break;
                } else {
                    end = val + strcspn(val, " \t\n");
                }
                char saved = *end;
                *end = '\0';
                if (!strcmp(key, "name")) snprintf(d.name, sizeof d.name, "%s", val);
                else if (!strcmp(key, "memory_mib")) d.memory_bytes = strtoull(val, NULL, 10) << 20;
                else if (!strcmp(key, "context_mib")) d.context_bytes = strtoull(val, NULL, 10) << 20;
                else if (!strcmp(key, "sm_count")) d.sm_count = atoi(val);
                else if (!strcmp(key, "cc")) sscanf(val, "%d.%d", &d.cc_major, &d.cc_minor);
                else if (!strcmp(key, "count")) count = atoi(val);
                else if (!strcmp(key, "uuid")) snprintf(d.uuid, sizeof d.uuid, "%s", val);
                p = saved ? end + 1 : end;
            }
            for (int c = 0; c < count && sim_ndev < SIM_MAX_DEV; c++) {
                sim_cfg[sim_ndev] = d;
                if (c > 0) sim_cfg[sim_ndev].uuid[0] = '\0';
                sim_ndev++;
            }
        }
        fclose(f);
    }
    for (int i = 0; i < sim_ndev; i++) set_uuid(&sim_cfg[i], i), sim_host[i] = i;
    apply_visibility();
    return 0;
}

static int lock_slot(int i, short type) {
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = SIM_LOCK_BASE + i,
                       .l_len = 1};
    return fcntl(state_fd, F_SETLK, &fl);
}

/* A dead process's device memory goes back, as a real driver frees it on exit. */
static void reclaim_dead(void) {
    for (int i = 0; i < SIM_MAX_SLOTS; i++) {
        sim_slot_t *s = &sim_state->slots[i];
        uint32_t pid = atomic_load(&s->pid);
        /* Our own slot (perhaps claimed by the other simgpu library in this process: POSIX
         * locks never conflict within one process) is alive. */
        if (i == my_slot || pid == 0 || pid == (uint32_t)getpid() || lock_slot(i, F_WRLCK) != 0)
            continue;
        for (int d = 0; d < SIM_MAX_DEV; d++) {
            uint64_t held = atomic_exchange(&s->used[d], 0);
            if (held) atomic_fetch_sub(&sim_state->dev[d].used, held);
        }
        atomic_store(&s->pid, 0);
        lock_slot(i, F_UNLCK);
    }
}

/* Whether slot i's process still runs: it holds its slot's lock until it exits (the kernel
 * drops a process's POSIX locks at its exit). A real driver lists no process after its exit; a
 * killed one's slot keeps its memory here until the next process starts (`reclaim_dead`), and
 * listed meanwhile its pid would be blamed on whoever the kernel gives that pid next. */
int sim_slot_alive(int i) {
    uint32_t pid = atomic_load(&sim_state->slots[i].pid);
    /* Ours (or the other simgpu library's in this process: its locks never conflict with ours,
     * and unlocking would drop them) is alive. */
    if (i == my_slot || pid == (uint32_t)getpid() || lock_slot(i, F_WRLCK) != 0) return 1;
    lock_slot(i, F_UNLCK);
    return 0;
}

static void claim_slot(void) {
    /* libcuda and libnvidia-ml each carry this file: the second one in a process adopts the
     * slot the first claimed instead of wiping what it holds. */
    /* (pid, PID namespace) names a process: every container's first process is pid 1. */
    uint32_t ns = pidns_of("self");
    for (int i = 0; i < SIM_MAX_SLOTS; i++) {
        if (atomic_load(&sim_state->slots[i].pid) == (uint32_t)getpid() &&
            sim_state->slots[i].pidns == ns && lock_slot(i, F_WRLCK) == 0) {
            my_slot = i;
            return;
        }
    }
    for (int i = 0; i < SIM_MAX_SLOTS; i++) {
        if (lock_slot(i, F_WRLCK) != 0) continue;
        sim_slot_t *s = &sim_state->slots[i];
        for (int d = 0; d < SIM_MAX_DEV; d++) {
            uint64_t held = atomic_exchange(&s->used[d], 0);
            if (held) atomic_fetch_sub(&sim_state->dev[d].used, held);
        }
        s->pidns = pidns_of("self");
        /* A new process's time, sampled from its start: one that exits before NVML is asked
         * twice still shows what it ran. */
        memset(&sim_state->busy[i], 0, sizeof sim_state->busy[i]);
        for (int d = 0; d < SIM_MAX_DEV; d++) atomic_store(&sim_state->busy[i].sample_t[d], sim_now());
        atomic_store(&s->pid, (uint32_t)getpid());
        my_slot = i;
        return;
    }
}

/* A real driver (in the kernel) knows which process allocates or launches. A child made by a
 * raw clone() (no atfork handler runs) would still use its parent's slot here, so its memory
 * and busy time would be listed under its parent's pid, and given back when the parent dies.
 * A MADV_WIPEONFORK page reads 0 in every child: the child then takes a slot of its own.
 * Exported (SIMULATED aid): a tenant's program cannot reach a real driver's bookkeeping, so
 * tests that undo the interception core's own wipe-on-fork page leave this one alone
 * (tests/native/progs/keepfork.c). No system call on the hot path: getpid() costs more than
 * the whole simulated allocation here. */
static uint32_t owner_before_init = 1;
__attribute__((visibility("default"))) volatile uint32_t *simgpu_owner_page = &owner_before_init;

static void after_fork(void) {
    my_slot = -1;
    claim_slot();
    *simgpu_owner_page = 1;
}

/* Test-only fault injection (see simstate.h); an invalid value is ignored with one note. */
static void load_overhead(void) {
    const char *v = getenv("SIMGPU_DRIVER_OVERHEAD_PERMILLE");
    sim_overhead_permille = 0;
    if (!v || !*v) return;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end || *v == '-' || *v == '+' || n > 1000000ull) {
        fprintf(stderr, "simgpu: ignoring SIMGPU_DRIVER_OVERHEAD_PERMILLE=%s (want 0..1000000)\n",
                v);
        return;
    }
    sim_overhead_permille = n;
}

int sim_faults_writable(void) { return faults_rw; }

/* Map the node's faults file: read-write where this process may write it (the node), else
 * read-only (a container's mount); without it, the empty `no_faults`. */
static void map_faults(const char *state_path) {
    char fallback[4096];
    const char *path = getenv("SIMGPU_FAULTS");
    if (!path || !*path) {
        snprintf(fallback, sizeof fallback, "%s" SIM_FAULTS_SUFFIX, state_path);
        path = fallback;
    }
    sim_faults = &no_faults;
    faults_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    faults_rw = faults_fd >= 0;
    if (faults_fd < 0) faults_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (faults_fd < 0) return;
    struct stat st;
    if (faults_rw && fstat(faults_fd, &st) == 0 && st.st_size < (off_t)sizeof(sim_faults_t) &&
        ftruncate(faults_fd, sizeof(sim_faults_t)) != 0)
        faults_rw = 0;
    if (fstat(faults_fd, &st) != 0 || st.st_size < (off_t)sizeof(sim_faults_t)) return;
    void *m = mmap(NULL, sizeof(sim_faults_t), faults_rw ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_SHARED, faults_fd, 0);
    if (m != MAP_FAILED) sim_faults = m;
    else faults_rw = 0;
}

static void do_init(void) {
    if (load_config() != 0) return;
    load_overhead();
    const char *path = getenv("SIMGPU_STATE");
    if (!path || !*path) path = "/tmp/simgpu-state";
    map_faults(path);
    state_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (state_fd < 0) {
        fprintf(stderr, "simgpu: cannot open SIMGPU_STATE %s: %s\n", path, strerror(errno));
        return;
    }
    /* A fresh file is all zeroes, which is a valid empty state; extending is idempotent. */
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    fcntl(state_fd, F_SETLKW, &fl);
    if (lseek(state_fd, 0, SEEK_END) < (off_t)sizeof(sim_state_t) &&
        ftruncate(state_fd, sizeof(sim_state_t)) != 0) {
        fprintf(stderr, "simgpu: cannot size %s: %s\n", path, strerror(errno));
        return;
    }
    sim_state = mmap(NULL, sizeof(sim_state_t), PROT_READ | PROT_WRITE, MAP_SHARED, state_fd, 0);
    if (sim_state == MAP_FAILED) {
        sim_state = NULL;
        return;
    }
    if (sim_state->magic == 0) {
        sim_state->version = SIM_VERSION;
        sim_state->ndev = (uint32_t)sim_ndev;
        sim_state->magic = SIM_MAGIC;
    }
    fl.l_type = F_UNLCK;
    fcntl(state_fd, F_SETLK, &fl);
    if (sim_state->magic != SIM_MAGIC || sim_state->version != SIM_VERSION) {
        fprintf(stderr, "simgpu: %s is not a simgpu v%u state file\n", path, SIM_VERSION);
        sim_state = NULL;
        return;
    }
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page != MAP_FAILED && madvise(page, 4096, MADV_WIPEONFORK) == 0) {
        *(volatile uint32_t *)page = 1;
        simgpu_owner_page = page;
    }
    claim_slot();
    reclaim_dead();
    pthread_atfork(NULL, NULL, after_fork);
    init_rc = 0;
}

int sim_init(void) {
    pthread_once(&once, do_init);
    return init_rc;
}

int sim_mem_take(int dev, uint64_t size) {
    sim_dev_t *d = SIM_DEV(dev);
    if (__builtin_expect(!*simgpu_owner_page, 0)) after_fork(); /* a raw clone()'s child */
    uint64_t total = sim_cfg[dev].memory_bytes;
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t used = atomic_load(&d->used);
        while (size <= total && used <= total - size) {
            if (atomic_compare_exchange_weak(&d->used, &used, used + size)) {
                if (my_slot >= 0)
                    atomic_fetch_add(&sim_state->slots[my_slot].used[sim_host[dev]], size);
                return 0;
            }
        }
        reclaim_dead();
    }
    return -1;
}

void sim_mem_give(int dev, uint64_t size) {
    if (my_slot >= 0) atomic_fetch_sub(&sim_state->slots[my_slot].used[sim_host[dev]], size);
    atomic_fetch_sub(&SIM_DEV(dev)->used, size);
}

uint64_t sim_run(int dev, uint64_t earliest, uint64_t dur, uint64_t *end) {
    sim_dev_t *d = SIM_DEV(dev);
    uint64_t now = sim_now();
    if (earliest < now) earliest = now;
    uint64_t busy = atomic_load(&d->busy_until), start;
    do {
        start = busy > earliest ? busy : earliest;
    } while (!atomic_compare_exchange_weak(&d->busy_until, &busy, start + dur));
    atomic_fetch_add(&d->busy_total, dur);
    *end = start + dur;
    if (__builtin_expect(!*simgpu_owner_page, 0)) after_fork(); /* a raw clone()'s child */
    if (my_slot >= 0) { /* whose work it is: per-process utilisation (NVML) */
        sim_busy_t *b = &sim_state->busy[my_slot];
        int h = sim_host[dev];
        atomic_fetch_add(&b->total[h], dur);
        uint64_t u = atomic_load(&b->until[h]);
        while (u < *end && !atomic_compare_exchange_weak(&b->until[h], &u, *end)) {
        }
    }
    return start;
}

int sim_proc_utilisation(int slot, int dev, uint64_t *wall_us) {
    sim_busy_t *b = &sim_state->busy[slot];
    int h = sim_host[dev];
    uint64_t now = sim_now(), total = atomic_load(&b->total[h]);
    if (!total) return -1;
    /* Its work not yet done lies between now and the end of its last kernel: at most that. */
    uint64_t until = atomic_load(&b->until[h]), ahead = until > now ? until - now : 0;
    uint64_t done = total - (ahead < total ? ahead : total);
    uint64_t t0 = atomic_load(&b->sample_t[h]), b0 = atomic_load(&b->sample_b[h]);
    if (t0 == 0 || now - t0 >= 100000000ull) {
        if (atomic_compare_exchange_strong(&b->sample_t[h], &t0, now)) {
            uint64_t pct = t0 && now > t0 && done > b0 ? (done - b0) * 100 / (now - t0) : 0;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            atomic_store(&b->sample_pct[h], pct > 100 ? 100 : pct);
            atomic_store(&b->sample_b[h], done);
            atomic_store(&b->sample_wall_us[h],
                         (uint64_t)ts.tv_sec * 1000000ull + (uint64_t)ts.tv_nsec / 1000u);
        }
    }
    *wall_us = atomic_load(&b->sample_wall_us[h]);
    return (int)atomic_load(&b->sample_pct[h]);
}

unsigned sim_utilisation(int dev) {
    sim_dev_t *d = SIM_DEV(dev);
    uint64_t now = sim_now();
    uint64_t until = atomic_load(&d->busy_until), total = atomic_load(&d->busy_total);
    uint64_t done = total - (until > now ? until - now : 0); /* one FIFO: no gaps ahead */
    uint64_t t0 = atomic_load(&d->util_t), b0 = atomic_load(&d->util_b);
    if (t0 == 0 || now - t0 >= 200000000ull) {
        if (t0 && atomic_compare_exchange_strong(&d->util_t, &t0, now)) {
            uint64_t pct = (done - b0) * 100 / (now - t0);
            atomic_store(&d->util_pct, pct > 100 ? 100 : pct);
            atomic_store(&d->util_b, done);
        } else if (!t0 && atomic_compare_exchange_strong(&d->util_t, &t0, now)) {
            atomic_store(&d->util_b, done);
        }
    }
    return (unsigned)atomic_load(&d->util_pct);
}

int sim_host_lost(int host) {
    return sim_faults && host >= 0 && host < SIM_MAX_DEV &&
           atomic_load(&sim_faults->lost[host]) != 0;
}

/* A real driver's event wait sleeps until the GPU interrupts; the simulation's interrupt is a
 * futex on the event counter in the shared state (a shared file mapping: not FUTEX_PRIVATE),
 * woken by the raiser, so an agent waiting for events costs no CPU (it polled every 5 ms, half
 * a percent of a core). The futex word is the counter's low 32 bits, which every event
 * changes: at its address on a little-endian machine. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "futex word: the counter's low half");
static uint32_t *published_word(void) { return (uint32_t *)(void *)&sim_faults->published; }

/* SIMULATED: one health event into the ring NVML's event sets read (the node only: a process
 * that mapped the faults read-only raises nothing). Writers are serialised by a lock on byte 1
 * of the faults file (there is one injector at a time in practice); readers
 * only trust an event once `published` covers it. */
void sim_raise_event(int host, uint64_t type, uint64_t data, uint32_t pid) {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1, .l_len = 1};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (!faults_rw) return;
    fcntl(faults_fd, F_SETLKW, &fl);
    uint64_t n = atomic_load(&sim_faults->published);
    sim_event_t *e = &sim_faults->ring[n % SIM_EVENT_RING];
    *e = (sim_event_t){.dev = (uint32_t)host, .pid = pid, .type = type, .data = data,
                       .time_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec};
    atomic_store(&sim_faults->published, n + 1);
    syscall(SYS_futex, published_word(), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    fl.l_type = F_UNLCK;
    fcntl(faults_fd, F_SETLK, &fl);
}

void sim_wait_event(uint32_t seen, uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    syscall(SYS_futex, published_word(), FUTEX_WAIT, seen, &ts, NULL, 0);
}
