/* Stands between offload-loader and libamdhip64, as a second definition of
 * the HIP registration hooks would: prints each call it is handed and
 * whether the fat-binary handle it gets back is the one the next
 * definition (libamdhip64's) returned for that fat binary, then passes the
 * call on. Signatures: clr hipamd/src/hip_platform.cpp. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

static void **theirs;

static void *next(const char *name) { return dlsym(RTLD_NEXT, name); }

void **__hipRegisterFatBinary(const void *wrapper) {
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
