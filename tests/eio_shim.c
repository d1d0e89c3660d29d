// An LD_PRELOAD shim that makes a directory tree fail like storage in an outage (a Lustre OST
// failover, an NFS server restart): while the file FTRAIN_EIO_WHILE exists, every open, stat
// and opendir of a path under FTRAIN_EIO_PREFIX fails with EIO (FTRAIN_EIO_ERRNO=ESTALE or
// ENOENT for the other faces of it). Used by the trainer's outage tests on real processes
// (tests/train_test.cc): the HDF5 reads, the Env's reads and the directory listings all see it.
// Removing the flag file ends the outage. Paths are compared as given (absolute in the tests).
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int Faulty(const char* path) {
  const char* prefix = getenv("FTRAIN_EIO_PREFIX");
  const char* flag = getenv("FTRAIN_EIO_WHILE");
  if (path == NULL || prefix == NULL || flag == NULL || prefix[0] == '\0') return 0;
  if (strncmp(path, prefix, strlen(prefix)) != 0) return 0;
  if (access(flag, F_OK) != 0) return 0;  // the outage is over
  const char* e = getenv("FTRAIN_EIO_ERRNO");
  errno = e == NULL ? EIO : strcmp(e, "ESTALE") == 0 ? ESTALE : strcmp(e, "ENOENT") == 0 ? ENOENT : EIO;
  return 1;
}

#define NEXT(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

static mode_t ModeOf(int flags, va_list ap) {
  return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = ModeOf(flags, ap);
  va_end(ap);
  if (Faulty(path)) return -1;
  return NEXT(open)(path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = ModeOf(flags, ap);
  va_end(ap);
  if (Faulty(path)) return -1;
  return NEXT(open64)(path, flags, mode);
}

int openat(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = ModeOf(flags, ap);
  va_end(ap);
  if (Faulty(path)) return -1;
  return NEXT(openat)(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = ModeOf(flags, ap);
  va_end(ap);
  if (Faulty(path)) return -1;
  return NEXT(openat64)(dirfd, path, flags, mode);
}

FILE* fopen(const char* path, const char* m) {
  if (Faulty(path)) return NULL;
  return NEXT(fopen)(path, m);
}

FILE* fopen64(const char* path, const char* m) {
  if (Faulty(path)) return NULL;
  return NEXT(fopen64)(path, m);
}

DIR* opendir(const char* path) {
  if (Faulty(path)) return NULL;
  return NEXT(opendir)(path);
}

int stat(const char* path, struct stat* st) {
  if (Faulty(path)) return -1;
  return NEXT(stat)(path, st);
}

int lstat(const char* path, struct stat* st) {
  if (Faulty(path)) return -1;
  return NEXT(lstat)(path, st);
}

int stat64(const char* path, struct stat64* st) {
  if (Faulty(path)) return -1;
  return NEXT(stat64)(path, st);
}

int lstat64(const char* path, struct stat64* st) {
  if (Faulty(path)) return -1;
  return NEXT(lstat64)(path, st);
}

int fstatat(int dirfd, const char* path, struct stat* st, int flags) {
  if (Faulty(path)) return -1;
  return NEXT(fstatat)(dirfd, path, st, flags);
}

int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
  if (Faulty(path)) return -1;
  return NEXT(fstatat64)(dirfd, path, st, flags);
}

int statx(int dirfd, const char* path, int flags, unsigned int mask, struct statx* st) {
  if (Faulty(path)) return -1;
  return NEXT(statx)(dirfd, path, flags, mask, st);
}
