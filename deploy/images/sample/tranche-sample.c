/*
 * The sample tenant workload: what a tenant runs to check a slice. Linked against
 * libcuda.so.1 and libnvidia-ml.so.1, which the node's CDI spec provides (the image has none).
 *
 *   tranche-sample            nvidia-smi's name and memory, then allocate SAMPLE_ALLOC_MIB
 *                             (default 1024) in 1 GiB steps, SAMPLE_ALLOC_STEP_MS apart
 *                             (default 0: a job that grows, as a live page shows it), then
 *                             a compute loop
 *   tranche-sample gpus       nvidia-smi -L, then a context on each index 0..7
 *   tranche-sample unshare    the process's seccomp mode (/proc/self/status: 2 is a filter),
 *                             then unshare(CLONE_NEWUSER | CLONE_NEWNS), as `unshare -Urm` does
 *   tranche-sample core       is the interception core loaded, here and after execve with
 *                             an empty environment and with LD_PRELOAD= ?
 *   tranche-sample ram MIB    fill MIB of host RAM (the container's memory limit)
 *   tranche-sample write PATH try to open PATH for writing, as the tenant; says what happened
 *   tranche-sample zombie LINKS MIB
 *                             a hostile chain (issue #44): LINKS processes 50 ms apart, each
 *                             filling GPU 0 in MIB steps until refused, dropping the locks of
 *                             its descriptors of the core's region and ending its main thread
 *                             by SYS_exit while a second thread keeps the process and its
 *                             memory (the leader reads 'Z'); prints what each link was given
 *                             and the sum, then waits for SIGTERM
 *
 * It is the container's PID 1, and the kernel drops a signal sent to a namespace's PID 1 unless
 * the process handles it: without a handler `kubectl delete` waits the whole grace period and
 * then kills. SIGTERM and SIGINT end every mode at once.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned);
CUresult cuDeviceGet(CUdevice *, int);
CUresult cuDeviceGetCount(int *);
CUresult cuCtxCreate_v2(CUcontext *, unsigned, CUdevice);
CUresult cuCtxDestroy_v2(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr *, size_t);
CUresult cuModuleLoadData(CUmodule *, const void *);
CUresult cuModuleGetFunction(CUfunction *, CUmodule, const char *);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);
CUresult cuGetErrorName(CUresult, const char **);

static void stop(int sig) {
    static const char term[] = "tranche-sample: SIGTERM, stopping\n";
    static const char other[] = "tranche-sample: SIGINT, stopping\n";
    if (sig == SIGTERM) (void)!write(STDOUT_FILENO, term, sizeof term - 1);
    else (void)!write(STDOUT_FILENO, other, sizeof other - 1);
    _exit(0); /* the device memory and context go with the process, as with any exit */
}

static void stop_on_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

static const char *name_of(CUresult r) {
    const char *s = "CUDA_ERROR_UNKNOWN";
    cuGetErrorName(r, &s);
    return s;
}

static int run(char *const argv[]) {
    pid_t pid = fork();
    if (pid == 0) {
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    fflush(stdout);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int check(void) {
    char *smi[] = {"/usr/bin/nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader",
                   NULL};
    run(smi);
    const char *env = getenv("SAMPLE_ALLOC_MIB");
    uint64_t target = (env ? strtoull(env, NULL, 10) : 1024) << 20, held = 0, step = 1ull << 30;
    const char *pause = getenv("SAMPLE_ALLOC_STEP_MS");
    long pause_ms = pause ? strtol(pause, NULL, 10) : 0;
    CUdevice dev;
    CUcontext ctx;
    CUresult r = cuInit(0);
    if (r == 0) r = cuDeviceGet(&dev, 0);
    if (r == 0) r = cuCtxCreate_v2(&ctx, 0, dev);
    printf("context %s\n", name_of(r));
    if (r != 0) return 1;
    while (held < target) {
        uint64_t size = target - held < step ? target - held : step;
        CUdeviceptr ptr;
        r = cuMemAlloc_v2(&ptr, size);
        printf("alloc %llu MiB: %s\n", (unsigned long long)((held + size) >> 20), name_of(r));
        fflush(stdout);
        if (r != 0) break; /* keep what we have and compute with it, as a real job would */
        held += size;
        if (pause_ms > 0 && held < target) {
            struct timespec p = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};
            nanosleep(&p, NULL);
        }
    }
    CUmodule mod;
    CUfunction fn;
    uint64_t busy_ns = 20000000;
    void *params[] = {&busy_ns};
    cuModuleLoadData(&mod, "tranche-sample");
    cuModuleGetFunction(&fn, mod, "spin");
    printf("computing with %llu MiB\n", (unsigned long long)(held >> 20));
    fflush(stdout);
    for (;;) {
        if ((r = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL)) != 0) {
            printf("launch: %s\n", name_of(r));
            return 1;
        }
        cuCtxSynchronize();
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
}

static int gpus(void) {
    char *smi[] = {"/usr/bin/nvidia-smi", "-L", NULL};
    run(smi);
    int n = 0;
    CUresult r = cuInit(0);
    cuDeviceGetCount(&n);
    printf("cuDeviceGetCount %d %s\n", n, name_of(r));
    for (int i = 0; i < 8; i++) {
        CUdevice dev;
        CUcontext ctx;
        r = cuDeviceGet(&dev, i);
        if (r == 0) r = cuCtxCreate_v2(&ctx, 0, dev);
        printf("context %d: %s\n", i, name_of(r));
        if (r == 0) cuCtxDestroy_v2(ctx);
    }
    return 0;
}

static void print_seccomp(void) {
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Seccomp:", 8)) fputs(line, stdout);
    if (f) fclose(f);
}

static int core_loaded(void) {
    FILE *f = fopen("/proc/self/maps", "re");
    char line[512];
    int found = 0;
    while (f && fgets(line, sizeof line, f)) found |= strstr(line, "libtranche") != NULL;
    if (f) fclose(f);
    return found;
}

/* Every lock this process holds on the core's files (the region's slot locks) is dropped: an
 * OFD unlock of each descriptor of a file in a tranche folder (/var/run/tranche, /etc/tranche). */
static void drop_region_locks(void) {
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300], link[4096];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, link, sizeof link - 1);
        if (len <= 0) continue;
        link[len] = '\0';
        if (!strstr(link, "/tranche/")) continue;
        struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        fcntl(atoi(e->d_name), F_OFD_SETLK, &fl);
    }
    if (d) closedir(d);
}

static void *keep_process(void *arg) {
    (void)arg;
    for (;;) pause(); /* SIGTERM's handler ends the whole process */
    return NULL;
}

/* One link: fill, tell the parent what it was given, drop the locks, leave as a zombie leader. */
static void zombie_link(int tell, uint64_t step) {
    CUdevice dev;
    CUcontext ctx;
    uint64_t held = 0;
    CUdeviceptr ptr;
    if (cuInit(0) == 0 && cuDeviceGet(&dev, 0) == 0 && cuCtxCreate_v2(&ctx, 0, dev) == 0)
        while (cuMemAlloc_v2(&ptr, step) == 0) held += step;
    drop_region_locks();
    pthread_t keeper;
    if (pthread_create(&keeper, NULL, keep_process, NULL) != 0) _exit(1);
    dprintf(tell, "%llu\n", (unsigned long long)(held >> 20));
    close(tell);
    syscall(SYS_exit, 0); /* this thread only: the leader becomes a zombie, the process lives */
}

static int zombie_chain(int links, uint64_t step_mib) {
    uint64_t total = 0;
    for (int i = 0; i < links; i++) {
        int fds[2];
        if (pipe(fds) != 0) return 1;
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            zombie_link(fds[1], step_mib << 20);
        }
        close(fds[1]);
        char line[64] = "";
        ssize_t n = read(fds[0], line, sizeof line - 1);
        close(fds[0]);
        unsigned long long mib = n > 0 ? strtoull(line, NULL, 10) : 0;
        total += mib;
        printf("link %d held %llu MiB\n", i, mib);
        struct timespec pace = {0, 50000000};
        nanosleep(&pace, NULL);
    }
    printf("zombie chain: %d links held %llu MiB\n", links, (unsigned long long)total);
    for (;;) pause();
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    stop_on_signals();
    const char *mode = argc > 1 ? argv[1] : "check";
    if (!strcmp(mode, "check")) return check();
    if (!strcmp(mode, "gpus")) return gpus();
    if (!strcmp(mode, "unshare")) {
        print_seccomp();
        int rc = unshare(CLONE_NEWUSER | CLONE_NEWNS);
        printf("unshare -Urm: %s\n", rc == 0 ? "allowed" : strerror(errno));
        return rc == 0 ? 0 : 1;
    }
    if (!strcmp(mode, "loaded")) {
        printf("%s: core %s\n", argc > 2 ? argv[2] : "here", core_loaded() ? "loaded" : "absent");
        return 0;
    }
    if (!strcmp(mode, "core")) {
        printf("here: core %s\n", core_loaded() ? "loaded" : "absent");
        char *empty[] = {NULL}, *cleared[] = {"LD_PRELOAD=", NULL};
        char *a1[] = {argv[0], "loaded", "env -i", NULL}, *a2[] = {argv[0], "loaded", "LD_PRELOAD=", NULL};
        for (int i = 0; i < 2; i++) {
            pid_t pid = fork();
            if (pid == 0) {
                execve("/proc/self/exe", i ? a2 : a1, i ? cleared : empty);
                _exit(127);
            }
            waitpid(pid, NULL, 0);
        }
        return 0;
    }
    if (!strcmp(mode, "ram") && argc > 2) {
        size_t want = strtoull(argv[2], NULL, 10) << 20, step = 64u << 20;
        for (size_t held = 0; held < want; held += step) {
            char *p = malloc(step);
            if (!p) return 1;
            memset(p, 1, step);
            printf("host memory %zu MiB\n", (held + step) >> 20);
        }
        pause();
        return 0;
    }
    if (!strcmp(mode, "write") && argc > 2) {
        int fd = open(argv[2], O_WRONLY | O_CLOEXEC);
        printf("write %s: %s\n", argv[2], fd >= 0 ? "allowed" : strerror(errno));
        if (fd >= 0) close(fd);
        return 0;
    }
    if (!strcmp(mode, "zombie") && argc > 3) return zombie_chain(atoi(argv[2]), strtoull(argv[3], NULL, 10));
    fprintf(stderr, "usage: tranche-sample [check|gpus|unshare|core|ram MIB|write PATH|zombie LINKS MIB]\n");
    return 2;
}
