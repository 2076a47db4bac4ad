// Two translation units' fat binaries in one program, for tests/device/cuda.sh:
// this one's kernel is built for the device, other_module.cu's for sm_80
// only. After `offload-probe slim --device sm_90`, the sm_80-only fat binary
// is empty: its launch must fail as it did, and this one's still run.
#include <cstdio>
__global__ void here(int *x) { *x = 42; }
void other(int *x);
int main() {
  int *x, v = 0;
  cudaMalloc(&x, 4);
  here<<<1, 1>>>(x);
  cudaError_t e = cudaMemcpy(&v, x, 4, cudaMemcpyDeviceToHost);
  printf("kernel for this GPU: %s, %d\n", cudaGetErrorName(e), v);
  other(x);
  e = cudaGetLastError();
  printf("kernel for sm_80 only: %s\n", cudaGetErrorName(e));
  return 0;
}
