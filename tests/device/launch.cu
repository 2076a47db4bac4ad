// On a real NVIDIA GPU: an `nvcc -cudart none` program linked with
// liboffload_loader registers its fat binary through the library, which
// selects the entry for the GPU and loads it with the driver; the program
// launches the kernel through the driver API on the handle the query API
// returns, and checks what it computed. Built and run by tests/device/cuda.sh.
#include <cstdio>
#include <cuda.h>
#include "offload_loader.h"

__device__ int scale = 1;

extern "C" __global__ void add_one(int *x) { x[threadIdx.x] += scale; }

#define CHECK(call)                                                   \
  do {                                                                \
    CUresult r = (call);                                              \
    if (r != CUDA_SUCCESS) {                                          \
      const char *s = "?";                                            \
      cuGetErrorName(r, &s);                                          \
      printf("FAIL %s: %s\n", #call, s);                              \
      return 1;                                                       \
    }                                                                 \
  } while (0)

int main() {
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  char target[64] = "";
  offload_loader_device_target(0, target, sizeof target);
  int index = -1;
  const void *data = 0;
  size_t size = 0;
  char image[64] = "";
  int r = offload_loader_selected_image(0, 0, &index, image, sizeof image, &data, &size);
  printf("device 0: %s; selected image %d (%s, %zu bytes): %s\n", target, index, image, size,
         r == 0 ? "ok" : offload_loader_last_error());
  uint64_t kernel = 0, address = 0, bytes = 0;
  if (offload_loader_kernel((const void *)add_one, 0, &kernel) != 0) {
    printf("FAIL kernel: %s\n", offload_loader_last_error());
    return 1;
  }
  if (offload_loader_variable((const void *)&scale, 0, &address, &bytes) != 0) {
    printf("FAIL variable: %s\n", offload_loader_last_error());
    return 1;
  }
  CUcontext current = 0;
  CHECK(cuCtxGetCurrent(&current));
  printf("current context kept: %s\n", current == ctx ? "yes" : "NO");
  int five = 5;
  CHECK(cuMemcpyHtoD((CUdeviceptr)address, &five, sizeof five));
  int host[32];
  for (int i = 0; i < 32; i++) host[i] = i;
  CUdeviceptr x;
  CHECK(cuMemAlloc(&x, sizeof host));
  CHECK(cuMemcpyHtoD(x, host, sizeof host));
  void *args[] = {&x};
  CHECK(cuLaunchKernel((CUfunction)kernel, 1, 1, 1, 32, 1, 1, 0, 0, args, 0));
  CHECK(cuCtxSynchronize());
  CHECK(cuMemcpyDtoH(host, x, sizeof host));
  int bad = 0;
  for (int i = 0; i < 32; i++) bad += host[i] != i + 5;
  printf("launch through the handle: %s (x[31] = %d)\n", bad ? "WRONG" : "ok", host[31]);
  return bad != 0;
}
