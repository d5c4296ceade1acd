/*
 * What a process can do to the region's liveness bookkeeping (issue #13, items 6 and 7):
 *   regiontricks closefd REGION_FILE BYTES   allocate BYTES, then open and close another
 *                                            descriptor of REGION_FILE (which drops every
 *                                            POSIX record lock the process holds on it);
 *                                            print "held", wait for stdin to close
 *   regiontricks forkhold BYTES              allocate BYTES, fork a child that waits for stdin
 *                                            to close; print "held <child pid>", then wait too
 *   regiontricks fork64                      take a slot, fork 63 children that hold one each
 *                                            (all 64 taken), then fork one more that allocates
 *                                            1 MiB; print "child alloc=<CUresult>"
 */
#include "common.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

static int closefd(const char *region_file, uint64_t bytes) {
    CUdevice dev;
    CUdeviceptr p;
    CHECK(open_device(0, &dev));
    CHECK(cuMemAlloc_v2(&p, bytes));
    int fd = open(region_file, O_RDONLY);
    EXPECT(fd >= 0);
    close(fd);
    printf("held %llu\n", (unsigned long long)bytes);
    fflush(stdout);
    wait_stdin_closed();
    CHECK(cuMemFree_v2(p));
    return 0;
}

static int forkhold(uint64_t bytes) {
    CUdevice dev;
    CUdeviceptr p;
    CHECK(open_device(0, &dev));
    CHECK(cuMemAlloc_v2(&p, bytes));
    fflush(stdout);
    int ready[2];
    EXPECT(pipe(ready) == 0);
    pid_t child = fork();
    EXPECT(child >= 0);
    char buf[16];
    if (child == 0) {
        /* fork() returns here after the core's child handler took its slot. */
        if (write(ready[1], "r", 1) != 1) _exit(1);
        wait_stdin_closed();
        _exit(0);
    }
    EXPECT(read(ready[0], buf, 1) == 1);
    printf("held %d\n", (int)child);
    fflush(stdout);
    wait_stdin_closed();
    waitpid(child, NULL, 0);
    return 0;
}

static int fork64(void) {
    CUdevice dev;
    CHECK(open_device(0, &dev));
    int release[2], ready[2];
    EXPECT(pipe(release) == 0 && pipe(ready) == 0);
    pid_t kids[63];
    for (int i = 0; i < 63; i++) {
        kids[i] = fork();
        EXPECT(kids[i] >= 0);
        if (kids[i] == 0) {
            /* fork() returns here after the core's child handler took (or failed) a slot. */
            char b = 1;
            if (write(ready[1], &b, 1) != 1) _exit(1);
            close(release[1]);
            while (read(release[0], &b, 1) > 0) {
            }
            _exit(0);
        }
    }
    for (int i = 0; i < 63; i++) {
        char b;
        EXPECT(read(ready[0], &b, 1) == 1);
    }
    int out[2];
    EXPECT(pipe(out) == 0);
    pid_t last = fork();
    EXPECT(last >= 0);
    if (last == 0) {
        CUdeviceptr p = 0;
        int r = (int)cuMemAlloc_v2(&p, 1 << 20);
        if (write(out[1], &r, sizeof r) != sizeof r) _exit(1);
        _exit(0);
    }
    int code = -1;
    EXPECT(read(out[0], &code, sizeof code) == sizeof code);
    waitpid(last, NULL, 0);
    close(release[1]);
    for (int i = 0; i < 63; i++) waitpid(kids[i], NULL, 0);
    printf("child alloc=%d\n", code);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "closefd"))
        return closefd(argv[2], strtoull(argv[3], NULL, 10));
    if (argc == 2 && !strcmp(argv[1], "fork64")) return fork64();
    if (argc == 3 && !strcmp(argv[1], "forkhold")) return forkhold(strtoull(argv[2], NULL, 10));
    fprintf(stderr, "usage: regiontricks closefd REGION_FILE BYTES | forkhold BYTES | fork64\n");
    return 2;
}
