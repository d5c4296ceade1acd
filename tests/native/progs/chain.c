/*
 * A holder that takes all it can and then tries to make its slot look dead, so the next
 * process of the container is given the slice again (issue #27, item 1):
 *   chain unlock CHUNK   fill device 0 in CHUNK-byte allocations until refused, then drop the
 *                        OFD locks of every descriptor of region.bin (F_OFD_SETLK F_UNLCK)
 *   chain remap CHUNK    fill, then map region.bin again over the core's mapping through a new
 *                        descriptor and close every descriptor of it: the core's open file,
 *                        and so its lock, is gone
 *   chain clone CHUNK    take the GPU, then raw clone() a child (no atfork handler runs) and
 *                        exit; the child fills, drops the locks and holds
 *   chain zombie CHUNK   fill, drop the locks, then the main thread leaves by SYS_exit while
 *                        a second thread keeps the process, its descriptors and its memory:
 *                        the leader reads 'Z' in /proc (issue #44, mechanism 1)
 *   chain liar CHUNK     as unlock, but the program's own getpid() names a process that
 *                        does not exist while the GPU is opened (the core's slot is claimed)
 *   chain hold CHUNK     fill and hold, nothing more (an honest neighbour at the cap)
 * Each prints "held <bytes>" (what the driver gave it) and holds until stdin closes.
 */
#include "common.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

static int is_region(const char *link) {
    size_t n = strlen(link);
    return n >= 10 && strcmp(link + n - 10, "region.bin") == 0;
}

/* Every descriptor of region.bin this process holds, by number; returns how many. */
static int region_fds(int *fds, int max) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        char path[300], link[4096];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, link, sizeof link - 1);
        if (len <= 0) continue;
        link[len] = '\0';
        if (is_region(link)) fds[n++] = atoi(e->d_name);
    }
    closedir(d);
    return n;
}

static void unlock_all(void) {
    int fds[16];
    int n = region_fds(fds, 16);
    for (int i = 0; i < n; i++) {
        struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        fcntl(fds[i], F_OFD_SETLK, &fl);
    }
}

static void remap_and_close(void) {
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4600];
    while (maps && fgets(line, sizeof line, maps)) {
        unsigned long lo, hi;
        char path[4096] = "";
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %4095s", &lo, &hi, path) < 2) continue;
        if (!is_region(path)) continue;
        int fd = open(path, O_RDWR);
        if (fd < 0) continue;
        mmap((void *)lo, hi - lo, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
        close(fd);
    }
    if (maps) fclose(maps);
    int fds[16];
    int n = region_fds(fds, 16);
    for (int i = 0; i < n; i++) close(fds[i]);
}

static uint64_t fill(uint64_t chunk) {
    uint64_t held = 0;
    CUdeviceptr p;
    while (cuMemAlloc_v2(&p, chunk) == CUDA_SUCCESS) held += chunk;
    return held;
}

static void hold(uint64_t held) {
    printf("held %llu\n", (unsigned long long)held);
    fflush(stdout);
    wait_stdin_closed();
}

/* The program's own getpid(), which the dynamic linker binds every library's calls to. */
static int g_lie;
__attribute__((visibility("default"))) pid_t getpid(void) {
    return g_lie ? 999999 : (pid_t)syscall(SYS_getpid);
}

static void *keep_process(void *arg) {
    (void)arg;
    wait_stdin_closed();
    _exit(0); /* exit_group: the whole process, and its memory, goes only now */
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    const char *mode = argv[1];
    uint64_t chunk = strtoull(argv[2], NULL, 10);
    CUdevice dev;
    g_lie = strcmp(mode, "liar") == 0;
    int opened = open_device(0, &dev) == CUDA_SUCCESS;
    g_lie = 0;
    if (!opened && strcmp(mode, "zombie") != 0) {
        hold(0); /* the slice is full: nothing to take, but stay like a holder */
        return 0;
    }
    if (strcmp(mode, "clone") == 0) {
        long child = syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
        if (child < 0) return 1;
        if (child > 0) _exit(0); /* the parent goes: its slot is left to the child */
        uint64_t held = fill(chunk);
        unlock_all();
        hold(held);
        _exit(0);
    }
    uint64_t held = opened ? fill(chunk) : 0; /* a zombie holder stays one, full or not */
    if (strcmp(mode, "zombie") == 0) {
        unlock_all();
        pthread_t keeper;
        if (pthread_create(&keeper, NULL, keep_process, NULL) != 0) return 1;
        printf("held %llu\n", (unsigned long long)held);
        fflush(stdout);
        syscall(SYS_exit, 0); /* this thread only: the leader becomes a zombie */
    }
    if (strcmp(mode, "unlock") == 0 || strcmp(mode, "liar") == 0) unlock_all();
    else if (strcmp(mode, "remap") == 0) remap_and_close();
    else if (strcmp(mode, "hold") != 0) return 2;
    hold(held);
    return 0;
}
