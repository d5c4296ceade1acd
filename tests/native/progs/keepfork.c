/*
 * The core's one known slot gap (nodeagent/native/README.md, "Known limits"): a process turns
 * the core's wipe-on-fork owner page back to copy-on-fork (madvise(MADV_KEEPONFORK), the page
 * found by its "wf" flag in /proc/self/smaps) and makes a child with a raw clone() (no atfork
 * handler runs). The child charges to its parent's slot and shares its lock. The parent
 * exits; the child drops the lock (F_OFD_SETLK F_UNLCK on the region's descriptor), so the
 * next peer to start reclaims the slot as dead under the child's memory. Usage:
 *   keepfork BYTES
 * waits for one line on stdin (the test first moves it into a pod's cgroup), then prints
 * "child <pid> held <BYTES>" once the child holds BYTES, its parent is gone and the lock
 * dropped; the child then waits for stdin to close.
 */
#include "common.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#ifndef MADV_KEEPONFORK
#define MADV_KEEPONFORK 19
#endif
#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

/* Every mapping the kernel marks wipe-on-fork ("wf" in VmFlags) back to copy-on-fork. */
static int keep_on_fork(void) {
    FILE *f = fopen("/proc/self/smaps", "re");
    char line[512];
    unsigned long start = 0, end = 0;
    int undone = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2) {
            start = a, end = b;
        } else if (!strncmp(line, "VmFlags:", 8) && strstr(line, " wf")) {
            if (madvise((void *)start, end - start, MADV_KEEPONFORK) == 0) undone++;
        }
    }
    fclose(f);
    /* simgpu stands in for a driver in the kernel, whose bookkeeping of which process owns
     * what no tenant can reach: its own wipe-on-fork pages (SIMULATED, exported for this) are
     * put back as they were. */
    const char *libs[] = {"libcuda.so.1", "libnvidia-ml.so.1"};
    for (int i = 0; i < 2; i++) {
        void *h = dlopen(libs[i], RTLD_NOW | RTLD_NOLOAD);
        void **page = h ? dlsym(h, "simgpu_owner_page") : NULL;
        if (page && *page) madvise(*page, 4096, MADV_WIPEONFORK);
    }
    return undone;
}

/* Drop every OFD lock this process's descriptors of region.bin hold. */
static int drop_region_locks(void) {
    DIR *d = opendir("/proc/self/fd");
    int dropped = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        char link[320], target[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        if (!strstr(target, "region.bin")) continue;
        struct flock fl = {.l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0x40000000LL,
                           .l_len = 64, .l_pid = 0};
        if (fcntl(atoi(e->d_name), F_OFD_SETLK, &fl) == 0) dropped++;
    }
    if (d) closedir(d);
    return dropped;
}

int main(int argc, char **argv) {
    unsigned long long bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 0;
    char go[8];
    if (!fgets(go, sizeof go, stdin)) return 1;
    CUdevice dev;
    CHECK(open_device(visible_ordinal(), &dev)); /* through the core: a slot, a charged context */
    EXPECT(keep_on_fork() > 0);
    pid_t parent = getpid();
    long child = syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L); /* no atfork handlers */
    EXPECT(child >= 0);
    if (child > 0) _exit(0); /* the parent goes; its slot looks dead once the lock is gone */
    while (getppid() == parent) usleep(1000);
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, bytes)); /* charged to the parent's slot */
    EXPECT(drop_region_locks() > 0);
    printf("child %d held %llu\n", (int)getpid(), bytes);
    fflush(stdout);
    wait_stdin_closed();
    return 0;
}
