/* A HIP program that launches with <<<>>> (clang emits calls to
 * __hipPushCallConfiguration, __hipPopCallConfiguration and hipLaunchKernel,
 * which only libamdhip64 defines) and asks libamdhip64 about its kernel. */
#include "hip_prelude.h"
extern "C" int hipGetDeviceCount(int *);
extern "C" int hipFuncGetAttributes(void *attr, const void *f);
extern "C" const char *hipGetErrorName(int);
extern "C" int hipGetLastError(void);
__attribute__((global)) void k(int *p) { *p = 1; }
__attribute__((device)) int counter = 7;
int main() {
  int n = -1;
  int rc = hipGetDeviceCount(&n);
  printf("count rc=%d (%s) n=%d\n", rc, hipGetErrorName(rc), n);
  char attr[256];
  rc = hipFuncGetAttributes(attr, (const void *)k);
  printf("attributes rc=%d (%s)\n", rc, hipGetErrorName(rc));
  k<<<dim3{1,1,1}, dim3{1,1,1}, 0, nullptr>>>(nullptr);
  rc = hipGetLastError();
  printf("launch rc=%d (%s)\n", rc, hipGetErrorName(rc));
  return 0;
}
