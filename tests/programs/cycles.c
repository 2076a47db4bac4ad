/* dlopens and dlcloses the library argv[1] argv[2] times, as a plugin host
 * does, and prints the memory allocated and not freed (glibc's mallinfo2:
 * in use in the heap and in mmap'ed chunks, kB) after the first tenth of
 * the cycles and after the last: what grows per cycle. Then the resident
 * memory (kB, /proc/self/statm) at the same two points. */
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long resident_kb(void) {
  long size = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%ld %ld", &size, &resident) != 2)
    return -1;
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static long allocated_kb(void) {
  struct mallinfo2 m = mallinfo2();
  return (long)((m.uordblks + m.hblkhd) / 1024);
}

int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  long cycles = atol(argv[2]);
  long warm = 0, warm_resident = 0;
  for (long i = 0; i < cycles; ++i) {
    void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      fprintf(stderr, "%s\n", dlerror());
      return 1;
    }
    dlclose(library);
    if (i + 1 == cycles / 10) {
      warm = allocated_kb();
      warm_resident = resident_kb();
    }
  }
  printf("%ld %ld %ld %ld\n", warm, allocated_kb(), warm_resident, resident_kb());
  return 0;
}
