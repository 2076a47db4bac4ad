/* An OpenMP offload program for clang-14 (the clang-offload-wrapper
 * generation: the descriptor in .data.rel.ro, the image in .rodata), linked
 * with liboffload_loader standing in for libomptarget. clang-14 launches
 * through __tgt_target_mapper, defined here to "fail" so the region runs on
 * the host; the program then asks the library what it selected. */
#include <stdint.h>
#include <stdio.h>
#include "offload_loader.h"

int __tgt_target_mapper(void *loc, int64_t device, void *host_ptr, int32_t n, void **bases, void **args,
                        int64_t *sizes, int64_t *types, void **names, void **mappers) {
  (void)loc; (void)device; (void)host_ptr; (void)n; (void)bases; (void)args; (void)sizes; (void)types;
  (void)names; (void)mappers;
  return 1;
}

int main(void) {
  int x = 1;
#pragma omp target map(tofrom : x)
  { x += 41; }
  int n = offload_loader_device_count();
  printf("x=%d devices=%d libraries=%d\n", x, n, offload_loader_library_count());
  for (int d = 0; d < n; d++) {
    char device[64] = "", target[64] = "";
    int index = -1;
    const void *data = NULL;
    size_t size = 0;
    offload_loader_device_target(d, device, sizeof device);
    int rc = offload_loader_selected_image(0, d, &index, target, sizeof target, &data, &size);
    printf("wrapper device=%s selected=%d image=%d target=%s size=%zu\n", device, rc, index, target, size);
  }
  return 0;
}
