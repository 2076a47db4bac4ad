/* C example: an OpenMP offload program linked with liboffload_loader that asks
 * the library what it registered and selected. Built and run by
 * tests/ffi_openmp.rs; see README "Using the library".
 *
 * An OpenMP offload program: one declare-target variable and one target
 * region (a kernel). libomptarget is not packaged in Debian, so the program
 * defines the launch entry point itself: offloading "fails" and the region
 * runs on the host, which is all registration needs. */
#include <stdint.h>
#include <stdio.h>
#include "offload_loader.h"

int counter = 5;
#pragma omp declare target(counter)

int __tgt_target_kernel(void *loc, int64_t device, int32_t teams, int32_t threads, void *host_ptr, void *args) {
  (void)loc; (void)device; (void)teams; (void)threads; (void)host_ptr; (void)args;
  return 1;
}

int main(void) {
  int x = 1;
#pragma omp target map(tofrom : x)
  { x += counter; }
  int n = offload_loader_device_count();
  printf("x=%d devices=%d libraries=%d symbols=%d\n", x, n, offload_loader_library_count(), offload_loader_symbol_count(0));
  for (int d = 0; d < n; d++) {
    char device[64] = "", target[64] = "";
    int index = -1;
    uint64_t a = 0, s = 0;
    offload_loader_device_target(d, device, sizeof device);
    int rc = offload_loader_selected_image(0, d, &index, target, sizeof target, NULL, NULL);
    printf("omp device=%s selected=%d image=%d target=%s\n", device, rc, index, target);
    rc = offload_loader_variable(&counter, d, &a, &s);
    printf("omp device=%s variable=%d size=%llu\n", device, rc, (unsigned long long)s);
  }
  return 0;
}
