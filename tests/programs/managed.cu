/* CUDA __managed__ variables in an nvcc -cudart none program: the host
 * reads and writes them (nvcc's code calls __cudaInitModule before the first
 * host use, which points its host pointers at their memory), and the
 * variable is looked up by its address. */
#include <cstdint>
#include <cstdio>
#include "offload_loader.h"

__managed__ int mv = 5;
__managed__ double arr[3] = {1.5, 2.5, 3.5};
__managed__ int zero;
__global__ void k() { mv += (int)arr[1] + zero; }

int main() {
  printf("read=%d arr=%g,%g,%g zero=%d\n", mv, arr[0], arr[1], arr[2], zero);
  mv = 9;
  printf("written=%d\n", mv);
  for (int d = 0; d < offload_loader_device_count(); d++) {
    uint64_t address = 0, size = 0;
    int rc = offload_loader_variable(&mv, d, &address, &size);
    printf("device=%d lookup=%d size=%llu host=%d\n", d, rc, (unsigned long long)size,
           address == (uint64_t)(uintptr_t)&mv);
  }
  return 0;
}
