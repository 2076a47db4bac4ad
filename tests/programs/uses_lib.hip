#include "hip_prelude.h"
#include <dlfcn.h>
extern "C" void lib_report(int library);
__attribute__((global)) void main_kernel(int *p) { *p = 1; }
__attribute__((device)) int main_var = 2;
int main(int argc, char **argv) {
  if (argc > 1) {
    /* Load the library at run time: its fat binary registers from dlopen. */
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { printf("dlopen failed: %s\n", dlerror()); return 3; }
    void (*f)(int) = (void (*)(int))dlsym(h, "lib_report");
    printf("libraries=%d\n", offload_loader_library_count());
    f(1);
    dlclose(h);
  } else {
    printf("libraries=%d\n", offload_loader_library_count());
    lib_report(0);
  }
  report("main", argc > 1 ? 0 : 1, (const void *)main_kernel, (const void *)&main_var);
  return 0;
}
