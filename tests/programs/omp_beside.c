#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct { int n; int *data; } vec_t;
#pragma omp declare mapper(vec_t v) map(v, v.data[0:v.n])

#pragma omp declare target
int scale = 3;
#pragma omp end declare target

int main(void) {
  int a[8], sum = 0;
  for (int i = 0; i < 8; i++) a[i] = i;
#pragma omp target data map(tofrom: a)
  {
#pragma omp target
    for (int i = 0; i < 8; i++) a[i] *= scale;
    scale = 5;
#pragma omp target update to(scale)
#pragma omp target
    for (int i = 0; i < 8; i++) a[i] += scale;
  }
  for (int i = 0; i < 8; i++) sum += a[i];
  int buf[4] = {1, 2, 3, 4};
  vec_t v = {4, buf};
#pragma omp target map(tofrom: v)
  for (int i = 0; i < v.n; i++) v.data[i] *= 10;
  int dev = omp_get_default_device();
  int *p = omp_target_alloc(16 * sizeof(int), dev);
  int ok = p != NULL;
  if (p) omp_target_free(p, dev);
  printf("sum=%d v=%d,%d,%d,%d alloc=%d devices=%d\n", sum, buf[0], buf[1], buf[2], buf[3], ok, omp_get_num_devices());
  return 0;
}
