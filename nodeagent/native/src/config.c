/*
 * Slice config reader. The file is written by the node agent (nodeagent/sliceconfig.py) and
 * mounted read-only, so a tenant cannot raise its own limits. Parsing is strict: any unknown
 * key, duplicate, gap or out-of-range value refuses the whole file, because running with a
 * half-understood config would mean running unlimited.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

static int parse_u64(const char *v, uint64_t *out) {
    if (*v < '0' || *v > '9') return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end != '\0') return -1;
    *out = (uint64_t)x;
    return 0;
}

int tr_config_parse_file(const char *path, tr_config_t *cfg, char *err, size_t errlen) {
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "cannot read slice config %s: %s", path, strerror(errno));
        return -1;
    }
    memset(cfg, 0, sizeof(*cfg));
    /* bit 0 uuid, bit 1 memory_bytes, bit 2 compute_percent */
    unsigned seen[TR_MAX_DEVICES] = {0};
    int have_version = 0, have_claim = 0, lineno = 0, rc = -1;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *s = trim(line);
        if (*s == '\0' || *s == '#') continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected key = value", path, lineno);
            goto out;
        }
        *eq = '\0';
        char *key = trim(s), *val = trim(eq + 1);
        uint64_t num = 0;
        if (strcmp(key, "version") == 0) {
            if (have_version++ || parse_u64(val, &num) || num != 1) {
                snprintf(err, errlen, "%s:%d: version must appear once and be 1", path, lineno);
                goto out;
            }
        } else if (strcmp(key, "claim") == 0) {
            if (have_claim++ || !*val || strlen(val) >= TR_CLAIM_LEN) {
                snprintf(err, errlen, "%s:%d: claim must appear once, 1..%d chars", path, lineno,
                         TR_CLAIM_LEN - 1);
                goto out;
            }
            strcpy(cfg->claim, val);
        } else if (strncmp(key, "device.", 7) == 0) {
            char *end = NULL;
            long idx = strtol(key + 7, &end, 10);
            if (end == key + 7 || *end != '.' || idx < 0 || idx >= TR_MAX_DEVICES) {
                snprintf(err, errlen, "%s:%d: device index must be 0..%d", path, lineno,
                         TR_MAX_DEVICES - 1);
                goto out;
            }
            const char *field = end + 1;
            tr_config_device_t *d = &cfg->devices[idx];
            unsigned bit = strcmp(field, "uuid") == 0             ? 1u
                           : strcmp(field, "memory_bytes") == 0    ? 2u
                           : strcmp(field, "compute_percent") == 0 ? 4u
                                                                   : 0u;
            if (!bit || (seen[idx] & bit)) {
                snprintf(err, errlen, "%s:%d: unknown or repeated key %s", path, lineno, key);
                goto out;
            }
            seen[idx] |= bit;
            if (bit == 1u) {
                if (strncmp(val, "GPU-", 4) != 0 || strlen(val) >= TR_UUID_LEN) {
                    snprintf(err, errlen, "%s:%d: uuid must look like GPU-...", path, lineno);
                    goto out;
                }
                strcpy(d->uuid, val);
            } else if (bit == 2u) {
                if (parse_u64(val, &num) || num == 0) {
                    snprintf(err, errlen, "%s:%d: memory_bytes must be a positive integer",
                             path, lineno);
                    goto out;
                }
                d->memory_bytes = num;
            } else {
                if (parse_u64(val, &num) || num < 1 || num > 100) {
                    snprintf(err, errlen, "%s:%d: compute_percent must be 1..100", path, lineno);
                    goto out;
                }
                d->compute_percent = (uint32_t)num;
            }
            if (idx + 1 > cfg->device_count) cfg->device_count = (int)idx + 1;
        } else {
            snprintf(err, errlen, "%s:%d: unknown key %s", path, lineno, key);
            goto out;
        }
    }
    if (!have_version || !have_claim || cfg->device_count == 0) {
        snprintf(err, errlen, "%s: needs version, claim and at least one device", path);
        goto out;
    }
    for (int i = 0; i < cfg->device_count; i++) {
        if (seen[i] != 7u) {
            snprintf(err, errlen, "%s: device.%d needs uuid, memory_bytes and compute_percent",
                     path, i);
            goto out;
        }
    }
    rc = 0;
out:
    fclose(f);
    return rc;
}

int tr_config_load(tr_config_t *cfg, char *err, size_t errlen) {
    const char *path = getenv("TRANCHE_SLICE_CONFIG");
    if (!path || !*path) path = TR_DEFAULT_CONFIG;
    FILE *probe = fopen(path, "re");
    if (probe || errno != ENOENT) {
        if (probe) fclose(probe);
        /* The file exists (or exists but is unreadable): it is the authority, never env. */
        return tr_config_parse_file(path, cfg, err, errlen);
    }
    const char *mem = getenv("TRANCHE_MEMORY_LIMIT");
    if (!mem || !*mem) {
        snprintf(err, errlen,
                 "no slice config at %s and no TRANCHE_MEMORY_LIMIT: refusing to run the GPU "
                 "unlimited; ask the operator to check the claim's CDI mount",
                 path);
        return -1;
    }
    memset(cfg, 0, sizeof(*cfg));
    uint64_t bytes = 0, pct = 100;
    const char *cp = getenv("TRANCHE_COMPUTE_PERCENT");
    if (parse_u64(mem, &bytes) || bytes == 0 || (cp && *cp && (parse_u64(cp, &pct) || pct < 1 ||
                                                              pct > 100))) {
        snprintf(err, errlen, "TRANCHE_MEMORY_LIMIT must be bytes > 0 and "
                              "TRANCHE_COMPUTE_PERCENT 1..100");
        return -1;
    }
    strcpy(cfg->claim, "env");
    cfg->device_count = 1;
    strcpy(cfg->devices[0].uuid, "*");
    cfg->devices[0].memory_bytes = bytes;
    cfg->devices[0].compute_percent = (uint32_t)pct;
    return 0;
}
