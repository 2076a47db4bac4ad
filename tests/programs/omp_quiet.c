/* An OpenMP program that never asks offload-loader anything: one target
 * region. Linked through the shim (libomptarget.so, a link to
 * offload-loader), it defines the launch entry point itself: offloading
 * "fails" and the region runs on the host. */
#include <stdint.h>
#include <stdio.h>

int __tgt_target_kernel(void *loc, int64_t device, int32_t teams, int32_t threads, void *host_ptr,
                        void *args) {
  (void)loc; (void)device; (void)teams; (void)threads; (void)host_ptr; (void)args;
  return 1;
}

int main(void) {
  int x = 1;
#pragma omp target map(tofrom : x)
  x += 1;
  printf("x=%d\n", x);
  return 0;
}
