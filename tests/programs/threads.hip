/* Loads the HIP libraries named on the command line from one thread each, at
 * once: their fat binaries register concurrently. */
#include "hip_prelude.h"
#include <dlfcn.h>
#include <pthread.h>

static void *load(void *path) {
  void *h = dlopen((const char *)path, RTLD_NOW | RTLD_LOCAL);
  if (!h) printf("dlopen failed: %s\n", dlerror());
  return h;
}

int main(int argc, char **argv) {
  pthread_t threads[16];
  int n = argc - 1 < 16 ? argc - 1 : 16;
  for (int i = 0; i < n; i++) pthread_create(&threads[i], NULL, load, argv[i + 1]);
  for (int i = 0; i < n; i++) pthread_join(threads[i], NULL);
  printf("libraries=%d\n", offload_loader_library_count());
  for (int l = 0; l < offload_loader_library_count(); l++) {
    int index = -1;
    char target[64] = "";
    int rc = offload_loader_selected_image(l, 0, &index, target, sizeof target, NULL, NULL);
    printf("library %d symbols=%d selected=%d target=%s\n", l, offload_loader_symbol_count(l), rc, target);
  }
  return 0;
}
