/* Hostile calls into the C ABI, one scenario per run (argv[1]); each must end
 * with "ok" and exit status 0, never a crash or a hang.
 *   double-release  a handle released twice, then used
 *   foreign-handle  handles the library never issued
 *   nulls           null pointers everywhere they can go
 *   stray-pointers  wrappers outside any object, fat binaries in no segment
 *   huge-counts     descriptors and bundles promising huge counts
 *   fork            fork while other threads register and look up
 *   dlclose LIB     dlopen/dlclose LIB in one thread while others look up */
#include "hip_prelude.h"
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Linked without libamdhip64 (-no-hip-rt): what each kernel's host stub
 * references, answering "not supported"; this program launches nothing. */
extern "C" int __hipPopCallConfiguration(dim3 *, dim3 *, size_t *, void **) { return 801; }
extern "C" int hipLaunchKernel(const void *, dim3, dim3, void **, size_t, void *) { return 801; }

__attribute__((global)) void hostile_kernel(int *p) { *p = 3; }

/* A clang offload bundle: the host entry and one gfx90a entry, built at run
 * time in a loaded segment (.bss). */
static unsigned char bundle[512];
static struct { unsigned magic, version; const void *fatbin; void *unused; } wrapper;
static const char kernel_name[] = "_Z14hostile_kernelPi";
static int host_stubs[64];

static void put64(unsigned char *at, uint64_t v) { memcpy(at, &v, 8); }

static void make_bundle(uint64_t entries) {
  const char *ids[2] = {"host-x86_64-unknown-linux-gnu-", "hipv4-amdgcn-amd-amdhsa--gfx90a"};
  memcpy(bundle, "__CLANG_OFFLOAD_BUNDLE__", 24);
  put64(bundle + 24, entries);
  size_t at = 32, data = 256;
  for (int i = 0; i < 2; i++) {
    size_t n = strlen(ids[i]);
    put64(bundle + at, data);
    put64(bundle + at + 8, i ? 64 : 0);
    put64(bundle + at + 16, n);
    memcpy(bundle + at + 24, ids[i], n);
    at += 24 + n;
  }
  memcpy(bundle + 256, "payload _Z14hostile_kernelPi", 29);
  wrapper.magic = 0x48495046;
  wrapper.version = 1;
  wrapper.fatbin = bundle;
}

static int failures;
static void expect(int cond, const char *what) {
  if (!cond) {
    printf("FAILED: %s (last error: %s)\n", what,
           offload_loader_last_error() ? offload_loader_last_error() : "none");
    failures++;
  }
}
static int has_error(void) { return offload_loader_last_error() != NULL; }

static void **register_one(int i) {
  void **h = __hipRegisterFatBinary(&wrapper);
  __hipRegisterFunction(h, &host_stubs[i % 64], (char *)kernel_name, kernel_name, -1, 0, 0, 0, 0, 0);
  return h;
}

static void double_release(void) {
  /* Devices known: a library unregistered before its first use is reported
   * with its selection (a destructor never detects). */
  offload_loader_device_count();
  void **h = register_one(0);
  int before = offload_loader_library_count();
  __hipUnregisterFatBinary(h);
  __hipUnregisterFatBinary(h);
  expect(has_error() && strstr(offload_loader_last_error(), "already released"), "second release reported");
  __hipRegisterFunction(h, &host_stubs[1], (char *)kernel_name, kernel_name, -1, 0, 0, 0, 0, 0);
  expect(strstr(offload_loader_last_error(), "not a live handle") != NULL, "use after release reported");
  expect(__cudaInitModule(h) == 0 && has_error(), "init of a released handle reported");
  expect(offload_loader_library_count() == before, "library count kept after unregistration");
  uint64_t k = 0;
  expect(offload_loader_kernel(&host_stubs[0], 0, &k) == OFFLOAD_LOADER_NOT_FOUND, "released kernel not found");
}

static void foreign_handle(void) {
  void *stack = 0;
  void **foreign[] = {(void **)0x1234, (void **)&stack, (void **)bundle, (void **)-1};
  for (int i = 0; i < 4; i++) {
    __hipUnregisterFatBinary(foreign[i]);
    expect(has_error(), "foreign release reported");
    __hipRegisterFunction(foreign[i], &host_stubs[2], (char *)kernel_name, kernel_name, -1, 0, 0, 0, 0, 0);
    __hipRegisterVar(foreign[i], &host_stubs[3], (char *)kernel_name, kernel_name, 0, 4, 0, 0);
    __hipRegisterManagedVar(foreign[i], (void **)&host_stubs[4], 0, kernel_name, 4, 4);
    expect(strstr(offload_loader_last_error(), "not a live handle") != NULL, "foreign handle reported");
    expect(__cudaInitModule(foreign[i]) == 0 && has_error(), "foreign init reported");
    __cudaRegisterManagedVar(foreign[i], (void **)&host_stubs[4], (char *)kernel_name, kernel_name, 0, 4, 0, 0);
    expect(strstr(offload_loader_last_error(), "not a live handle") != NULL, "foreign managed variable reported");
  }
  void **h = register_one(5);
  __hipRegisterManagedVar(h, 0, 0, kernel_name, 4, 4);
  expect(strstr(offload_loader_last_error(), "null pointer") != NULL, "null managed variable reported");
  __tgt_unregister_lib(h);
  expect(has_error(), "a HIP handle is not an OpenMP descriptor");
  __hipUnregisterFatBinary(h);
}

static void nulls(void) {
  void **h = __hipRegisterFatBinary(NULL);
  expect(has_error(), "null wrapper reported");
  __hipRegisterFunction(h, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0);
  __hipRegisterFunction(NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0);
  __hipRegisterVar(NULL, NULL, NULL, NULL, 0, 0, 0, 0);
  __hipRegisterSurface(NULL, NULL, NULL, NULL, 0, 0);
  __hipRegisterTexture(NULL, NULL, NULL, NULL, 0, 0, 0);
  __hipUnregisterFatBinary(h);
  __hipUnregisterFatBinary(NULL);
  expect(__cudaInitModule(NULL) == 0 && has_error(), "null init reported");
  void **good = register_one(6);
  __hipRegisterFunction(good, &host_stubs[7], NULL, NULL, 0, 0, 0, 0, 0, 0);
  expect(strstr(offload_loader_last_error(), "without a name") != NULL, "nameless symbol reported");
  __hipUnregisterFatBinary(good);
  __tgt_register_lib(NULL);
  __tgt_unregister_lib(NULL);
  __tgt_register_image_info(NULL);
  expect(offload_loader_kernel(NULL, 0, NULL) == OFFLOAD_LOADER_INVALID, "null out-pointer");
  expect(offload_loader_kernel_by_name(NULL, 0, NULL) == OFFLOAD_LOADER_INVALID, "null name");
  expect(offload_loader_device_target(0, NULL, 16) == OFFLOAD_LOADER_INVALID ||
             offload_loader_device_count() == 0, "null buffer is INVALID");
  expect(offload_loader_variable(NULL, 0, NULL, NULL) == OFFLOAD_LOADER_NOT_FOUND, "null variable");
  expect(offload_loader_selected_image(0, 0, NULL, NULL, 0, NULL, NULL) <= 0, "all-null outputs");
}

static void stray_pointers(void) {
  /* A wrapper in no loaded object: refused at registration. */
  void **h = __hipRegisterFatBinary((void *)0x1000);
  expect(has_error() && strstr(offload_loader_last_error(), "not in any loaded object"),
         "unmapped wrapper reported");
  __hipUnregisterFatBinary(h);
  /* A wrapper whose fat binary is on the stack (in no loaded segment): the
   * fat binary is found at first use, where the error is reported. */
  unsigned char stack_bundle[64] = {0};
  make_bundle(2);
  wrapper.fatbin = stack_bundle;
  int before = offload_loader_library_count();
  h = __hipRegisterFatBinary(&wrapper);
  __hipRegisterFunction(h, &host_stubs[8], (char *)kernel_name, kernel_name, -1, 0, 0, 0, 0, 0);
  uint64_t k = 0;
  expect(offload_loader_kernel(&host_stubs[8], 0, &k) < 0, "no kernel from a stray fat binary");
  expect(has_error() && strstr(offload_loader_last_error(), "no loaded segment"),
         "stray fat binary reported at first use");
  expect(offload_loader_selected_image(before, 0, NULL, NULL, 0, NULL, NULL) < 0, "no image either");
  __hipUnregisterFatBinary(h);
  wrapper.fatbin = bundle;
}

static void huge_counts(void) {
  /* A descriptor promising 2^31-1 images at an address in this segment. */
  static int32_t desc[8];
  desc[0] = 0x7fffffff;
  *(void **)&desc[2] = bundle;
  __tgt_register_lib(desc);
  expect(has_error(), "huge image count reported");
  desc[0] = -1;
  __tgt_register_lib(desc);
  expect(has_error(), "negative image count reported");
  /* A bundle promising 2^62 entries. */
  make_bundle((uint64_t)1 << 62);
  void **h = __hipRegisterFatBinary(&wrapper);
  /* Parsed at first use, as HIP does: the selection reports it. */
  int last = offload_loader_library_count() - 1;
  expect(offload_loader_selected_image(last, 0, NULL, NULL, 0, NULL, NULL) != 0, "huge bundle selects nothing");
  /* (its error is printed; the test reads it) */
  __hipUnregisterFatBinary(h);
  make_bundle(2);
  uint64_t k;
  expect(offload_loader_kernel(&host_stubs[0], 0x7fffffff, &k) != 0, "huge device");
  expect(offload_loader_selected_image(0x7fffffff, -1, NULL, NULL, 0, NULL, NULL) == OFFLOAD_LOADER_NOT_FOUND, "huge library");
  expect(offload_loader_symbol_count(-5) == OFFLOAD_LOADER_NOT_FOUND, "negative library");
}

static volatile int stop;
static void *registering(void *arg) {
  for (int i = 0; !stop; i++) __hipUnregisterFatBinary(register_one(i + (int)(intptr_t)arg));
  return NULL;
}
static void *querying(void *arg) {
  uint64_t k;
  char target[64];
  while (!stop) {
    offload_loader_kernel(&host_stubs[0], 0, &k);
    offload_loader_kernel_by_name(kernel_name, 0, &k);
    offload_loader_selected_image(offload_loader_library_count() - 1, 0, NULL, target, sizeof target, NULL, NULL);
  }
  return arg;
}

static void fork_while_registering(void) {
  pthread_t t[3];
  pthread_create(&t[0], NULL, registering, (void *)0);
  pthread_create(&t[1], NULL, registering, (void *)32);
  pthread_create(&t[2], NULL, querying, NULL);
  int hung = 0;
  for (int i = 0; i < 40; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(60); /* a hang detector only: a healthy child takes milliseconds */
      /* Registry, detection and selection, but not the driver: like HSA and
       * CUDA, the test double's driver is not usable after fork (device 1
       * does not exist, so the lookups stop before a load). */
      uint64_t k;
      char target[64];
      void **h = register_one(9);
      offload_loader_kernel(&host_stubs[9], 1, &k);
      offload_loader_kernel_by_name(kernel_name, 1, &k);
      int last = offload_loader_library_count() - 1;
      if (offload_loader_selected_image(last, 0, NULL, target, sizeof target, NULL, NULL) != 0 ||
          strcmp(target, "gfx90a") != 0)
        _exit(4);
      __hipUnregisterFatBinary(h);
      _exit(offload_loader_library_count() > 0 ? 0 : 3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      hung++;
      printf("child %d: status %#x\n", i, status);
    }
  }
  stop = 1;
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  printf("forks=40 failed=%d\n", hung);
  expect(hung == 0, "every forked child registered, looked up and exited");
}

static const char *lib_path;
static void *kernels_of_lib(void *arg) {
  uint64_t k;
  while (!stop) {
    offload_loader_kernel_by_name("_Z10lib_kernelPi", 0, &k);
    offload_loader_kernel_by_name("_Z10lib_kernelPi", 1, &k);
    for (int l = 0; l < offload_loader_library_count(); l++) {
      const void *data;
      size_t size;
      offload_loader_selected_image(l, 0, NULL, NULL, 0, &data, &size);
    }
  }
  return arg;
}

static void dlclose_race(void) {
  pthread_t t[2];
  pthread_create(&t[0], NULL, kernels_of_lib, NULL);
  pthread_create(&t[1], NULL, kernels_of_lib, NULL);
  int opened = 0;
  for (int i = 0; i < 200; i++) {
    void *h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("dlopen: %s\n", dlerror()); break; }
    opened++;
    uint64_t k;
    offload_loader_kernel(dlsym(h, "_Z10lib_kernelPi"), 0, &k);
    dlclose(h);
  }
  stop = 1;
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  printf("dlopened=%d libraries=%d\n", opened, offload_loader_library_count());
  expect(opened == 200, "every dlopen worked");
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  make_bundle(2);
  const char *mode = argv[1];
  if (!strcmp(mode, "double-release")) double_release();
  else if (!strcmp(mode, "foreign-handle")) foreign_handle();
  else if (!strcmp(mode, "nulls")) nulls();
  else if (!strcmp(mode, "stray-pointers")) stray_pointers();
  else if (!strcmp(mode, "huge-counts")) huge_counts();
  else if (!strcmp(mode, "fork")) fork_while_registering();
  else if (!strcmp(mode, "dlclose") && argc > 2) { lib_path = argv[2]; dlclose_race(); }
  else return 2;
  if (failures) return 1;
  printf("ok\n");
  return 0;
}
