// A test double for a failing disk, preloaded into the real `llamapp serve` (LD_PRELOAD).
// Files opened under LLAMAPP_FAULT_DIR get the fault that the file LLAMAPP_FAULT_CONTROL names
// at the moment of each call, so a test can switch it while the server runs:
//   (empty or absent)  no fault
//   enospc             every write fails with ENOSPC (a full disk)
//   eio                every read fails with EIO (a bad sector)
//   slow N             every read and write first waits N ms (a slow disk)
//   hold               every write waits until the control file says something else (a stuck
//                      disk); the first to wait creates the file "<control>.held", so a test
//                      knows a write is stuck rather than guessing with a delay
// Only open/openat, fopen/fclose, close, write, writev, pwrite, read, pread (and their 64 forms)
// and fdatasync are wrapped: what the KV store's entry files and the downloads go through.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum { max_fds = 65536 };
static unsigned char faulty[max_fds];  // fds opened under the directory

typedef int (*open_fn)(const char*, int, ...);
typedef int (*openat_fn)(int, const char*, int, ...);
typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*read_fn)(int, void*, size_t);
typedef ssize_t (*pread_fn)(int, void*, size_t, off_t);
typedef int (*int_fn)(int);
typedef ssize_t (*writev_fn)(int, const struct iovec*, int);
typedef FILE* (*fopen_fn)(const char*, const char*);
typedef int (*fclose_fn)(FILE*);

static void* next(const char* name) {
    return dlsym(RTLD_NEXT, name);
}

static int under_directory(const char* path) {
    const char* dir = getenv("LLAMAPP_FAULT_DIR");
    if (!dir || !*dir || !path) return 0;
    const size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static void track(int fd, const char* path) {
    if (fd >= 0 && fd < max_fds) faulty[fd] = (unsigned char)under_directory(path);
}

static void untrack(int fd) {
    if (fd >= 0 && fd < max_fds) faulty[fd] = 0;
}

// The fault the control file names: 'n' none, 'w' ENOSPC, 'r' EIO, 's' slow (*ms set), 'h' hold.
static char control_fault(long* ms) {
    const char* control = getenv("LLAMAPP_FAULT_CONTROL");
    if (!control) return 'n';
    int c = ((open_fn)next("open"))(control, O_RDONLY | O_CLOEXEC);
    if (c < 0) return 'n';
    char text[64] = {0};
    ssize_t n = ((read_fn)next("read"))(c, text, sizeof text - 1);
    ((int_fn)next("close"))(c);
    if (n <= 0) return 'n';
    if (strncmp(text, "enospc", 6) == 0) return 'w';
    if (strncmp(text, "eio", 3) == 0) return 'r';
    if (strncmp(text, "slow", 4) == 0) {
        *ms = strtol(text + 4, NULL, 10);
        return 's';
    }
    if (strncmp(text, "hold", 4) == 0) return 'h';
    return 'n';
}

// The fault now in force for `fd`.
static char fault(int fd, long* ms) {
    if (fd < 0 || fd >= max_fds || !faulty[fd]) return 'n';
    return control_fault(ms);
}

static void pause_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

// Marks that a write is held (for the test to wait on), then waits for the control file to
// release it. Polling is the injector's business: the test itself waits on the marker.
static void hold(void) {
    char held[4096];
    const char* control = getenv("LLAMAPP_FAULT_CONTROL");
    if (snprintf(held, sizeof held, "%s.held", control) < (int)sizeof held) {
        int fd = ((open_fn)next("open"))(held, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) ((int_fn)next("close"))(fd);
    }
    long ms = 0;
    while (control_fault(&ms) == 'h') pause_ms(1);
}

// 0 to go on, -1 with errno set to fail the call.
static int before(int fd, int writing) {
    long ms = 0;
    switch (fault(fd, &ms)) {
        case 'w':
            if (writing) {
                errno = ENOSPC;
                return -1;
            }
            return 0;
        case 'r':
            if (!writing) {
                errno = EIO;
                return -1;
            }
            return 0;
        case 's':
            pause_ms(ms);
            return 0;
        case 'h':
            if (writing) hold();
            return 0;
        default:
            return 0;
    }
}

// O_TMPFILE includes O_DIRECTORY's bit: only all of it means a mode argument follows.
static mode_t mode_of(int flags, va_list args) {
    return ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? (mode_t)va_arg(args, int) : 0;
}

// Declares `mode`: the optional third argument of open, open64 and openat.
#define MODE_FROM_VARARGS(flags)              \
    va_list args;                             \
    va_start(args, flags);                    \
    const mode_t mode = mode_of(flags, args); \
    va_end(args)

static int tracked(int fd, const char* path) {
    track(fd, path);
    return fd;
}

int open(const char* path, int flags, ...) {
    MODE_FROM_VARARGS(flags);
    return tracked(((open_fn)next("open"))(path, flags, mode), path);
}

int open64(const char* path, int flags, ...) {
    MODE_FROM_VARARGS(flags);
    return tracked(((open_fn)next("open64"))(path, flags, mode), path);
}

int openat(int dirfd, const char* path, int flags, ...) {
    MODE_FROM_VARARGS(flags);
    return tracked(((openat_fn)next("openat"))(dirfd, path, flags, mode), path);
}

// std::fstream opens through fopen (whose own open is not interposed), then reads and writes its
// descriptor with read, write and writev: the downloads go that way.
static FILE* tracked_file(FILE* f, const char* path) {
    if (f) track(fileno(f), path);
    return f;
}

FILE* fopen(const char* path, const char* how) {
    return tracked_file(((fopen_fn)next("fopen"))(path, how), path);
}

FILE* fopen64(const char* path, const char* how) {
    return tracked_file(((fopen_fn)next("fopen64"))(path, how), path);
}

int fclose(FILE* f) {
    if (f) untrack(fileno(f));
    return ((fclose_fn)next("fclose"))(f);
}

int close(int fd) {
    untrack(fd);
    return ((int_fn)next("close"))(fd);
}

ssize_t write(int fd, const void* p, size_t n) {
    if (before(fd, 1) != 0) return -1;
    return ((write_fn)next("write"))(fd, p, n);
}

ssize_t writev(int fd, const struct iovec* v, int n) {
    if (before(fd, 1) != 0) return -1;
    return ((writev_fn)next("writev"))(fd, v, n);
}

ssize_t pwrite(int fd, const void* p, size_t n, off_t at) {
    if (before(fd, 1) != 0) return -1;
    return ((pwrite_fn)next("pwrite"))(fd, p, n, at);
}

ssize_t pwrite64(int fd, const void* p, size_t n, off_t at) {
    if (before(fd, 1) != 0) return -1;
    return ((pwrite_fn)next("pwrite64"))(fd, p, n, at);
}

ssize_t read(int fd, void* p, size_t n) {
    if (before(fd, 0) != 0) return -1;
    return ((read_fn)next("read"))(fd, p, n);
}

ssize_t pread(int fd, void* p, size_t n, off_t at) {
    if (before(fd, 0) != 0) return -1;
    return ((pread_fn)next("pread"))(fd, p, n, at);
}

ssize_t pread64(int fd, void* p, size_t n, off_t at) {
    if (before(fd, 0) != 0) return -1;
    return ((pread_fn)next("pread64"))(fd, p, n, at);
}

int fdatasync(int fd) {
    if (before(fd, 1) != 0) return -1;
    return ((int_fn)next("fdatasync"))(fd);
}
