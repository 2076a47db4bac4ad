/* Managed variables, standalone: linked without libamdhip64 (-no-hip-rt),
 * so that this library alone answers __hipRegisterManagedVar. Prints what
 * the host reads and writes and what the lookup by &counter answers. */
#include "hip_prelude.h"
/* What the kernel's host stub references; nothing is launched. */
extern "C" int __hipPopCallConfiguration(dim3 *, dim3 *, size_t *, void **) { return 801; }
extern "C" int hipLaunchKernel(const void *, dim3, dim3, void **, size_t, void *) { return 801; }
__attribute__((managed)) int counter = 5;
__attribute__((global)) void bump() { counter += 1; }
int main() {
  printf("read=%d\n", counter);
  counter = 9;
  printf("written=%d\n", counter);
  fprintf(stderr, "host=%p\n", (void *)&counter);
  uint64_t address = 0, size = 0;
  int n = offload_loader_device_count();
  for (int d = 0; d < n; d++) {
    int rc = offload_loader_variable(&counter, d, &address, &size);
    /* The test driver's agents reach pinned host memory at its own address. */
    const char *at = address == (uint64_t)(uintptr_t)&counter ? "host" : "elsewhere";
    printf("device=%d lookup=%d size=%llu at=%s%s%s\n", d, rc, (unsigned long long)size, at, rc ? " " : "", rc ? offload_loader_last_error() : "");
  }
  return 0;
}
