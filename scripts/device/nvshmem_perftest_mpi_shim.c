/*
 * A stand-in for Open MPI's libmpi.so.40, just enough for NVSHMEM's perftests to bootstrap by
 * unique id on a machine that has no MPI (scripts/device/nvshmem-perftest.sh builds and uses it).
 *
 * NVSHMEM's perftest/common/utils.cu, built with NVSHMEMTEST_MPI_SUPPORT and run with
 * NVSHMEMTEST_USE_UID_BOOTSTRAP=1 (and NVSHMEMTEST_USE_MPI_LAUNCHER unset), does
 *   dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL | RTLD_DEEPBIND)
 *   dlsym: MPI_Init, MPI_Bcast, MPI_Comm_rank, MPI_Comm_size, MPI_Finalize (functions),
 *          ompi_mpi_comm_world, ompi_mpi_uint8_t (data: their addresses are MPI_COMM_WORLD and
 *          MPI_UINT8_T, as in Open MPI)
 * and uses MPI only to broadcast the nvshmemx_uniqueid_t that rank 0 made to the other ranks;
 * NVSHMEM itself then bootstraps over its own sockets (nvshmem_bootstrap_uid.so). This file
 * provides exactly those, plus MPI_Barrier, MPI_Abort, MPI_Initialized and MPI_Finalized.
 *
 * The world: N processes started by the script, each with
 *   SHIM_RANK   this process's rank, 0 .. SHIM_SIZE-1
 *   SHIM_SIZE   the number of processes (unset: a world of one, rank 0, as MPI's singleton init)
 *   SHIM_DIR    a folder shared by the N processes, empty at the start, removed by the launcher
 *   SHIM_TIMEOUT_S  how long a rank waits for the others (default 60 s)
 *   SHIM_VERBOSE=1  one line on stderr per call
 * MPI_Bcast: the root writes the bytes to SHIM_DIR/.bcast.<n>.tmp and renames it to
 *   SHIM_DIR/bcast.<n> (atomic: a reader sees the whole file or none); the others poll for that
 *   file (1 ms) and read it. <n> counts this process's broadcasts, so successive broadcasts use
 *   successive files, as MPI's collectives match by call order.
 * MPI_Barrier: each rank creates SHIM_DIR/barrier.<n>.<rank> and waits until all N exist.
 * Every error is fatal (MPI_ERRORS_ARE_FATAL, MPI's default): a line on stderr and _exit(1),
 * also when a rank waits longer than SHIM_TIMEOUT_S (the peer died or was never started).
 * Only MPI_COMM_WORLD (and MPI_COMM_SELF) and the byte-sized types (MPI_UINT8_T, MPI_BYTE,
 * MPI_CHAR) plus MPI_INT are known. Not thread safe (nor need it be: utils.cu calls from main).
 *
 * This file is also the mpi.h that utils.h includes (the script copies it there): compiled
 * without NVSHMEM_MPI_SHIM_IMPL it only declares the types, which are Open MPI's (pointers to
 * incomplete structs, so that utils.cu's (MPI_Comm)dlsym(...) casts compile).
 *
 * Build: gcc -O2 -shared -fPIC -DNVSHMEM_MPI_SHIM_IMPL -Wl,-soname,libmpi.so.40 \
 *            -o libmpi.so.40 scripts/device/nvshmem_perftest_mpi_shim.c
 * Test:  bash scripts/device/nvshmem-perftest.sh --shim-test   (no GPU needed)
 */
#ifndef NVSHMEM_PERFTEST_MPI_SHIM_H
#define NVSHMEM_PERFTEST_MPI_SHIM_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ompi_communicator_t *MPI_Comm;
typedef struct ompi_datatype_t *MPI_Datatype;

#define MPI_SUCCESS 0
#define MPI_ERR_OTHER 16

int MPI_Init(int *argc, char ***argv);
int MPI_Initialized(int *flag);
int MPI_Finalized(int *flag);
int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int MPI_Barrier(MPI_Comm comm);
int MPI_Abort(MPI_Comm comm, int errorcode);
int MPI_Finalize(void);

#ifdef __cplusplus
}
#endif

#endif /* NVSHMEM_PERFTEST_MPI_SHIM_H */

#ifdef NVSHMEM_MPI_SHIM_IMPL

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHIM_EXPORT __attribute__((visibility("default")))
#define SHIM_MAGIC 0x5348494d /* "SHIM" */

struct ompi_communicator_t {
    int magic;
    int world; /* 1: MPI_COMM_WORLD, 0: MPI_COMM_SELF */
    char pad[504];
};
struct ompi_datatype_t {
    int magic;
    int size;
    const char *name;
    char pad[496];
};

SHIM_EXPORT struct ompi_communicator_t ompi_mpi_comm_world = {SHIM_MAGIC, 1, {0}};
SHIM_EXPORT struct ompi_communicator_t ompi_mpi_comm_self = {SHIM_MAGIC, 0, {0}};
SHIM_EXPORT struct ompi_datatype_t ompi_mpi_uint8_t = {SHIM_MAGIC, 1, "MPI_UINT8_T", {0}};
SHIM_EXPORT struct ompi_datatype_t ompi_mpi_byte = {SHIM_MAGIC, 1, "MPI_BYTE", {0}};
SHIM_EXPORT struct ompi_datatype_t ompi_mpi_char = {SHIM_MAGIC, 1, "MPI_CHAR", {0}};
SHIM_EXPORT struct ompi_datatype_t ompi_mpi_int = {SHIM_MAGIC, (int)sizeof(int), "MPI_INT", {0}};

static struct {
    int initialized, finalized, rank, size, verbose;
    double timeout_s;
    char dir[PATH_MAX];
    unsigned long bcasts, barriers;
} shim = {0, 0, 0, 1, 0, 60.0, "", 0, 0};

static void vsay(const char *what, const char *fmt, va_list ap) {
    fprintf(stderr, "[mpi-shim %d/%d pid %d] %s", shim.rank, shim.size, (int)getpid(), what);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
}

static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsay("", fmt, ap);
    va_end(ap);
}

#define TRACE(...) \
    do {           \
        if (shim.verbose) say(__VA_ARGS__); \
    } while (0)

__attribute__((noreturn)) static void fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsay("FATAL: ", fmt, ap);
    va_end(ap);
    _exit(1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap(void) {
    struct timespec ts = {0, 1000000}; /* 1 ms */
    nanosleep(&ts, NULL);
}

static long env_long(const char *name, long fallback) {
    const char *v = getenv(name);
    char *end;
    long x;
    if (!v || !*v) return fallback;
    errno = 0;
    x = strtol(v, &end, 10);
    if (errno || *end) fatal("%s=%s is not a whole number", name, v);
    return x;
}

static void check_ready(const char *fn) {
    if (!shim.initialized) fatal("%s called before MPI_Init", fn);
    if (shim.finalized) fatal("%s called after MPI_Finalize", fn);
}

static void check_comm(MPI_Comm comm, const char *fn) {
    if (!comm || comm->magic != SHIM_MAGIC)
        fatal("%s: unknown communicator %p (only MPI_COMM_WORLD = &ompi_mpi_comm_world and "
              "MPI_COMM_SELF)", fn, (void *)comm);
}

static void path_of(char *out, size_t len, const char *fmt, unsigned long n, int r) {
    int k = snprintf(out, len, "%s/", shim.dir);
    if (k < 0 || (size_t)k >= len) fatal("SHIM_DIR path too long");
    k = snprintf(out + k, len - (size_t)k, fmt, n, r);
    if (k < 0) fatal("path formatting failed");
}

SHIM_EXPORT int MPI_Init(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (shim.initialized) fatal("MPI_Init called twice");
    shim.verbose = (int)env_long("SHIM_VERBOSE", 0);
    if (getenv("SHIM_SIZE") && *getenv("SHIM_SIZE")) {
        shim.size = (int)env_long("SHIM_SIZE", 1);
        shim.rank = (int)env_long("SHIM_RANK", -1);
    } else { /* no launcher: a world of one */
        shim.size = 1;
        shim.rank = (int)env_long("SHIM_RANK", 0);
    }
    if (shim.size < 1) fatal("SHIM_SIZE=%d: must be at least 1", shim.size);
    if (shim.rank < 0 || shim.rank >= shim.size)
        fatal("SHIM_RANK must be set to 0..%d (got %d)", shim.size - 1, shim.rank);
    shim.timeout_s = (double)env_long("SHIM_TIMEOUT_S", 60);
    if (shim.size > 1) {
        const char *d = getenv("SHIM_DIR");
        struct stat st;
        if (!d || !*d) fatal("SHIM_DIR must name a folder shared by the %d ranks", shim.size);
        if (strlen(d) + 64 >= sizeof(shim.dir)) fatal("SHIM_DIR is too long");
        if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) fatal("SHIM_DIR=%s is not a folder", d);
        strcpy(shim.dir, d);
    }
    shim.initialized = 1;
    TRACE("MPI_Init: rank %d of %d, dir '%s', timeout %.0f s", shim.rank, shim.size, shim.dir,
          shim.timeout_s);
    return MPI_SUCCESS;
}

SHIM_EXPORT int MPI_Initialized(int *flag) {
    *flag = shim.initialized;
    return MPI_SUCCESS;
}

SHIM_EXPORT int MPI_Finalized(int *flag) {
    *flag = shim.finalized;
    return MPI_SUCCESS;
}

SHIM_EXPORT int MPI_Comm_rank(MPI_Comm comm, int *rank) {
    check_ready("MPI_Comm_rank");
    check_comm(comm, "MPI_Comm_rank");
    *rank = comm->world ? shim.rank : 0;
    return MPI_SUCCESS;
}

SHIM_EXPORT int MPI_Comm_size(MPI_Comm comm, int *size) {
    check_ready("MPI_Comm_size");
    check_comm(comm, "MPI_Comm_size");
    *size = comm->world ? shim.size : 1;
    return MPI_SUCCESS;
}

static void write_all(int fd, const char *p, size_t n, const char *what) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) fatal("writing %s: %s", what, strerror(errno));
        p += k;
        n -= (size_t)k;
    }
}

static void read_all(int fd, char *p, size_t n, const char *what) {
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) fatal("reading %s: %s", what, k ? strerror(errno) : "file too short");
        p += k;
        n -= (size_t)k;
    }
}

SHIM_EXPORT int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
    char path[PATH_MAX], tmp[PATH_MAX];
    size_t nbytes;
    unsigned long n;
    check_ready("MPI_Bcast");
    check_comm(comm, "MPI_Bcast");
    if (!datatype || datatype->magic != SHIM_MAGIC)
        fatal("MPI_Bcast: unknown datatype %p (known: MPI_UINT8_T, MPI_BYTE, MPI_CHAR, MPI_INT)",
              (void *)datatype);
    if (count < 0) fatal("MPI_Bcast: count %d < 0", count);
    nbytes = (size_t)count * (size_t)datatype->size;
    if (!comm->world || shim.size == 1) { /* nothing to send */
        if (root != 0) fatal("MPI_Bcast: root %d outside a world of one", root);
        return MPI_SUCCESS;
    }
    if (root < 0 || root >= shim.size) fatal("MPI_Bcast: root %d outside 0..%d", root, shim.size - 1);
    n = shim.bcasts++;
    path_of(path, sizeof path, "bcast.%lu", n, 0);
    if (shim.rank == root) {
        int fd;
        path_of(tmp, sizeof tmp, ".bcast.%lu.%d.tmp", n, root);
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) fatal("MPI_Bcast: cannot create %s: %s", tmp, strerror(errno));
        write_all(fd, (const char *)buffer, nbytes, tmp);
        if (close(fd)) fatal("MPI_Bcast: closing %s: %s", tmp, strerror(errno));
        if (rename(tmp, path)) fatal("MPI_Bcast: rename to %s: %s", path, strerror(errno));
        TRACE("MPI_Bcast #%lu: root wrote %zu bytes (%s x %d) to %s", n, nbytes, datatype->name,
              count, path);
    } else {
        double t0 = now_s();
        struct stat st;
        int fd;
        while ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
            if (errno != ENOENT) fatal("MPI_Bcast: opening %s: %s", path, strerror(errno));
            if (now_s() - t0 > shim.timeout_s)
                fatal("MPI_Bcast #%lu: no data from root %d after %.0f s (%s)", n, root,
                      shim.timeout_s, path);
            nap();
        }
        if (fstat(fd, &st)) fatal("MPI_Bcast: fstat %s: %s", path, strerror(errno));
        if ((size_t)st.st_size != nbytes)
            fatal("MPI_Bcast #%lu: root sent %lld bytes, this rank expects %zu (count %d of %s)", n,
                  (long long)st.st_size, nbytes, count, datatype->name);
        read_all(fd, (char *)buffer, nbytes, path);
        close(fd);
        TRACE("MPI_Bcast #%lu: read %zu bytes from root %d after %.3f s", n, nbytes, root,
              now_s() - t0);
    }
    return MPI_SUCCESS;
}

SHIM_EXPORT int MPI_Barrier(MPI_Comm comm) {
    char path[PATH_MAX];
    unsigned long n;
    double t0;
    int fd, r;
    check_ready("MPI_Barrier");
    check_comm(comm, "MPI_Barrier");
    if (!comm->world || shim.size == 1) return MPI_SUCCESS;
    n = shim.barriers++;
    path_of(path, sizeof path, "barrier.%lu.%d", n, shim.rank);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) fatal("MPI_Barrier: cannot create %s: %s", path, strerror(errno));
    close(fd);
    t0 = now_s();
    for (r = 0; r < shim.size; r++) {
        path_of(path, sizeof path, "barrier.%lu.%d", n, r);
        while (access(path, F_OK) != 0) {
            if (now_s() - t0 > shim.timeout_s)
                fatal("MPI_Barrier #%lu: rank %d did not arrive within %.0f s", n, r, shim.timeout_s);
            nap();
        }
    }
    TRACE("MPI_Barrier #%lu: all %d ranks after %.3f s", n, shim.size, now_s() - t0);
    return MPI_SUCCESS;
}

SHIM_EXPORT int MPI_Abort(MPI_Comm comm, int errorcode) {
    (void)comm;
    say("MPI_Abort(%d)", errorcode);
    _exit(errorcode ? errorcode : 1);
}

SHIM_EXPORT int MPI_Finalize(void) {
    check_ready("MPI_Finalize");
    shim.finalized = 1;
    TRACE("MPI_Finalize after %lu broadcasts, %lu barriers", shim.bcasts, shim.barriers);
    return MPI_SUCCESS;
}

#endif /* NVSHMEM_MPI_SHIM_IMPL */
