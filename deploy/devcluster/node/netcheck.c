/* netcheck: the dev cluster's network-policy probe (registry.tranche.dev/netcheck:1).
 *
 *   netcheck serve PORT         answer every TCP connection with one HTTP 200 line, forever
 *   netcheck probe HOST PORT    every 0.5 s: connect (1 s timeout), send a GET, print one line
 *                               "<seq> ok <status line>" | "<seq> refused|timeout|error <why>"
 *
 * Static, no libc resolver (HOST is an IPv4 address): the image holds this one file. The probe
 * never exits, so a test reads its verdicts from the pod's log over time (policy applied,
 * removed) without exec. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char REPLY[] =
    "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n\r\nnetcheck\n";

static int serve(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 64)) {
        perror("netcheck serve");
        return 1;
    }
    printf("serving on %d\n", port);
    fflush(stdout);
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0) continue;
        char buf[512];
        (void)!read(c, buf, sizeof buf);
        (void)!write(c, REPLY, sizeof REPLY - 1);
        close(c);
    }
}

/* One attempt: 0 ok (line filled), 1 refused, 2 timeout, 3 other error. */
static int attempt(const struct sockaddr_in *addr, char *line, size_t size) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    int rc = connect(fd, (const struct sockaddr *)addr, sizeof *addr);
    if (rc && errno != EINPROGRESS) {
        snprintf(line, size, "%s", strerror(errno));
        close(fd);
        return errno == ECONNREFUSED ? 1 : 3;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, 1000) != 1) {
        snprintf(line, size, "no answer in 1 s");
        close(fd);
        return 2;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
        snprintf(line, size, "%s", strerror(err));
        close(fd);
        return err == ECONNREFUSED || err == EHOSTUNREACH ? 1 : 3;
    }
    static const char GET[] = "GET / HTTP/1.0\r\n\r\n";
    (void)!write(fd, GET, sizeof GET - 1);
    p.events = POLLIN;
    char buf[128] = {0};
    ssize_t got = poll(&p, 1, 1000) == 1 ? read(fd, buf, sizeof buf - 1) : -1;
    close(fd);
    if (got <= 0) {
        snprintf(line, size, "connected, no reply");
        return 2;
    }
    buf[strcspn(buf, "\r\n")] = 0;
    snprintf(line, size, "%s", buf);
    return 0;
}

static int probe(const char *host, int port) {
    static const char *VERDICT[] = {"ok", "refused", "timeout", "error"};
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        fprintf(stderr, "netcheck probe: %s is not an IPv4 address\n", host);
        return 2;
    }
    struct timespec pause = {0, 500 * 1000 * 1000};
    for (unsigned long seq = 1;; seq++) {
        char line[200];
        int verdict = attempt(&addr, line, sizeof line);
        printf("%lu %s %s\n", seq, VERDICT[verdict], line);
        fflush(stdout);
        nanosleep(&pause, NULL);
    }
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);
    if (argc == 3 && !strcmp(argv[1], "serve")) return serve(atoi(argv[2]));
    if (argc == 4 && !strcmp(argv[1], "probe")) return probe(argv[2], atoi(argv[3]));
    fprintf(stderr, "usage: netcheck serve PORT | netcheck probe IPV4 PORT\n");
    return 2;
}
