#include "hip_prelude.h"
__attribute__((global)) void scale(float *p, float f) { p[0] *= f; }
__attribute__((device)) int counter = 3;
int main() {
  printf("devices=%d libraries=%d\n", offload_loader_device_count(), offload_loader_library_count());
  report("app", 0, (const void *)scale, (const void *)&counter);
  return 0;
}
