/* What a HIP program needs from hip_runtime.h to be compiled with
 * -nogpuinc: the launch declarations clang looks up, and the query API. */
#ifndef HIP_PRELUDE_H
#define HIP_PRELUDE_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
typedef struct { unsigned x, y, z; } dim3;
extern "C" int hipLaunchKernel(const void *f, dim3 g, dim3 b, void **a, size_t s, void *st);
extern "C" int __hipPopCallConfiguration(dim3 *g, dim3 *b, size_t *s, void **st);
extern "C" int __hipPushCallConfiguration(dim3 g, dim3 b, size_t s, void *st);
#include "offload_loader.h"

/* Prints, for every device, the selected image and the resolved handles. */
static void report(const char *who, int library, const void *kernel, const void *var) {
  int n = offload_loader_device_count();
  for (int d = 0; d < n; d++) {
    char device[64] = "", target[64] = "";
    int index = -1;
    size_t size = 0;
    const void *data = NULL;
    uint64_t handle = 0, address = 0, vsize = 0;
    offload_loader_device_target(d, device, sizeof device);
    int rc = offload_loader_selected_image(library, d, &index, target, sizeof target, &data, &size);
    printf("%s device=%s selected=%d image=%d target=%s bytes=%zu\n", who, device, rc, index, target, size);
    rc = offload_loader_kernel(kernel, d, &handle);
    printf("%s device=%s kernel=%d%s%s\n", who, device, rc, rc ? " " : "", rc ? offload_loader_last_error() : "");
    rc = offload_loader_variable(var, d, &address, &vsize);
    printf("%s device=%s variable=%d size=%llu%s%s\n", who, device, rc, (unsigned long long)vsize, rc ? " " : "", rc ? offload_loader_last_error() : "");
  }
}
#endif
