/* Registers a fat binary as a JIT or a framework that builds its wrappers at
 * run time does: the fat binary (the file argv[1], as `objcopy -O binary
 * --only-section` extracts it from a compiled program) and its wrapper in
 * malloc'ed memory, in no loaded object. Then registers kernel argv[2]
 * against the handle and unregisters it. Built with -DHIP (wrapper magic
 * 0x48495046, clang's CGCUDANV.cpp) or -DCUDA (0x466243b1, CUDA's
 * fatbinary_section.h); the hooks are those of clr's hip_platform.cpp and
 * CUDA's crt/host_runtime.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HIP
#define MAGIC 0x48495046u
#define REGISTER __hipRegisterFatBinary
#define FUNCTION __hipRegisterFunction
#define UNREGISTER __hipUnregisterFatBinary
#else
#define MAGIC 0x466243b1u
#define REGISTER __cudaRegisterFatBinary
#define FUNCTION __cudaRegisterFunction
#define UNREGISTER __cudaUnregisterFatBinary
#endif

struct wrapper {
  uint32_t magic;
  uint32_t version;
  const void *fatbin;
  void *unused;
};

void **REGISTER(void *);
void FUNCTION(void **, const void *, char *, const char *, int, void *, void *, void *, void *,
              int *);
void UNREGISTER(void **);

static void stub(void) {}

int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  FILE *f = fopen(argv[1], "rb");
  if (!f)
    return 2;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  /* A page-aligned copy, as the bundler aligns code objects. */
  void *fatbin = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  if (!fatbin || fread(fatbin, 1, size, f) != (size_t)size)
    return 2;
  fclose(f);
  struct wrapper *w = malloc(sizeof *w);
  w->magic = MAGIC;
  w->version = 1;
  w->fatbin = fatbin;
  w->unused = NULL;
  void **handle = REGISTER(w);
  FUNCTION(handle, (const void *)stub, argv[2], argv[2], -1, 0, 0, 0, 0, 0);
  UNREGISTER(handle);
  printf("registered and unregistered\n");
  return 0;
}
