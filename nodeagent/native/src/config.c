/*
 * Slice config reader. The file is written by the node agent (nodeagent/sliceconfig.py) and
 * mounted read-only at a fixed path, so a tenant cannot raise its own limits. The shipped
 * library reads nothing from the environment: a process chooses its own environment before
 * exec, so any variable naming a limit or a path would let the tenant pick its slice. Tests
 * build a separate variant (libtranche-test.so, -DTRANCHE_TEST_OVERRIDES) that takes the two
 * paths from the environment; it is never mounted into a container.
 *
 * Grammar (the same as nodeagent/sliceconfig.py; tests/native/sliceconfig_cases.json is run
 * through both): only printable ASCII, tab and newline; blank and '#' lines are skipped;
 * every other line is `key = value` with spaces/tabs around both. Keys: `version` (exactly
 * "1"), `claim` (1..63 chars, no '='), `device.N.uuid` ("GPU-...", < 48 chars, unique),
 * `device.N.memory_bytes` (1..2^64-1), `device.N.compute_percent` (1..100),
 * `device.N.context_floor_bytes` (1..2^64-1: the least one context is charged), N in 0..15
 * written without sign or leading zero, indices contiguous from 0. Any unknown key,
 * duplicate, gap or out-of-range value refuses the whole file: running with a
 * half-understood config would mean running unlimited.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef TRANCHE_TEST_OVERRIDES
static const char *path_or(const char *env, const char *fixed) {
    const char *p = getenv(env);
    return p && *p ? p : fixed;
}
#define CONFIG_PATH() path_or("TRANCHE_SLICE_CONFIG", TR_DEFAULT_CONFIG)
#define REGION_DIR() path_or("TRANCHE_REGION_DIR", TR_DEFAULT_REGION_DIR)
#else
#define CONFIG_PATH() TR_DEFAULT_CONFIG
#define REGION_DIR() TR_DEFAULT_REGION_DIR
#endif

const char *tr_region_dir(void) { return REGION_DIR(); }

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
    return s;
}

/* Decimal digits only (no sign, no space: strtoull would take both), within 64 bits. */
static int parse_u64(const char *v, uint64_t *out) {
    if (*v < '0' || *v > '9') return -1;
    for (const char *p = v; *p; p++)
        if (*p < '0' || *p > '9') return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end != '\0') return -1;
    *out = (uint64_t)x;
    return 0;
}

/* "device.N.field": N is "0" or [1-9][0-9]*, below TR_MAX_DEVICES. Returns the field or NULL. */
static const char *device_key(const char *key, long *idx) {
    const char *p = key + 7, *start = p;
    long n = 0;
    while (*p >= '0' && *p <= '9' && p - start < 3) n = n * 10 + (*p++ - '0');
    if (p == start || *p != '.' || (start[0] == '0' && p - start > 1) || n >= TR_MAX_DEVICES)
        return NULL;
    *idx = n;
    return p + 1;
}

static int line_chars_ok(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c != '\t' && (c < 0x20 || c > 0x7e)) return 0;
    }
    return 1;
}

static int parse_line(char *s, tr_config_t *cfg, unsigned *seen, int *have, const char *path,
                      int lineno, char *err, size_t errlen) {
    char *eq = strchr(s, '=');
    if (!eq) {
        snprintf(err, errlen, "%s:%d: expected key = value", path, lineno);
        return -1;
    }
    *eq = '\0';
    char *key = trim(s), *val = trim(eq + 1);
    uint64_t num = 0;
    if (strcmp(key, "version") == 0) {
        if ((*have & 1) || strcmp(val, "1") != 0) {
            snprintf(err, errlen, "%s:%d: version must appear once and be 1", path, lineno);
            return -1;
        }
        *have |= 1;
        return 0;
    }
    if (strcmp(key, "claim") == 0) {
        if ((*have & 2) || !*val || strlen(val) >= TR_CLAIM_LEN || strchr(val, '=')) {
            snprintf(err, errlen, "%s:%d: claim must appear once, 1..%d chars without '='",
                     path, lineno, TR_CLAIM_LEN - 1);
            return -1;
        }
        *have |= 2;
        strcpy(cfg->claim, val);
        return 0;
    }
    long idx = -1;
    const char *field = strncmp(key, "device.", 7) == 0 ? device_key(key, &idx) : NULL;
    if (!field) {
        snprintf(err, errlen, "%s:%d: unknown key %s (device index must be 0..%d)", path,
                 lineno, key, TR_MAX_DEVICES - 1);
        return -1;
    }
    tr_config_device_t *d = &cfg->devices[idx];
    unsigned bit = strcmp(field, "uuid") == 0                  ? 1u
                   : strcmp(field, "memory_bytes") == 0         ? 2u
                   : strcmp(field, "compute_percent") == 0      ? 4u
                   : strcmp(field, "context_floor_bytes") == 0 ? 8u
                                                                : 0u;
    if (!bit || (seen[idx] & bit)) {
        snprintf(err, errlen, "%s:%d: unknown or repeated key %s", path, lineno, key);
        return -1;
    }
    seen[idx] |= bit;
    if (bit == 1u) {
        if (strncmp(val, "GPU-", 4) != 0 || strlen(val) >= TR_UUID_LEN) {
            snprintf(err, errlen, "%s:%d: uuid must look like GPU-... (< %d chars)", path,
                     lineno, TR_UUID_LEN);
            return -1;
        }
        strcpy(d->uuid, val);
    } else if (bit == 2u) {
        if (parse_u64(val, &num) || num == 0) {
            snprintf(err, errlen, "%s:%d: memory_bytes must be an integer 1..2^64-1", path,
                     lineno);
            return -1;
        }
        d->memory_bytes = num;
    } else if (bit == 8u) {
        /* 0 would let a context the core measured as free go uncharged. */
        if (parse_u64(val, &num) || num == 0) {
            snprintf(err, errlen, "%s:%d: context_floor_bytes must be an integer 1..2^64-1",
                     path, lineno);
            return -1;
        }
        d->context_floor_bytes = num;
    } else {
        if (parse_u64(val, &num) || num < 1 || num > 100) {
            snprintf(err, errlen, "%s:%d: compute_percent must be 1..100", path, lineno);
            return -1;
        }
        d->compute_percent = (uint32_t)num;
    }
    if (idx + 1 > cfg->device_count) cfg->device_count = (int)idx + 1;
    return 0;
}

static int check_whole(const tr_config_t *cfg, const unsigned *seen, int have, const char *path,
                       char *err, size_t errlen) {
    if (have != 3 || cfg->device_count == 0) {
        snprintf(err, errlen, "%s: needs version, claim and at least one device", path);
        return -1;
    }
    for (int i = 0; i < cfg->device_count; i++) {
        if (seen[i] != 15u) {
            snprintf(err, errlen,
                     "%s: device.%d needs uuid, memory_bytes and compute_percent, and "
                     "context_floor_bytes",
                     path, i);
            return -1;
        }
        for (int j = 0; j < i; j++) {
            if (strcmp(cfg->devices[i].uuid, cfg->devices[j].uuid) == 0) {
                snprintf(err, errlen, "%s: each device may appear only once (%s)", path,
                         cfg->devices[i].uuid);
                return -1;
            }
        }
    }
    return 0;
}

int tr_config_parse_file(const char *path, tr_config_t *cfg, char *err, size_t errlen) {
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, errlen, "cannot read slice config %s: %s", path, strerror(errno));
        return -1;
    }
    memset(cfg, 0, sizeof(*cfg));
    /* bit 0 uuid, 1 memory_bytes, 2 compute_percent, 3 context_floor_bytes; have: bit 0
     * version, 1 claim */
    unsigned seen[TR_MAX_DEVICES] = {0};
    int have = 0, lineno = 0, rc = -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    errno = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
        if (!line_chars_ok(line, (size_t)n)) {
            snprintf(err, errlen, "%s:%d: only printable ASCII and tabs are allowed", path,
                     lineno);
            goto out;
        }
        char *s = trim(line);
        if (*s == '\0' || *s == '#') continue;
        if (parse_line(s, cfg, seen, &have, path, lineno, err, errlen) != 0) goto out;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "cannot read slice config %s: %s", path, strerror(errno));
        goto out;
    }
    rc = check_whole(cfg, seen, have, path, err, errlen);
out:
    free(line);
    fclose(f);
    return rc;
}

int tr_config_load(tr_config_t *cfg, char *err, size_t errlen) {
    const char *path = CONFIG_PATH();
    struct stat st;
    if (lstat(path, &st) != 0 && errno == ENOENT) {
        snprintf(err, errlen,
                 "no slice config at %s: refusing to run the GPU unlimited; ask the operator "
                 "to check the claim's CDI mount", path);
        return -1;
    }
    /* Something is at the path (a dangling link, a directory, an unreadable file): it is the
     * authority and it is invalid; never treat it as absent. */
    return tr_config_parse_file(path, cfg, err, errlen);
}
