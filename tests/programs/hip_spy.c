/* Stands between offload-loader and libamdhip64, as a second definition of
 * the HIP registration hooks would: prints each call it is handed and
 * whether the fat-binary handle it gets back is the one the next
 * definition (libamdhip64's) returned for that fat binary, then passes the
 * call on. Signatures: clr hipamd/src/hip_platform.cpp. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void **theirs;

static void *next(const char *name) { return dlsym(RTLD_NEXT, name); }

/* Prints the entry IDs of the bundle the wrapper points to, in table order,
 * and writes the bundle (up to its last code object) to $SPY_BUNDLE. */
static void show_bundle(const void *wrapper) {
  const unsigned char *b;
  memcpy(&b, (const char *)wrapper + 8, sizeof b);
  if (memcmp(b, "__CLANG_OFFLOAD_BUNDLE__", 24) != 0) {
    fprintf(stderr, "spy: not an uncompressed bundle\n");
    return;
  }
  uint64_t n, end = 0;
  memcpy(&n, b + 24, 8);
  const unsigned char *p = b + 32;
  fprintf(stderr, "spy: bundle");
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t offset, size, len;
    memcpy(&offset, p, 8);
    memcpy(&size, p + 8, 8);
    memcpy(&len, p + 16, 8);
    fprintf(stderr, " %.*s", (int)len, (const char *)p + 24);
    if (offset + size > end)
      end = offset + size;
    p += 24 + len;
  }
  fprintf(stderr, "\n");
  const char *path = getenv("SPY_BUNDLE");
  FILE *f = path ? fopen(path, "wb") : NULL;
  if (f) {
    fwrite(b, 1, end, f);
    fclose(f);
  }
}

void **__hipRegisterFatBinary(const void *wrapper) {
  if (wrapper)
    show_bundle(wrapper);
  void **(*f)(const void *) = (void **(*)(const void *))next("__hipRegisterFatBinary");
  theirs = f(wrapper);
  fprintf(stderr, "spy: fat binary %s, handle %s\n", wrapper ? "given" : "missing",
          theirs ? "returned" : "null");
  return theirs;
}

void __hipRegisterFunction(void **h, const void *stub, char *dev, const char *name, int limit,
                           void *tid, void *bid, void *block, void *grid, int *ws) {
  fprintf(stderr, "spy: function %s, %s handle\n", dev, h == theirs ? "its" : "another");
  void (*f)(void **, const void *, char *, const char *, int, void *, void *, void *, void *,
            int *) = (void (*)(void **, const void *, char *, const char *, int, void *, void *,
                               void *, void *, int *))next("__hipRegisterFunction");
  f(h, stub, dev, name, limit, tid, bid, block, grid, ws);
}

void __hipRegisterVar(void **h, void *var, char *dev, const char *name, int ext, size_t size,
                      int constant, int global) {
  fprintf(stderr, "spy: variable %s (%zu bytes), %s handle\n", dev, size,
          h == theirs ? "its" : "another");
  void (*f)(void **, void *, char *, const char *, int, size_t, int, int) =
      (void (*)(void **, void *, char *, const char *, int, size_t, int, int))next(
          "__hipRegisterVar");
  f(h, var, dev, name, ext, size, constant, global);
}

void __hipUnregisterFatBinary(void **h) {
  fprintf(stderr, "spy: unregister, %s handle\n", h == theirs ? "its" : "another");
  void (*f)(void **) = (void (*)(void **))next("__hipUnregisterFatBinary");
  f(h);
}
