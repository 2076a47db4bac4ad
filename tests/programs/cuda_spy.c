/* Stands between offload-loader and libcudart, as a second definition of the
 * CUDA registration hooks would: prints each call it is handed and whether
 * the fat-binary handle it gets is the one the next definition (libcudart's)
 * returned, then passes the call on. Signatures: CUDA crt/host_runtime.h. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void **theirs;

static void *next(const char *name) { return dlsym(RTLD_NEXT, name); }

/* With SPY_TEAR_DOWN=launch, stands in for libcudart's exit handler,
 * installed at its first call, the first launch: at exit, before the
 * handlers installed earlier, it tears the driver down (the test double's
 * fake_cuda_tear_down, in the library $OFFLOAD_LOADER_CUDA_LIBRARY names).
 * With SPY_TEAR_DOWN=now, tears it down at the first registration. */
static void tear_down(void) {
  const char *path = getenv("OFFLOAD_LOADER_CUDA_LIBRARY");
  void *driver = path ? dlopen(path, RTLD_LAZY) : NULL;
  void (*f)(void) = driver ? (void (*)(void))dlsym(driver, "fake_cuda_tear_down") : NULL;
  if (f)
    f();
}

static void tear_down_at_exit(const char *when) {
  static int installed;
  const char *asked = getenv("SPY_TEAR_DOWN");
  if (installed || !asked)
    return;
  if (strcmp(asked, "now") == 0) {
    installed = 1;
    tear_down();
  } else if (strcmp(asked, when) == 0) {
    installed = 1;
    atexit(tear_down);
  }
}

void **__cudaRegisterFatBinary(void *wrapper) {
  void **(*f)(void *) = (void **(*)(void *))next("__cudaRegisterFatBinary");
  theirs = f(wrapper);
  tear_down_at_exit("register");
  fprintf(stderr, "spy: fat binary, handle %s\n", theirs ? "returned" : "null");
  return theirs;
}

void __cudaRegisterFatBinaryEnd(void **h) {
  fprintf(stderr, "spy: end, %s handle\n", h == theirs ? "its" : "another");
  ((void (*)(void **))next("__cudaRegisterFatBinaryEnd"))(h);
}

void __cudaRegisterFunction(void **h, const char *stub, char *fun, const char *name, int limit,
                            void *tid, void *bid, void *block, void *grid, int *ws) {
  fprintf(stderr, "spy: function %s, %s handle\n", name, h == theirs ? "its" : "another");
  ((void (*)(void **, const char *, char *, const char *, int, void *, void *, void *, void *,
             int *))next("__cudaRegisterFunction"))(h, stub, fun, name, limit, tid, bid, block,
                                                     grid, ws);
}

void __cudaRegisterVar(void **h, char *var, char *address, const char *name, int ext,
                       size_t size, int constant, int global) {
  fprintf(stderr, "spy: variable %s (%zu bytes), %s handle\n", name, size,
          h == theirs ? "its" : "another");
  ((void (*)(void **, char *, char *, const char *, int, size_t, int, int))next(
      "__cudaRegisterVar"))(h, var, address, name, ext, size, constant, global);
}

void __cudaUnregisterFatBinary(void **h) {
  fprintf(stderr, "spy: unregister, %s handle\n", h == theirs ? "its" : "another");
  ((void (*)(void **))next("__cudaUnregisterFatBinary"))(h);
}

typedef struct {
  unsigned x, y, z;
} dim3;

unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, void *stream) {
  unsigned rc = ((unsigned (*)(dim3, dim3, size_t, void *))next("__cudaPushCallConfiguration"))(
      grid, block, shared, stream);
  tear_down_at_exit("launch");
  return rc;
}
