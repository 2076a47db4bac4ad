/* A program registering a descriptor it builds itself, as a compiler other
 * than clang-22 may lay one out: its image table is in the order the four
 * code objects IMAGE_0..IMAGE_3 (paths given with -D) are named, which may
 * put a generic family before a specific processor of it. clang-22 sorts
 * its own table so that first-fit never differs from best-fit on AMD GPUs.
 * With -DUSE_DEVICES the table has one entry (kernel `k`, which each image
 * defines: libomptarget loads no image for a descriptor without entries)
 * and main asks libomptarget for 4 bytes on each device, which loads the
 * image it gave that device (only device OMP_USE_DEVICE, where it is set).
 * With -DNO_MAIN it is a library (-shared -fPIC) registering its own
 * descriptor: a second OpenMP library of a program built from this file.
 * Layout: LLVM offload/include/omptarget.h (__tgt_device_image,
 * __tgt_bin_desc) and llvm/Frontend/Offloading/Utility.h (EntryTy, LLVM
 * 20+: version 1, kind 1 = OpenMP). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define EMBED(n, path)                                                        \
  __asm__(".section .rodata\n.balign 8\nimage" #n "_start:\n.incbin \"" path  \
          "\"\nimage" #n "_end:\n.previous\n");                               \
  extern const char image##n##_start[], image##n##_end[];

EMBED(0, IMAGE_0)
EMBED(1, IMAGE_1)
EMBED(2, IMAGE_2)
EMBED(3, IMAGE_3)

struct entry {
  uint64_t reserved;
  uint16_t version, kind;
  uint32_t flags;
  void *address;
  const char *name;
  uint64_t size, data;
  void *aux;
};
struct image { const char *start, *end; struct entry *entries_begin, *entries_end; };
struct desc { int32_t count; struct image *images; struct entry *entries_begin, *entries_end; };

#ifdef USE_DEVICES
static char k_stub;
static struct entry entries[1] = {{0, 1, 1, 0, &k_stub, "k", 0, 0, 0}};
#define ENTRIES entries, entries + 1
void *omp_target_alloc(unsigned long, int);
void omp_target_free(void *, int);
int omp_get_num_devices(void);
#else
#define ENTRIES 0, 0
#endif

void __tgt_register_lib(struct desc *);
void __tgt_unregister_lib(struct desc *);

static struct image images[4];
static struct desc desc = {4, images, ENTRIES};

static void unregister(void) { __tgt_unregister_lib(&desc); }

__attribute__((constructor)) static void reg(void) {
  images[0] = (struct image){image0_start, image0_end, ENTRIES};
  images[1] = (struct image){image1_start, image1_end, ENTRIES};
  images[2] = (struct image){image2_start, image2_end, ENTRIES};
  images[3] = (struct image){image3_start, image3_end, ENTRIES};
  __tgt_register_lib(&desc);
  atexit(unregister);
}

#ifndef NO_MAIN
int main(void) {
  printf("registered\n");
#ifdef USE_DEVICES
  const char *only = getenv("OMP_USE_DEVICE");
  for (int d = 0; d < omp_get_num_devices(); ++d) {
    if (only && atoi(only) != d)
      continue;
    void *p = omp_target_alloc(4, d);
    printf("device %d: %s\n", d, p ? "allocated" : "no memory");
    omp_target_free(p, d);
  }
#endif
  return 0;
}
#endif
