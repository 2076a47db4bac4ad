/* dlopens the library argv[1] once and prints how long dlopen took (its
 * constructors: here, every fat binary's registration) and how much
 * anonymous memory it added (RssAnon, /proc/self/status). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static long anon_kb(void) {
  char line[256];
  long v = -1;
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "RssAnon:", 8))
      sscanf(line + 8, "%ld", &v);
  fclose(f);
  return v;
}

int main(int argc, char **argv) {
  if (argc < 2)
    return 2;
  long before = anon_kb();
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  void *h = dlopen(argv[1], RTLD_NOW);
  clock_gettime(CLOCK_MONOTONIC, &b);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  printf("%.3f %ld\n", (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6,
         anon_kb() - before);
  return 0;
}
