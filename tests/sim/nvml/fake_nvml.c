/*
 * fake_nvml.c - a fake libnvidia-ml.so.1 for tests, backed by a plain-text state file.
 *
 * Every NVML call re-reads the state file ($FAKE_NVML_STATE, default /etc/gpufleet-sim/nvml.state),
 * so a test can change the simulated hardware between two calls of one process.  Setters take an
 * exclusive flock on "<state>.lock", re-read, write "<state>.tmp.<pid>" and rename() it over the
 * state file.  See README.md next to this file for the keys.
 *
 * Signatures and struct layouts are compile-checked against NVIDIA's nvml.h (not in this repo).
 */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* we define the versioned symbols (and nvmlInit) by name */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Everything the header declares is exported; everything else is static or hidden (-fvisibility=hidden). */
#pragma GCC visibility push(default)
#include "nvml.h"
#pragma GCC visibility pop

#define DEFAULT_STATE_PATH "/etc/gpufleet-sim/nvml.state"
#define MAX_GPUS 64
#define MAX_UPDATES 8
#define KEY_MAX 192

/* ------------------------------------------------------------------------------------------------ */
/* State file                                                                                       */

struct kv {
    const char *key;
    const char *val;
};

struct state {
    char *raw;    /* file text as read, for rewriting */
    size_t rawlen;
    char *buf;    /* copy of raw, split in place into keys and values */
    struct kv *kv;
    size_t nkv;
    mode_t mode;  /* permission bits, kept when rewriting */
};

static void free_state(struct state *st)
{
    free(st->raw);
    free(st->buf);
    free(st->kv);
    memset(st, 0, sizeof(*st));
}

static char *trim(char *s)
{
    char *e;
    while (*s == ' ' || *s == '\t')
        s++;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
        *--e = '\0';
    return s;
}

static void parse_state(struct state *st)
{
    size_t cap = 0;
    char *line = st->buf;
    while (line && *line) {
        char *next = strchr(line, '\n');
        char *k, *eq;
        if (next)
            *next++ = '\0';
        k = trim(line);
        eq = strchr(k, '=');
        if (*k != '#' && eq) {
            *eq = '\0';
            if (st->nkv == cap) {
                struct kv *n;
                cap = cap ? cap * 2 : 256;
                n = realloc(st->kv, cap * sizeof(*n));
                if (!n)
                    return; /* out of memory: keep what we have */
                st->kv = n;
            }
            st->kv[st->nkv].key = trim(k);
            st->kv[st->nkv].val = trim(eq + 1);
            st->nkv++;
        }
        line = next;
    }
}

/* Returns 0, or -1 with errno set. */
static int load_state(struct state *st, const char *path)
{
    struct stat sb;
    size_t cap = 8192, len = 0;
    int fd;
    memset(st, 0, sizeof(*st));
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &sb) == 0) {
        st->mode = sb.st_mode & 07777;
        if ((size_t)sb.st_size + 1 > cap)
            cap = (size_t)sb.st_size + 1;
    } else {
        st->mode = 0644;
    }
    st->raw = malloc(cap);
    if (!st->raw)
        goto fail;
    for (;;) {
        ssize_t n;
        if (len + 1 >= cap) {
            char *r = realloc(st->raw, cap * 2);
            if (!r)
                goto fail;
            st->raw = r;
            cap *= 2;
        }
        n = read(fd, st->raw + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto fail;
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    st->raw[len] = '\0';
    st->rawlen = len;
    st->buf = malloc(len + 1);
    if (!st->buf) {
        free_state(st);
        errno = ENOMEM;
        return -1;
    }
    memcpy(st->buf, st->raw, len + 1);
    parse_state(st);
    return 0;
fail: {
    int e = errno;
    close(fd);
    free_state(st);
    errno = e;
    return -1;
}
}

static const char *lookup(const struct state *st, const char *key)
{
    size_t i = st->nkv;
    while (i-- > 0) /* the last occurrence wins */
        if (strcmp(st->kv[i].key, key) == 0)
            return st->kv[i].val;
    return NULL;
}

static const char *state_path(void)
{
    const char *p = getenv("FAKE_NVML_STATE");
    return (p && *p) ? p : DEFAULT_STATE_PATH;
}

/* ------------------------------------------------------------------------------------------------ */
/* Value parsing                                                                                    */

/* Decimal, or hex with a 0x prefix.  Returns 0 on success. */
static int parse_u64(const char *s, unsigned long long *out)
{
    char *end;
    int base = 10;
    if (!s || !*s || *s == '-' || *s == '+')
        return -1;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
        if (!*s)
            return -1;
    }
    errno = 0;
    *out = strtoull(s, &end, base);
    if (errno || *end)
        return -1;
    return 0;
}

/* Is name in the comma-separated list csv (items trimmed)? */
static int in_list(const char *csv, const char *name)
{
    size_t nlen = strlen(name);
    while (csv && *csv) {
        const char *e = strchr(csv, ',');
        const char *b = csv, *t;
        if (!e)
            e = csv + strlen(csv);
        while (b < e && (*b == ' ' || *b == '\t'))
            b++;
        t = e;
        while (t > b && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - b) == nlen && strncmp(b, name, nlen) == 0)
            return 1;
        csv = *e ? e + 1 : e;
    }
    return 0;
}

/* Parses a comma list of unsigned numbers.  Returns the count, or -1 if malformed.
 * Stores at most max values into out (out may be NULL). */
static long parse_num_list(const char *csv, unsigned long long *out, size_t max)
{
    long n = 0;
    char item[64];
    while (csv && *csv) {
        const char *e = strchr(csv, ',');
        size_t l;
        unsigned long long v;
        if (!e)
            e = csv + strlen(csv);
        l = (size_t)(e - csv);
        if (l >= sizeof(item))
            return -1;
        memcpy(item, csv, l);
        item[l] = '\0';
        if (*trim(item)) {
            if (parse_u64(trim(item), &v))
                return -1;
            if (out && (size_t)n < max)
                out[n] = v;
            n++;
        }
        csv = *e ? e + 1 : e;
    }
    return n;
}

static const struct {
    const char *name;
    nvmlReturn_t code;
} ERRORS[] = {
    {"Uninitialized", NVML_ERROR_UNINITIALIZED},
    {"InvalidArgument", NVML_ERROR_INVALID_ARGUMENT},
    {"NotSupported", NVML_ERROR_NOT_SUPPORTED},
    {"NoPermission", NVML_ERROR_NO_PERMISSION},
    {"AlreadyInitialized", NVML_ERROR_ALREADY_INITIALIZED},
    {"NotFound", NVML_ERROR_NOT_FOUND},
    {"InsufficientSize", NVML_ERROR_INSUFFICIENT_SIZE},
    {"InsufficientPower", NVML_ERROR_INSUFFICIENT_POWER},
    {"DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED},
    {"Timeout", NVML_ERROR_TIMEOUT},
    {"IrqIssue", NVML_ERROR_IRQ_ISSUE},
    {"LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND},
    {"FunctionNotFound", NVML_ERROR_FUNCTION_NOT_FOUND},
    {"CorruptedInforom", NVML_ERROR_CORRUPTED_INFOROM},
    {"GpuIsLost", NVML_ERROR_GPU_IS_LOST},
    {"ResetRequired", NVML_ERROR_RESET_REQUIRED},
    {"OperatingSystem", NVML_ERROR_OPERATING_SYSTEM},
    {"LibRmVersionMismatch", NVML_ERROR_LIB_RM_VERSION_MISMATCH},
    {"InUse", NVML_ERROR_IN_USE},
    {"Memory", NVML_ERROR_MEMORY},
    {"NoData", NVML_ERROR_NO_DATA},
    {"ArgumentVersionMismatch", NVML_ERROR_ARGUMENT_VERSION_MISMATCH},
    {"Unknown", NVML_ERROR_UNKNOWN},
};

/* Error name or number -> code; 0 (Success) means "no injection"; garbage -> Unknown. */
static nvmlReturn_t parse_error(const char *v)
{
    unsigned long long n;
    size_t i;
    if (!v || !*v)
        return NVML_SUCCESS;
    if (parse_u64(v, &n) == 0)
        return n > INT_MAX ? NVML_ERROR_UNKNOWN : (nvmlReturn_t)n;
    for (i = 0; i < sizeof(ERRORS) / sizeof(ERRORS[0]); i++)
        if (strcmp(v, ERRORS[i].name) == 0)
            return ERRORS[i].code;
    return NVML_ERROR_UNKNOWN;
}

/* ------------------------------------------------------------------------------------------------ */
/* Library state: init refcount and device handles                                                  */

struct nvmlDevice_st {
    unsigned char unused;
};
static struct nvmlDevice_st g_devs[MAX_GPUS];
static int g_refcount;
static struct timespec g_t0; /* first successful init: the clock of the "<counter>_per_s" keys */

static double seconds_since_init(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - g_t0.tv_sec) + (double)(now.tv_nsec - g_t0.tv_nsec) / 1e9;
}

static int handle_index(nvmlDevice_t dev)
{
    uintptr_t p = (uintptr_t)dev, base = (uintptr_t)g_devs;
    if (!dev || p < base || p >= base + sizeof(g_devs) || (p - base) % sizeof(g_devs[0]))
        return -1;
    return (int)((p - base) / sizeof(g_devs[0]));
}

static int initialized(void)
{
    return __atomic_load_n(&g_refcount, __ATOMIC_SEQ_CST) > 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* One NVML call                                                                                    */

struct call {
    const char *fn;    /* exported symbol name: used for "missing" and error injection */
    struct state st;
    int have_state;
    int gpu;           /* device index, -1 for system calls */
    int lockfd;        /* >= 0 while a setter holds the lock */
    int nupd;
    struct {
        char key[KEY_MAX];
        char val[64];
    } upd[MAX_UPDATES];
};

enum { F_NONE = 0, F_NO_INIT = 1, F_WRITE = 2 };

static const char *get(const struct call *c, const char *key)
{
    char k[KEY_MAX];
    if (c->gpu < 0)
        return lookup(&c->st, key);
    snprintf(k, sizeof(k), "gpu.%d.%s", c->gpu, key);
    return lookup(&c->st, k);
}

static nvmlReturn_t get_u64(const struct call *c, const char *key, unsigned long long *out)
{
    const char *v = get(c, key);
    if (!v || !*v)
        return NVML_ERROR_NOT_SUPPORTED;
    return parse_u64(v, out) ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

static nvmlReturn_t get_uint(const struct call *c, const char *key, unsigned int *out)
{
    unsigned long long v;
    nvmlReturn_t r;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    r = get_u64(c, key, &v);
    if (r == NVML_SUCCESS && v > UINT_MAX)
        r = NVML_ERROR_UNKNOWN;
    if (r == NVML_SUCCESS)
        *out = (unsigned int)v;
    return r;
}

static unsigned int gpu_count(const struct call *c)
{
    unsigned long long n = 0;
    const char *v = lookup(&c->st, "gpu_count");
    if (!v || parse_u64(v, &n))
        return 0;
    return n > MAX_GPUS ? MAX_GPUS : (unsigned int)n;
}

static nvmlReturn_t injected(const struct call *c, int gpu)
{
    char k[KEY_MAX];
    if (gpu < 0)
        snprintf(k, sizeof(k), "error.%s", c->fn);
    else
        snprintf(k, sizeof(k), "gpu.%d.error.%s", gpu, c->fn);
    return parse_error(lookup(&c->st, k));
}

static nvmlReturn_t enter(struct call *c, const char *fn, int flags)
{
    memset(c, 0, sizeof(*c));
    c->fn = fn;
    c->gpu = -1;
    c->lockfd = -1;
    c->have_state = load_state(&c->st, state_path()) == 0;
    if (c->have_state && in_list(lookup(&c->st, "missing"), fn))
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (!(flags & F_NO_INIT) && !initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!c->have_state)
        return NVML_ERROR_DRIVER_NOT_LOADED;
    return injected(c, -1);
}

static nvmlReturn_t lock_and_reload(struct call *c)
{
    char path[PATH_MAX];
    const char *sp = state_path();
    if (snprintf(path, sizeof(path), "%s.lock", sp) >= (int)sizeof(path))
        return NVML_ERROR_UNKNOWN;
    c->lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (c->lockfd < 0 && errno == EACCES) /* lock file made by another user: flock works read-only too */
        c->lockfd = open(path, O_RDONLY | O_CLOEXEC);
    if (c->lockfd < 0)
        return (errno == EACCES || errno == EPERM || errno == EROFS) ? NVML_ERROR_NO_PERMISSION
                                                                     : NVML_ERROR_UNKNOWN;
    while (flock(c->lockfd, LOCK_EX) != 0)
        if (errno != EINTR)
            return NVML_ERROR_UNKNOWN;
    free_state(&c->st);
    c->have_state = load_state(&c->st, sp) == 0;
    return c->have_state ? NVML_SUCCESS : NVML_ERROR_DRIVER_NOT_LOADED;
}

/* Device call: validates the handle, applies per-GPU injection and "lost"; for setters also
 * checks require_root and takes the lock. */
static nvmlReturn_t enter_dev(struct call *c, const char *fn, nvmlDevice_t dev, int flags)
{
    const char *v;
    nvmlReturn_t r = enter(c, fn, flags);
    int idx;
    if (r != NVML_SUCCESS)
        return r;
    idx = handle_index(dev);
    if (idx < 0 || (unsigned int)idx >= gpu_count(c))
        return NVML_ERROR_INVALID_ARGUMENT;
    c->gpu = idx;
    r = injected(c, idx);
    if (r != NVML_SUCCESS)
        return r;
    v = get(c, "lost");
    if (v && strcmp(v, "0") != 0 && *v)
        return NVML_ERROR_GPU_IS_LOST;
    if (flags & F_WRITE) {
        v = lookup(&c->st, "require_root");
        if (v && strcmp(v, "0") != 0 && *v && geteuid() != 0)
            return NVML_ERROR_NO_PERMISSION;
        r = lock_and_reload(c);
        if (r != NVML_SUCCESS)
            return r;
        if ((unsigned int)idx >= gpu_count(c))
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

static void set_update(struct call *c, const char *key, unsigned long long val)
{
    if (c->nupd >= MAX_UPDATES)
        return;
    snprintf(c->upd[c->nupd].key, KEY_MAX, "gpu.%d.%s", c->gpu, key);
    snprintf(c->upd[c->nupd].val, sizeof(c->upd[0].val), "%llu", val);
    c->nupd++;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Rewrites the state file with c->upd applied: lines keep their order and comments; an updated key
 * is rewritten in place (every occurrence), new keys are appended. */
static nvmlReturn_t write_state(struct call *c)
{
    char tmp[PATH_MAX], key[KEY_MAX];
    const char *sp = state_path();
    const char *line = c->st.raw, *end = c->st.raw + c->st.rawlen;
    int used[MAX_UPDATES] = {0};
    int fd, i, ok = 1;
    char out[KEY_MAX + 80];

    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", sp, (long)getpid()) >= (int)sizeof(tmp))
        return NVML_ERROR_UNKNOWN;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno == EACCES ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_UNKNOWN;
    (void)fchmod(fd, c->st.mode ? c->st.mode : 0644);

    while (ok && line < end) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        size_t len = nl ? (size_t)(nl - line) + 1 : (size_t)(end - line);
        int hit = -1;
        /* extract the key of this line, if it is a key=value line */
        const char *b = line, *eq = memchr(line, '=', len);
        while (b < line + len && (*b == ' ' || *b == '\t'))
            b++;
        if (eq && *b != '#') {
            const char *t = eq;
            while (t > b && (t[-1] == ' ' || t[-1] == '\t'))
                t--;
            if ((size_t)(t - b) < sizeof(key)) {
                memcpy(key, b, (size_t)(t - b));
                key[t - b] = '\0';
                for (i = 0; i < c->nupd; i++)
                    if (strcmp(key, c->upd[i].key) == 0)
                        hit = i;
            }
        }
        if (hit >= 0) {
            int n = snprintf(out, sizeof(out), "%s=%s\n", c->upd[hit].key, c->upd[hit].val);
            ok = write_all(fd, out, (size_t)n) == 0;
            used[hit] = 1;
        } else {
            ok = write_all(fd, line, len) == 0;
            if (ok && !nl)
                ok = write_all(fd, "\n", 1) == 0;
        }
        line += len;
    }
    for (i = 0; ok && i < c->nupd; i++) {
        int j, dup = 0;
        for (j = i + 1; j < c->nupd; j++)
            dup |= strcmp(c->upd[i].key, c->upd[j].key) == 0;
        if (!used[i] && !dup) {
            int n = snprintf(out, sizeof(out), "%s=%s\n", c->upd[i].key, c->upd[i].val);
            ok = write_all(fd, out, (size_t)n) == 0;
        }
    }
    if (close(fd) != 0)
        ok = 0;
    if (ok && rename(tmp, sp) == 0)
        return NVML_SUCCESS;
    unlink(tmp);
    return NVML_ERROR_UNKNOWN;
}

static nvmlReturn_t leave(struct call *c, nvmlReturn_t r)
{
    if (r == NVML_SUCCESS && c->lockfd >= 0 && c->nupd > 0)
        r = write_state(c);
    if (c->lockfd >= 0)
        close(c->lockfd); /* releases the flock */
    free_state(&c->st);
    return r;
}

/* ------------------------------------------------------------------------------------------------ */
/* Generic getters                                                                                  */

static nvmlReturn_t copy_str(const char *s, char *out, unsigned int len)
{
    size_t n;
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!s)
        return NVML_ERROR_NOT_SUPPORTED;
    n = strlen(s);
    if (n + 1 > len)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, s, n + 1);
    return NVML_SUCCESS;
}

static nvmlReturn_t sys_str(const char *fn, int flags, const char *key, char *out, unsigned int len)
{
    struct call c;
    nvmlReturn_t r = enter(&c, fn, flags);
    if (r == NVML_SUCCESS)
        r = copy_str(get(&c, key), out, len);
    return leave(&c, r);
}

static nvmlReturn_t dev_str(const char *fn, nvmlDevice_t dev, const char *key, char *out, unsigned int len)
{
    struct call c;
    nvmlReturn_t r = enter_dev(&c, fn, dev, F_NONE);
    if (r == NVML_SUCCESS)
        r = copy_str(get(&c, key), out, len);
    return leave(&c, r);
}

static nvmlReturn_t dev_uint(const char *fn, nvmlDevice_t dev, const char *key, unsigned int *out)
{
    struct call c;
    nvmlReturn_t r = enter_dev(&c, fn, dev, F_NONE);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, key, out);
    return leave(&c, r);
}

static nvmlReturn_t dev_enable(const char *fn, nvmlDevice_t dev, const char *key, nvmlEnableState_t *out)
{
    unsigned int v = 0;
    nvmlReturn_t r = dev_uint(fn, dev, key, out ? &v : NULL);
    if (r == NVML_SUCCESS)
        *out = v ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return r;
}

/* Two unsigned values, both keys required. */
static nvmlReturn_t dev_uint2(const char *fn, nvmlDevice_t dev, const char *k1, unsigned int *o1, const char *k2,
                              unsigned int *o2)
{
    struct call c;
    unsigned int a, b;
    nvmlReturn_t r = enter_dev(&c, fn, dev, F_NONE);
    if (r == NVML_SUCCESS && (!o1 || !o2))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = get_uint(&c, k1, &a);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, k2, &b);
    if (r == NVML_SUCCESS) {
        *o1 = a;
        *o2 = b;
    }
    return leave(&c, r);
}

/* ------------------------------------------------------------------------------------------------ */
/* Init, shutdown, errors, system                                                                   */

static nvmlReturn_t do_init(const char *fn)
{
    struct call c;
    nvmlReturn_t r = enter(&c, fn, F_NO_INIT);
    if (r == NVML_SUCCESS && __atomic_add_fetch(&g_refcount, 1, __ATOMIC_SEQ_CST) == 1)
        clock_gettime(CLOCK_MONOTONIC, &g_t0);
    return leave(&c, r);
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init(__func__);
}

nvmlReturn_t nvmlInit_v2(void)
{
    return do_init(__func__);
}

nvmlReturn_t nvmlInit(void)
{
    return do_init(__func__);
}

nvmlReturn_t nvmlShutdown(void)
{
    struct call c;
    nvmlReturn_t r = enter(&c, __func__, F_NO_INIT);
    int cur;
    if (r == NVML_ERROR_DRIVER_NOT_LOADED && !c.have_state)
        r = NVML_SUCCESS; /* the state file vanished: still allow a clean shutdown */
    if (r == NVML_SUCCESS) {
        cur = __atomic_load_n(&g_refcount, __ATOMIC_SEQ_CST);
        do {
            if (cur <= 0) {
                r = NVML_ERROR_UNINITIALIZED;
                break;
            }
        } while (!__atomic_compare_exchange_n(&g_refcount, &cur, cur - 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    }
    return leave(&c, r);
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    return sys_str(__func__, F_NONE, "driver_version", version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return sys_str(__func__, F_NO_INIT, "nvml_version", version, length);
}

static nvmlReturn_t cuda_version(const char *fn, int *out)
{
    struct call c;
    unsigned int v;
    nvmlReturn_t r = enter(&c, fn, F_NO_INIT);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, "cuda_driver_version", out ? &v : NULL);
    if (r == NVML_SUCCESS)
        *out = (int)v;
    return leave(&c, r);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return cuda_version(__func__, cudaDriverVersion);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return cuda_version(__func__, cudaDriverVersion);
}

/* ------------------------------------------------------------------------------------------------ */
/* Enumeration and identity                                                                         */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    struct call c;
    nvmlReturn_t r = enter(&c, __func__, F_NONE);
    if (r == NVML_SUCCESS && !deviceCount)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *deviceCount = gpu_count(&c);
    return leave(&c, r);
}

static nvmlReturn_t give_handle(struct call *c, unsigned int idx, nvmlDevice_t *device)
{
    nvmlReturn_t r = injected(c, (int)idx);
    if (r == NVML_SUCCESS)
        *device = &g_devs[idx];
    return r;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    struct call c;
    nvmlReturn_t r = enter(&c, __func__, F_NONE);
    if (r == NVML_SUCCESS && (!device || index >= gpu_count(&c)))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = give_handle(&c, index, device);
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    struct call c;
    unsigned int i, n;
    nvmlReturn_t r = enter(&c, __func__, F_NONE);
    if (r == NVML_SUCCESS && (!uuid || !device))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        r = NVML_ERROR_NOT_FOUND;
        for (i = 0, n = gpu_count(&c); i < n; i++) {
            char k[KEY_MAX];
            const char *v;
            snprintf(k, sizeof(k), "gpu.%u.uuid", i);
            v = lookup(&c.st, k);
            if (v && strcmp(v, uuid) == 0) {
                r = give_handle(&c, i, device);
                break;
            }
        }
    }
    return leave(&c, r);
}

/* "domain:bus:device.function", "domain:bus:device" or "bus:device.function" (hex). */
static int parse_bus_id(const char *s, unsigned int *dom, unsigned int *bus, unsigned int *dev, unsigned int *fn)
{
    unsigned int a, b, d, f;
    int n;
    if (!s)
        return -1;
    if (sscanf(s, "%x:%x:%x.%x%n", &a, &b, &d, &f, &n) == 4 && !s[n]) {
        *dom = a, *bus = b, *dev = d, *fn = f;
        return 0;
    }
    if (sscanf(s, "%x:%x:%x%n", &a, &b, &d, &n) == 3 && !s[n]) {
        *dom = a, *bus = b, *dev = d, *fn = 0;
        return 0;
    }
    if (sscanf(s, "%x:%x.%x%n", &b, &d, &f, &n) == 3 && !s[n]) {
        *dom = 0, *bus = b, *dev = d, *fn = f;
        return 0;
    }
    return -1;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    struct call c;
    unsigned int dom, bus, dev, fn, i, n;
    nvmlReturn_t r = enter(&c, __func__, F_NONE);
    if (r == NVML_SUCCESS && (!device || parse_bus_id(pciBusId, &dom, &bus, &dev, &fn)))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        r = NVML_ERROR_NOT_FOUND;
        for (i = 0, n = gpu_count(&c); i < n; i++) {
            char k[KEY_MAX];
            unsigned int d2, b2, v2, f2;
            snprintf(k, sizeof(k), "gpu.%u.pci_bus_id", i);
            if (parse_bus_id(lookup(&c.st, k), &d2, &b2, &v2, &f2) == 0 && d2 == dom && b2 == bus && v2 == dev &&
                f2 == fn) {
                r = give_handle(&c, i, device);
                break;
            }
        }
    }
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    struct call c;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS && !index)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        r = get_uint(&c, "index", index);
        if (r == NVML_ERROR_NOT_SUPPORTED) {
            *index = (unsigned int)c.gpu;
            r = NVML_SUCCESS;
        }
    }
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    return dev_str(__func__, device, "name", name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    return dev_str(__func__, device, "uuid", uuid, length);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    return dev_str(__func__, device, "serial", serial, length);
}

/* *pci zeroed, then its bus id (both forms), domain, bus and device from a parsed bus id. */
static void pci_bus_fields(nvmlPciInfo_t *pci, unsigned int dom, unsigned int bus, unsigned int dev, unsigned int fn)
{
    memset(pci, 0, sizeof(*pci));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", dom & 0xffff, bus, dev, fn);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X", dom, bus, dev, fn);
    pci->domain = dom;
    pci->bus = bus;
    pci->device = dev;
}

/* Fills the first `size` bytes of *out: the whole nvmlPciInfo_t for _v3; for _v2 the older, shorter layout
 * (busId[16] = today's busIdLegacy, the five ids, then four reserved words, zero), which old callers allocate. */
static nvmlReturn_t pci_info(const char *fname, nvmlDevice_t device, void *out, size_t size)
{
    nvmlPciInfo_t full, *pci = &full;
    struct call c;
    unsigned int dom, bus, dev, fn, did = 0, sid = 0;
    nvmlReturn_t r = enter_dev(&c, fname, device, F_NONE);
    if (r == NVML_SUCCESS && !out)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        const char *v = get(&c, "pci_bus_id");
        if (!v || !*v)
            r = NVML_ERROR_NOT_SUPPORTED;
        else if (parse_bus_id(v, &dom, &bus, &dev, &fn))
            r = NVML_ERROR_UNKNOWN;
    }
    if (r == NVML_SUCCESS) {
        nvmlReturn_t r2 = get_uint(&c, "pci_device_id", &did);
        if (r2 == NVML_SUCCESS || r2 == NVML_ERROR_NOT_SUPPORTED)
            r2 = get_uint(&c, "pci_subsystem_id", &sid);
        if (r2 == NVML_ERROR_UNKNOWN)
            r = r2;
    }
    if (r == NVML_SUCCESS) {
        pci_bus_fields(pci, dom, bus, dev, fn);
        pci->pciDeviceId = did;
        pci->pciSubSystemId = sid;
        memset(out, 0, size);
        memcpy(out, pci, size < sizeof(full) ? size : sizeof(full));
    }
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return pci_info(__func__, device, pci, sizeof(*pci));
}

/* The _v2 symbol stays in NVML's library for old callers (nvidia-ml-py3 7.352 binds it); same structure. */
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    /* busId[16] + domain, bus, device, pciDeviceId, pciSubSystemId + reserved0..3 */
    return pci_info(__func__, device, pci, offsetof(nvmlPciInfo_t, busId) + 4 * sizeof(unsigned int));
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    return dev_uint(__func__, device, "architecture", arch);
}

/* ------------------------------------------------------------------------------------------------ */
/* Memory, persistence, power, ECC                                                                  */

static nvmlReturn_t mem_info(struct call *c, unsigned long long *total, unsigned long long *used)
{
    nvmlReturn_t r = get_u64(c, "memory_total", total);
    if (r == NVML_SUCCESS)
        r = get_u64(c, "memory_used", used);
    if (r == NVML_SUCCESS && *used > *total)
        *used = *total;
    return r;
}

/* nvmlDeviceGetMemoryInfo_v2 as the function `fn` (the name calls are recorded and errors injected under). */
static nvmlReturn_t memory_info_v2(const char *fn, nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct call c;
    unsigned long long total, used;
    nvmlReturn_t r = enter_dev(&c, fn, device, F_NONE);
    if (r == NVML_SUCCESS && !memory)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && memory->version != nvmlMemory_v2)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS)
        r = mem_info(&c, &total, &used);
    if (r == NVML_SUCCESS) {
        memory->total = total;
        memory->reserved = 0;
        memory->used = used;
        memory->free = total - used;
    }
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
    nvmlReturn_t r = memory_info_v2(__func__, device, memory ? &m : NULL);
    if (r == NVML_SUCCESS) {
        memory->total = m.total;
        memory->used = m.used;
        memory->free = m.free;
    }
    return r;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    return memory_info_v2(__func__, device, memory);
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    return dev_enable(__func__, device, "persistence_mode", mode);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    return dev_uint(__func__, device, "power_usage_mw", power);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    unsigned int gpu = 0, mem = 0;
    nvmlReturn_t r = dev_uint2(__func__, device, "utilization_gpu", utilization ? &gpu : NULL, "utilization_memory",
                               utilization ? &mem : NULL);
    if (r == NVML_SUCCESS) {
        utilization->gpu = gpu;
        utilization->memory = mem;
    }
    return r;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    return dev_uint(__func__, device, "power_limit_mw", limit);
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *defaultLimit)
{
    return dev_uint(__func__, device, "power_default_limit_mw", defaultLimit);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                         unsigned int *maxLimit)
{
    return dev_uint2(__func__, device, "power_min_limit_mw", minLimit, "power_max_limit_mw", maxLimit);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return dev_uint(__func__, device, "enforced_power_limit_mw", limit);
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    unsigned int cur = 0, pend = 0;
    nvmlReturn_t r = dev_uint2(__func__, device, "ecc_current", current ? &cur : NULL, "ecc_pending",
                               pending ? &pend : NULL);
    if (r == NVML_SUCCESS) {
        *current = cur ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
        *pending = pend ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    }
    return r;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    static const char *const keys[2][2] = {
        {"ecc_volatile_corrected", "ecc_aggregate_corrected"},
        {"ecc_volatile_uncorrected", "ecc_aggregate_uncorrected"},
    };
    struct call c;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS && (!eccCounts || (unsigned int)errorType > 1 || (unsigned int)counterType > 1))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = get_u64(&c, keys[errorType][counterType], eccCounts);
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred)
{
    struct call c;
    unsigned int v[4];
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS && (!corrRows || !uncRows || !isPending || !failureOccurred))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = get_uint(&c, "remapped_corrected", &v[0]);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, "remapped_uncorrected", &v[1]);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, "remapped_pending", &v[2]);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, "remapped_failure", &v[3]);
    if (r == NVML_SUCCESS) {
        *corrRows = v[0];
        *uncRows = v[1];
        *isPending = v[2];
        *failureOccurred = v[3];
    }
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *pageCount,
                                       unsigned long long *addresses)
{
    struct call c;
    unsigned int n = 0, i;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS && (!pageCount || (unsigned int)cause > 1))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = get_uint(&c, cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? "retired_dbe" : "retired_sbe", &n);
    if (r == NVML_SUCCESS && *pageCount < n) {
        *pageCount = n;
        r = NVML_ERROR_INSUFFICIENT_SIZE;
    } else if (r == NVML_SUCCESS && n > 0 && !addresses) {
        r = NVML_ERROR_INVALID_ARGUMENT;
    } else if (r == NVML_SUCCESS) {
        for (i = 0; i < n; i++) /* fake, deterministic, page-aligned frame addresses */
            addresses[i] = 0x100000ULL * (unsigned long long)(c.gpu + 1) + 0x1000ULL * (2 * i + (unsigned)cause);
        *pageCount = n;
    }
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
    return dev_enable(__func__, device, "retired_pending", isPending);
}

/* ------------------------------------------------------------------------------------------------ */
/* Clocks                                                                                           */

static nvmlReturn_t clock_key(const char *fn, nvmlDevice_t device, nvmlClockType_t type, const char *const keys[4],
                              unsigned int *out)
{
    struct call c;
    nvmlReturn_t r = enter_dev(&c, fn, device, F_NONE);
    if (r == NVML_SUCCESS && (!out || (unsigned int)type >= NVML_CLOCK_COUNT))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = keys[type] ? get_uint(&c, keys[type], out) : NVML_ERROR_NOT_SUPPORTED;
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    static const char *const keys[4] = {"clock_graphics", "clock_sm", "clock_mem", "clock_video"};
    return clock_key(__func__, device, type, keys, clock);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    static const char *const keys[4] = {"max_clock_graphics", "max_clock_sm", "max_clock_mem", "max_clock_video"};
    return clock_key(__func__, device, type, keys, clock);
}

nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType, unsigned int *clockMHz)
{
    static const char *const keys[4] = {"app_clock_graphics", "app_clock_graphics", "app_clock_mem", NULL};
    return clock_key(__func__, device, clockType, keys, clockMHz);
}

nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                   unsigned int *clockMHz)
{
    static const char *const keys[4] = {"default_app_clock_graphics", "default_app_clock_graphics",
                                        "default_app_clock_mem", NULL};
    return clock_key(__func__, device, clockType, keys, clockMHz);
}

/* Is v in the comma list stored under key?  1 yes, 0 no, -1 key absent, -2 malformed. */
static int list_has(const struct call *c, const char *key, unsigned long long v)
{
    unsigned long long vals[1024];
    long n, i;
    const char *s = get(c, key);
    if (!s)
        return -1;
    n = parse_num_list(s, vals, 1024);
    if (n < 0 || n > 1024)
        return -2;
    for (i = 0; i < n; i++)
        if (vals[i] == v)
            return 1;
    return 0;
}

static nvmlReturn_t clock_list(struct call *c, const char *key, unsigned int *count, unsigned int *clocks)
{
    unsigned long long vals[1024];
    long n, i;
    const char *s = get(c, key);
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!s)
        return NVML_ERROR_NOT_SUPPORTED;
    n = parse_num_list(s, vals, 1024);
    if (n < 0 || n > 1024)
        return NVML_ERROR_UNKNOWN;
    if (*count < (unsigned long)n) {
        *count = (unsigned int)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0 && !clocks)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < n; i++) {
        if (vals[i] > UINT_MAX)
            return NVML_ERROR_UNKNOWN;
        clocks[i] = (unsigned int)vals[i];
    }
    *count = (unsigned int)n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count, unsigned int *clocksMHz)
{
    struct call c;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS)
        r = clock_list(&c, "supported_mem_clocks", count, clocksMHz);
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned int memoryClockMHz,
                                                  unsigned int *count, unsigned int *clocksMHz)
{
    struct call c;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS && !count)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        int has = list_has(&c, "supported_mem_clocks", memoryClockMHz);
        r = has == 1 ? NVML_SUCCESS
          : has == 0 ? NVML_ERROR_NOT_FOUND
          : has == -1 ? NVML_ERROR_NOT_SUPPORTED
                      : NVML_ERROR_UNKNOWN;
    }
    if (r == NVML_SUCCESS)
        r = clock_list(&c, "supported_graphics_clocks", count, clocksMHz);
    return leave(&c, r);
}

static nvmlReturn_t event_reasons(const char *fn, nvmlDevice_t device, unsigned long long *out)
{
    struct call c;
    nvmlReturn_t r = enter_dev(&c, fn, device, F_NONE);
    if (r == NVML_SUCCESS && !out)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = get_u64(&c, "clocks_event_reasons", out);
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *clocksEventReasons)
{
    return event_reasons(__func__, device, clocksEventReasons);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *clocksThrottleReasons)
{
    return event_reasons(__func__, device, clocksThrottleReasons);
}

/* ------------------------------------------------------------------------------------------------ */
/* Temperature, PCIe, modes, topology, processes                                                    */

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp)
{
    struct call c;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS && (!temp || (unsigned int)sensorType >= NVML_TEMPERATURE_COUNT))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = sensorType == NVML_TEMPERATURE_GPU ? get_uint(&c, "temperature", temp) : NVML_ERROR_NOT_SUPPORTED;
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                               unsigned int *temp)
{
    static const char *const keys[4] = {"temp_shutdown", "temp_slowdown", "temp_mem_max", "temp_gpu_max"};
    struct call c;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS && (!temp || (unsigned int)thresholdType >= NVML_TEMPERATURE_THRESHOLD_COUNT))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = (unsigned int)thresholdType < 4 ? get_uint(&c, keys[thresholdType], temp) : NVML_ERROR_NOT_SUPPORTED;
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
    return dev_uint(__func__, device, "pcie_gen_current", currLinkGen);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
    return dev_uint(__func__, device, "pcie_width_current", currLinkWidth);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
    return dev_uint(__func__, device, "pcie_gen_max", maxLinkGen);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
    return dev_uint(__func__, device, "pcie_width_max", maxLinkWidth);
}

nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGenDevice)
{
    return dev_uint(__func__, device, "pcie_gen_max", maxLinkGenDevice);
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    unsigned int v = 0;
    nvmlReturn_t r = dev_uint(__func__, device, "compute_mode", mode ? &v : NULL);
    if (r == NVML_SUCCESS)
        *mode = (nvmlComputeMode_t)v;
    return r;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    return dev_uint2(__func__, device, "mig_current", currentMode, "mig_pending", pendingMode);
}

/* Whether `link` is one of the GPU's NVLinks ("nvlink_count"): NotSupported without NVLink, InvalidArgument past the
 * last link. */
static nvmlReturn_t nvlink_index(const struct call *c, unsigned int link)
{
    unsigned int n = 0;
    nvmlReturn_t r = get_uint(c, "nvlink_count", &n);
    if (r == NVML_SUCCESS && n == 0)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && link >= n)
        r = NVML_ERROR_INVALID_ARGUMENT;
    return r;
}

/* A per-link NVLink query's checks, in NVML's order: the device, a result pointer, a link the GPU has. */
static nvmlReturn_t enter_link(struct call *c, const char *fn, nvmlDevice_t device, const void *out, unsigned int link)
{
    nvmlReturn_t r = enter_dev(c, fn, device, F_NONE);
    if (r == NVML_SUCCESS && !out)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = nvlink_index(c, link);
    return r;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    struct call c;
    nvmlReturn_t r = enter_link(&c, __func__, device, isActive, link);
    if (r == NVML_SUCCESS) {
        int down = list_has(&c, "nvlink_down", link);
        if (down == -2)
            r = NVML_ERROR_UNKNOWN;
        else
            *isActive = down == 1 ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
    }
    return leave(&c, r);
}

/* The PCI function at the far end of NVLink `link`: item `link` of the comma list "nvlink_remote" (bus ids, e.g. an
 * NVSwitch "00000000:05:00.0" or the peer GPU). Absent/empty key, or an empty item: NotSupported; link >= count:
 * InvalidArgument; a malformed item: Unknown. */
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    struct call c;
    unsigned int i = 0, dom = 0, bus = 0, dev = 0, fn = 0;
    char item[64];
    const char *v = NULL;
    nvmlReturn_t r = enter_link(&c, __func__, device, pci, link);
    if (r == NVML_SUCCESS) {
        v = get(&c, "nvlink_remote");
        if (!v || !*v)
            r = NVML_ERROR_NOT_SUPPORTED;
    }
    while (r == NVML_SUCCESS && i < link) { /* skip to item `link` */
        v = strchr(v, ',');
        if (!v)
            r = NVML_ERROR_NOT_SUPPORTED;
        else
            v++, i++;
    }
    if (r == NVML_SUCCESS) {
        const char *e = strchr(v, ',');
        size_t l = e ? (size_t)(e - v) : strlen(v);
        if (l >= sizeof(item)) {
            r = NVML_ERROR_UNKNOWN;
        } else {
            memcpy(item, v, l);
            item[l] = '\0';
            if (!*trim(item))
                r = NVML_ERROR_NOT_SUPPORTED;
            else if (parse_bus_id(trim(item), &dom, &bus, &dev, &fn))
                r = NVML_ERROR_UNKNOWN;
        }
    }
    if (r == NVML_SUCCESS) {
        pci_bus_fields(pci, dom, bus, dev, fn);
    }
    return leave(&c, r);
}

/* Item i of a comma list of numbers ("0,0,5": item 2 is 5; items past the end are 0).
 * Absent or empty key: NotSupported; malformed: Unknown. */
static nvmlReturn_t list_item(const struct call *c, const char *key, unsigned int i, unsigned long long *out)
{
    unsigned long long vals[64];
    const char *v = get(c, key);
    long n;
    if (!v || !*v)
        return NVML_ERROR_NOT_SUPPORTED;
    n = parse_num_list(v, vals, 64);
    if (n < 0)
        return NVML_ERROR_UNKNOWN;
    *out = (i < 64 && (long)i < n) ? vals[i] : 0;
    return NVML_SUCCESS;
}

/* A cumulative hardware counter: "<key>" (comma list, item i) plus "<key>_per_s" (comma list, item i:
 * increase per second since the process's first nvmlInit; absent = 0), so two reads some time apart
 * see the counter rise as a real one does. */
static nvmlReturn_t counter(const struct call *c, const char *key, unsigned int i, unsigned long long *out)
{
    char rate_key[KEY_MAX];
    unsigned long long base = 0, rate = 0;
    nvmlReturn_t r = list_item(c, key, i, &base);
    if (r != NVML_SUCCESS)
        return r;
    snprintf(rate_key, sizeof(rate_key), "%s_per_s", key);
    r = list_item(c, rate_key, i, &rate);
    if (r == NVML_ERROR_UNKNOWN)
        return r;
    *out = base + (r == NVML_SUCCESS ? (unsigned long long)((double)rate * seconds_since_init()) : 0);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, nvmlNvLinkErrorCounter_t counter_id,
                                             unsigned long long *counterValue)
{
    static const char *const keys[] = {"nvlink_replay", "nvlink_recovery", "nvlink_crc_flit", "nvlink_crc_data",
                                       "nvlink_ecc_data"};
    struct call c;
    nvmlReturn_t r = enter_link(&c, __func__, device, counterValue, link);
    if (r == NVML_SUCCESS && (unsigned int)counter_id >= sizeof(keys) / sizeof(keys[0]))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = counter(&c, keys[counter_id], link, counterValue);
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    struct call c;
    unsigned long long v = 0;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS && !value)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = counter(&c, "pcie_replay", 0, &v);
    if (r == NVML_SUCCESS)
        *value = (unsigned int)v; /* a 32-bit counter in NVML: it wraps */
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    return dev_str(__func__, device, "vbios_version", version, length);
}

/* Fabric probe state, error status and (V) health mask/summary: "fabric_state" absent = NotSupported. */
static nvmlReturn_t fabric(const struct call *c, nvmlReturn_t *status, unsigned int *clique, unsigned char *state,
                           unsigned int *mask, unsigned char *summary)
{
    unsigned int st = 0, v = 0;
    nvmlReturn_t r = get_uint(c, "fabric_state", &st);
    if (r != NVML_SUCCESS)
        return r;
    if (st > 255)
        return NVML_ERROR_UNKNOWN;
    *state = (unsigned char)st;
    *status = parse_error(get(c, "fabric_status"));
    *clique = get_uint(c, "fabric_clique_id", &v) == NVML_SUCCESS ? v : 0;
    if (mask)
        *mask = get_uint(c, "fabric_health_mask", &v) == NVML_SUCCESS ? v : 0;
    if (summary)
        *summary = get_uint(c, "fabric_health_summary", &v) == NVML_SUCCESS ? (unsigned char)v : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo)
{
    struct call c;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS && !gpuFabricInfo)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        nvmlGpuFabricInfo_t out;
        memset(&out, 0, sizeof(out));
        r = fabric(&c, &out.status, &out.cliqueId, &out.state, NULL, NULL);
        if (r == NVML_SUCCESS)
            *gpuFabricInfo = out;
    }
    return leave(&c, r);
}

/* Accepts nvmlGpuFabricInfo_v2 (what pynvml passes) and _v3 (nvmlGpuFabricInfoV_t in nvml.h). */
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo)
{
    struct call c;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS && !gpuFabricInfo)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && gpuFabricInfo->version != nvmlGpuFabricInfo_v2 &&
        gpuFabricInfo->version != nvmlGpuFabricInfo_v3)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS && gpuFabricInfo->version == nvmlGpuFabricInfo_v2) {
        nvmlGpuFabricInfo_v2_t out;
        memset(&out, 0, sizeof(out));
        out.version = nvmlGpuFabricInfo_v2;
        r = fabric(&c, &out.status, &out.cliqueId, &out.state, &out.healthMask, NULL);
        if (r == NVML_SUCCESS)
            memcpy(gpuFabricInfo, &out, sizeof(out));
    } else if (r == NVML_SUCCESS) {
        nvmlGpuFabricInfo_v3_t out;
        memset(&out, 0, sizeof(out));
        out.version = nvmlGpuFabricInfo_v3;
        r = fabric(&c, &out.status, &out.cliqueId, &out.state, &out.healthMask, &out.healthSummary);
        if (r == NVML_SUCCESS)
            *gpuFabricInfo = out;
    }
    return leave(&c, r);
}

/* Field values: NVML_FI_DEV_GET_GPU_RECOVERY_ACTION ("recovery_action") and NVML_FI_DEV_NVLINK_LINK_COUNT
 * ("nvlink_count"; "nvlink_count_field" overrides what the field says, an error name makes the slot fail) are
 * simulated; every other field comes back with nvmlReturn NotSupported in its own slot, as NVML does for fields a
 * GPU lacks. */
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    struct call c;
    int i;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS && (valuesCount < 0 || (valuesCount > 0 && !values)))
        r = NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; r == NVML_SUCCESS && i < valuesCount; i++) {
        struct timespec now;
        unsigned int v = 0;
        nvmlFieldValue_t *f = &values[i];
        clock_gettime(CLOCK_REALTIME, &now);
        f->timestamp = (long long)now.tv_sec * 1000000LL + now.tv_nsec / 1000;
        f->latencyUsec = 0;
        f->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        memset(&f->value, 0, sizeof(f->value));
        if (f->fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) {
            f->nvmlReturn = get_uint(&c, "recovery_action", &v);
            f->value.uiVal = v;
        } else if (f->fieldId == NVML_FI_DEV_NVLINK_LINK_COUNT) {
            const char *o = get(&c, "nvlink_count_field");
            if (o && *o && (*o < '0' || *o > '9'))
                f->nvmlReturn = parse_error(o);
            else
                f->nvmlReturn = get_uint(&c, o && *o ? "nvlink_count_field" : "nvlink_count", &v);
            f->value.uiVal = v;
        } else {
            f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return leave(&c, r);
}

/* cpulist like "0-55,112-167" -> bitmask; returns 0 or -1 if malformed. */
static int parse_cpulist(const char *s, unsigned long *set, unsigned int words)
{
    const unsigned long bits = sizeof(unsigned long) * 8;
    while (*s) {
        char *end;
        unsigned long a, b, i;
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s)
            break;
        if (*s < '0' || *s > '9')
            return -1;
        a = strtoul(s, &end, 10);
        b = a;
        if (*end == '-') {
            if (end[1] < '0' || end[1] > '9')
                return -1;
            b = strtoul(end + 1, &end, 10);
        }
        if (b < a || (*end && *end != ',' && *end != ' '))
            return -1;
        for (i = a; i <= b && i / bits < words; i++)
            set[i / bits] |= 1UL << (i % bits);
        s = end;
    }
    return 0;
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet)
{
    struct call c;
    const char *v;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_NONE);
    if (r == NVML_SUCCESS && (!cpuSet || cpuSetSize == 0))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        v = get(&c, "cpu_affinity");
        if (!v || !*v) {
            r = NVML_ERROR_NOT_SUPPORTED;
        } else {
            memset(cpuSet, 0, sizeof(unsigned long) * cpuSetSize);
            if (parse_cpulist(v, cpuSet, cpuSetSize))
                r = NVML_ERROR_UNKNOWN;
        }
    }
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    return dev_uint(__func__, device, "numa_node", node);
}

static nvmlReturn_t processes(const char *fn, nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos,
                              nvmlProcessInfo_v1_t *infos_v1)
{
    struct call c;
    const char *s;
    nvmlReturn_t r = enter_dev(&c, fn, device, F_NONE);
    if (r == NVML_SUCCESS && !infoCount)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && !(s = get(&c, "processes")))
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        unsigned int n = 0, pass;
        /* pass 0 counts and validates, pass 1 fills */
        for (pass = 0; pass < 2 && r == NVML_SUCCESS; pass++) {
            const char *p = s;
            n = 0;
            while (*p) {
                char item[96], *colon;
                const char *e = strchr(p, ',');
                size_t l;
                unsigned long long pid, used;
                if (!e)
                    e = p + strlen(p);
                l = (size_t)(e - p);
                p = *e ? e + 1 : e;
                if (l >= sizeof(item)) {
                    r = NVML_ERROR_UNKNOWN;
                    break;
                }
                memcpy(item, e - l, l);
                item[l] = '\0';
                if (!*trim(item))
                    continue;
                colon = strchr(item, ':');
                if (!colon) {
                    r = NVML_ERROR_UNKNOWN;
                    break;
                }
                *colon = '\0';
                if (parse_u64(trim(item), &pid) || parse_u64(trim(colon + 1), &used) || pid > UINT_MAX) {
                    r = NVML_ERROR_UNKNOWN;
                    break;
                }
                if (pass == 1 && infos_v1) {
                    infos_v1[n].pid = (unsigned int)pid;
                    infos_v1[n].usedGpuMemory = used;
                } else if (pass == 1) {
                    infos[n].pid = (unsigned int)pid;
                    infos[n].usedGpuMemory = used;
                    infos[n].gpuInstanceId = 0xFFFFFFFFu;
                    infos[n].computeInstanceId = 0xFFFFFFFFu;
                }
                n++;
            }
            if (pass == 0 && r == NVML_SUCCESS) {
                if (*infoCount < n) {
                    *infoCount = n;
                    r = NVML_ERROR_INSUFFICIENT_SIZE;
                } else if (n > 0 && !infos && !infos_v1) {
                    r = NVML_ERROR_INVALID_ARGUMENT;
                } else if (n == 0) {
                    break;
                }
            }
        }
        if (r == NVML_SUCCESS)
            *infoCount = n;
    }
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    return processes(__func__, device, infoCount, infos, NULL);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos)
{
    return processes(__func__, device, infoCount, infos, NULL);
}

/* The unversioned (v1) symbol stays in NVML's library for old callers (nvidia-ml-py before 11.495 binds it). */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
    return processes(__func__, device, infoCount, NULL, infos);
}

/* ------------------------------------------------------------------------------------------------ */
/* Setters: enter_dev(F_WRITE) holds the lock and a fresh state; leave() writes c.upd on success.     */

/* An enabled/disabled setting (persistence, ECC): NotSupported where the state has no `current` value (Unknown when
 * it is malformed); else `key` takes `state`, 0 or 1 (anything else is InvalidArgument). */
static nvmlReturn_t set_enable_state(const char *fname, nvmlDevice_t device, const char *current, const char *key,
                                     nvmlEnableState_t state)
{
    struct call c;
    unsigned int cur;
    nvmlReturn_t r = enter_dev(&c, fname, device, F_WRITE);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, current, &cur);
    if (r == NVML_SUCCESS && (unsigned int)state > 1)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        set_update(&c, key, (unsigned int)state);
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t mode)
{
    return set_enable_state(__func__, device, "persistence_mode", "persistence_mode", mode);
}

nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned int limit)
{
    struct call c;
    unsigned int lo, hi;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_WRITE);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, "power_min_limit_mw", &lo);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, "power_max_limit_mw", &hi);
    if (r == NVML_SUCCESS && (limit < lo || limit > hi))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        set_update(&c, "power_limit_mw", limit);
        set_update(&c, "enforced_power_limit_mw", limit);
    }
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode)
{
    struct call c;
    unsigned int cur;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_WRITE);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, "compute_mode", &cur);
    if (r == NVML_SUCCESS && mode != NVML_COMPUTEMODE_DEFAULT && mode != NVML_COMPUTEMODE_PROHIBITED &&
        mode != NVML_COMPUTEMODE_EXCLUSIVE_PROCESS)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        set_update(&c, "compute_mode", (unsigned int)mode);
    return leave(&c, r);
}

/* The end of a call that sets application clocks: the new pair once every check passed. */
static nvmlReturn_t leave_app_clocks(struct call *c, nvmlReturn_t r, unsigned int mem, unsigned int graphics)
{
    if (r == NVML_SUCCESS) {
        set_update(c, "app_clock_mem", mem);
        set_update(c, "app_clock_graphics", graphics);
    }
    return leave(c, r);
}

nvmlReturn_t nvmlDeviceSetApplicationsClocks(nvmlDevice_t device, unsigned int memClockMHz,
                                             unsigned int graphicsClockMHz)
{
    struct call c;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_WRITE);
    if (r == NVML_SUCCESS) {
        int m = list_has(&c, "supported_mem_clocks", memClockMHz);
        int g = list_has(&c, "supported_graphics_clocks", graphicsClockMHz);
        if (m == -1 || g == -1 || !get(&c, "app_clock_mem") || !get(&c, "app_clock_graphics"))
            r = NVML_ERROR_NOT_SUPPORTED;
        else if (m == -2 || g == -2)
            r = NVML_ERROR_UNKNOWN;
        else if (!m || !g)
            r = NVML_ERROR_INVALID_ARGUMENT;
    }
    return leave_app_clocks(&c, r, memClockMHz, graphicsClockMHz);
}

nvmlReturn_t nvmlDeviceResetApplicationsClocks(nvmlDevice_t device)
{
    struct call c;
    unsigned int mem = 0, gr = 0;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_WRITE);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, "default_app_clock_mem", &mem);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, "default_app_clock_graphics", &gr);
    return leave_app_clocks(&c, r, mem, gr);
}

/* Locks the GPU clock to [lo, hi] MHz ("0, 0": unlocked), as `fn`; NotSupported where the GPU has no graphics
 * clock range (max_clock_graphics absent), InvalidArgument for lo > hi or hi above it. */
static nvmlReturn_t locked_clocks(const char *fn, nvmlDevice_t device, unsigned int lo, unsigned int hi)
{
    struct call c;
    unsigned int top;
    nvmlReturn_t r = enter_dev(&c, fn, device, F_WRITE);
    if (r == NVML_SUCCESS)
        r = get_uint(&c, "max_clock_graphics", &top);
    if (r == NVML_SUCCESS && (lo > hi || hi > top))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        set_update(&c, "locked_clock_min", lo);
        set_update(&c, "locked_clock_max", hi);
    }
    return leave(&c, r);
}

nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned int minGpuClockMHz,
                                          unsigned int maxGpuClockMHz)
{
    return locked_clocks(__func__, device, minGpuClockMHz, maxGpuClockMHz);
}

nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device)
{
    return locked_clocks(__func__, device, 0, 0);
}

nvmlReturn_t nvmlDeviceSetEccMode(nvmlDevice_t device, nvmlEnableState_t ecc)
{
    return set_enable_state(__func__, device, "ecc_current", "ecc_pending", ecc); /* pending until a reset */
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus)
{
    struct call c;
    unsigned int cur;
    nvmlReturn_t r = enter_dev(&c, __func__, device, F_WRITE);
    if (r == NVML_SUCCESS && !activationStatus)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = get_uint(&c, "mig_current", &cur);
    if (r == NVML_SUCCESS && mode > 1)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        set_update(&c, "mig_pending", mode);
        *activationStatus = NVML_SUCCESS;
    }
    return leave(&c, r);
}
