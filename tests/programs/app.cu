// An nvcc program linked with `-cudart none` against liboffload_loader: its
// startup code registers the fat binary through __cudaRegisterFatBinary and
// friends, and the query API answers what was selected and resolved.
#include <cstdio>
#include "offload_loader.h"

__device__ int scale = 1;
extern "C" __global__ void add_one(int *x) { x[threadIdx.x] += scale; }

int main() {
  printf("devices=%d libraries=%d\n", offload_loader_device_count(),
         offload_loader_library_count());
  for (int lib = 0; lib < offload_loader_library_count(); lib++) {
    int index = -1;
    char target[64] = "";
    const void *data = 0;
    size_t size = 0;
    int r = offload_loader_selected_image(lib, 0, &index, target, sizeof target, &data, &size);
    printf("library %d: %s\n", lib, r == 0 ? "selected" : offload_loader_last_error());
    if (r == 0) printf("library %d image %d %s %zu bytes\n", lib, index, target, size);
  }
  uint64_t kernel = 0, address = 0, bytes = 0;
  int r = offload_loader_kernel((const void *)add_one, 0, &kernel);
  printf("kernel add_one: %s\n", r == 0 ? "resolved" : offload_loader_last_error());
  r = offload_loader_variable((const void *)&scale, 0, &address, &bytes);
  printf("variable scale: %s %llu bytes\n", r == 0 ? "resolved" : offload_loader_last_error(),
         (unsigned long long)bytes);
  return 0;
}
