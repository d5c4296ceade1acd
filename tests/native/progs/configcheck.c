/*
 * The core's slice config parser on its own (built with nodeagent/native/src/config.c):
 *   configcheck FILE    prints "ok claim=<claim> devices=<n>" or "error <message>"
 * tests/native/test_sliceconfig.py runs the shared grammar cases through it and through
 * nodeagent/sliceconfig.py, so the two sides accept exactly the same files.
 */
#include <stdio.h>

#include "config.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: configcheck FILE\n");
        return 2;
    }
    tr_config_t cfg;
    char err[512];
    if (tr_config_parse_file(argv[1], &cfg, err, sizeof err) != 0) {
        printf("error %s\n", err);
        return 1;
    }
    printf("ok claim=%s devices=%d\n", cfg.claim, cfg.device_count);
    for (int i = 0; i < cfg.device_count; i++)
        printf("device %d %s %llu %u %llu\n", i, cfg.devices[i].uuid,
               (unsigned long long)cfg.devices[i].memory_bytes, cfg.devices[i].compute_percent,
               (unsigned long long)cfg.devices[i].context_floor_bytes);
    return 0;
}
