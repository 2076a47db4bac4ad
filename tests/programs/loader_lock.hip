/* Races against the dynamic loader's lock: every scenario must end with
 * "ok" and exit status 0; the test runs it under a time limit, and a hang
 * is the failure it looks for. Nothing here detects devices before the race.
 *   race LIB NAME ROUNDS   dlopen/dlclose LIB (a HIP or CUDA library whose
 *                          kernel is NAME) ROUNDS times on the main thread,
 *                          while three threads make every kind of query (the
 *                          first detection among them) and load images, and a
 *                          fresh thread per round selects for the newest
 *                          library (the first write of its thread's last error)
 *   ctor LIB               one thread detects for the first time while the
 *                          main thread dlopens LIB (its constructor registers)
 *   dtor LIB               the same while the main thread dlcloses LIB
 *   fork LIB               fork 100 times while another thread dlopens LIB,
 *                          makes the first use of its compressed bundle and
 *                          closes it; each child uses the newest library */
#include "hip_prelude.h"
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *lib_path, *kernel_name;
static volatile int stop;

/* The image library `lib` selected for `device`, its bytes included (an
 * inflation at first use); they are not read, as the library may be closed. */
static void select_in(int lib, int device) {
  int index;
  char target[64];
  const void *data = 0;
  size_t size = 0;
  offload_loader_selected_image(lib, device, &index, target, sizeof target, &data, &size);
}

static void select_newest(int device) {
  int n = offload_loader_library_count();
  if (n > 0) select_in(n - 1, device);
}

/* Every kind of query, over and over. */
static void *querier(void *arg) {
  (void)arg;
  while (!stop) {
    int n = offload_loader_library_count();
    char target[64];
    offload_loader_device_target(0, target, sizeof target);
    for (int lib = n > 3 ? n - 3 : 0; lib < n; lib++) {
      for (int device = 0; device < 2; device++) select_in(lib, device);
      offload_loader_symbol_count(lib);
    }
    uint64_t k = 0, address = 0, size = 0;
    offload_loader_kernel_by_name(kernel_name, 0, &k);
    offload_loader_kernel_by_name(kernel_name, 1, &k);
    offload_loader_kernel(&k, 0, &k);
    offload_loader_variable(&k, 0, &address, &size);
  }
  return 0;
}

/* A thread that lives for one selection: its first last error is written
 * while the main thread may be closing the library. */
static void *fresh(void *arg) {
  (void)arg;
  select_newest(1);
  uint64_t k = 0;
  offload_loader_kernel_by_name(kernel_name, 1, &k);
  return 0;
}

static int race(int rounds) {
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, querier, NULL);
  int opened = 0;
  for (int i = 0; i < rounds; i++) {
    void *h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      printf("dlopen: %s\n", dlerror());
      break;
    }
    opened++;
    pthread_t f;
    pthread_create(&f, NULL, fresh, NULL);
    uint64_t k;
    offload_loader_kernel_by_name(kernel_name, 0, &k);
    dlclose(h);
    pthread_join(f, NULL);
  }
  stop = 1;
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  printf("dlopened=%d libraries=%d devices=%d\n", opened, offload_loader_library_count(),
         offload_loader_device_count());
  return opened == rounds;
}

static pthread_barrier_t start;

static void *first_detection(void *arg) {
  (void)arg;
  pthread_barrier_wait(&start);
  printf("detected %d devices\n", offload_loader_device_count());
  return 0;
}

/* The first detection on one thread, a constructor (ctor) or destructor
 * (dtor) of LIB on the main one, soon after the detection has begun. */
static int detection_race(int at_close) {
  void *h = at_close ? dlopen(lib_path, RTLD_NOW | RTLD_LOCAL) : 0;
  pthread_t t;
  pthread_barrier_init(&start, NULL, 2);
  pthread_create(&t, NULL, first_detection, NULL);
  pthread_barrier_wait(&start);
  usleep(20000);
  if (!at_close) h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("dlopen: %s\n", dlerror());
    return 0;
  }
  dlclose(h);
  pthread_join(t, NULL);
  return 1;
}

static void *first_uses(void *arg) {
  (void)arg;
  while (!stop) {
    void *h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
    select_newest(0);
    dlclose(h);
  }
  return 0;
}

/* Children forked while another thread inflates a bundle for the first time
 * must not wait for that thread, which they do not have. */
static int fork_race(void) {
  offload_loader_device_count();
  pthread_t t;
  pthread_create(&t, NULL, first_uses, NULL);
  int failed = 0;
  for (int i = 0; i < 100; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(30);
      select_newest(0);
      uint64_t k;
      offload_loader_kernel_by_name(kernel_name, 0, &k);
      _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
      printf("child %d: status %d\n", i, status);
      failed++;
    }
  }
  stop = 1;
  pthread_join(t, NULL);
  printf("forks=100 failed=%d\n", failed);
  return failed == 0;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  const char *mode = argv[1];
  lib_path = argv[2];
  kernel_name = argc > 3 ? argv[3] : "_Z10lib_kernelPi";
  int ok;
  if (!strcmp(mode, "race") && argc > 4) ok = race(atoi(argv[4]));
  else if (!strcmp(mode, "ctor")) ok = detection_race(0);
  else if (!strcmp(mode, "dtor")) ok = detection_race(1);
  else if (!strcmp(mode, "fork")) ok = fork_race();
  else return 2;
  if (!ok) return 1;
  printf("ok\n");
  return 0;
}
