/* Slice config: the limits the node agent wrote for this container (read-only mount). */
#ifndef TRANCHE_CONFIG_H
#define TRANCHE_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "region.h"

#define TR_DEFAULT_CONFIG "/etc/tranche/slice.conf"
#define TR_DEFAULT_REGION_DIR "/var/run/tranche/region"

typedef struct {
    char uuid[TR_UUID_LEN]; /* "*" (env fallback only) matches every device */
    uint64_t memory_bytes;
    uint32_t compute_percent; /* 1..100 */
} tr_config_device_t;

typedef struct tr_config {
    char claim[TR_CLAIM_LEN];
    int device_count;
    tr_config_device_t devices[TR_MAX_DEVICES];
} tr_config_t;

/* Parse the config file at path into cfg. 0 on success, -1 with a message in err. */
int tr_config_parse_file(const char *path, tr_config_t *cfg, char *err, size_t errlen);
/* Load: TRANCHE_SLICE_CONFIG or the default path; environment limits only if no file. */
int tr_config_load(tr_config_t *cfg, char *err, size_t errlen);

#endif
