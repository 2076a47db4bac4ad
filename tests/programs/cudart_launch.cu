/* An nvcc -cudart shared program: registers through libcudart (or this
 * library first, handing on to it), asks it about the devices and launches
 * with <<<>>>. */
#include <cstdio>

__global__ void k(int *p) { *p = 1; }
__device__ int dv = 3;

int main() {
  int n = -1;
  cudaError_t rc = cudaGetDeviceCount(&n);
  printf("count rc=%d (%s)\n", (int)rc, cudaGetErrorName(rc));
  k<<<1, 1>>>(nullptr);
  rc = cudaGetLastError();
  printf("launch rc=%d (%s)\n", (int)rc, cudaGetErrorName(rc));
  return 0;
}
