/* Slice config: the limits the node agent wrote for this container (read-only mount). */
#ifndef TRANCHE_CONFIG_H
#define TRANCHE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "region.h"

#define TR_DEFAULT_CONFIG "/etc/tranche/slice.conf"
#define TR_DEFAULT_REGION_DIR "/var/run/tranche/region"

typedef struct {
    char uuid[TR_UUID_LEN];
    uint64_t memory_bytes;
    uint32_t compute_percent; /* 1..100 */
    uint64_t context_floor_bytes; /* least a context on this device is charged, > 0 */
} tr_config_device_t;

typedef struct tr_config {
    char claim[TR_CLAIM_LEN];
    int device_count;
    tr_config_device_t devices[TR_MAX_DEVICES];
} tr_config_t;

/* Parse the config file at path into cfg. 0 on success, -1 with a message in err. */
int tr_config_parse_file(const char *path, tr_config_t *cfg, char *err, size_t errlen);
/* Load the config at the fixed path (the test variant alone may take TRANCHE_SLICE_CONFIG). */
int tr_config_load(tr_config_t *cfg, char *err, size_t errlen);
/* The region folder: the fixed path (the test variant alone may take TRANCHE_REGION_DIR). */
const char *tr_region_dir(void);

#endif
