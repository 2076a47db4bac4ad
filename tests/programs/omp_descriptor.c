/* A program registering a descriptor it builds itself, as a compiler other
 * than clang-22 may lay one out: its image table is in the order the four
 * code objects IMAGE_0..IMAGE_3 (paths given with -D) are named, which may
 * put a generic family before a specific processor of it. clang-22 sorts
 * its own table so that first-fit never differs from best-fit on AMD GPUs.
 * Layout: LLVM offload/include/omptarget.h (__tgt_device_image,
 * __tgt_bin_desc). */
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

struct image { const char *start, *end; void *entries_begin, *entries_end; };
struct desc { int32_t count; struct image *images; void *entries_begin, *entries_end; };

void __tgt_register_lib(struct desc *);
void __tgt_unregister_lib(struct desc *);

static struct image images[4];
static struct desc desc = {4, images, 0, 0};

static void unregister(void) { __tgt_unregister_lib(&desc); }

__attribute__((constructor)) static void reg(void) {
  images[0] = (struct image){image0_start, image0_end, 0, 0};
  images[1] = (struct image){image1_start, image1_end, 0, 0};
  images[2] = (struct image){image2_start, image2_end, 0, 0};
  images[3] = (struct image){image3_start, image3_end, 0, 0};
  __tgt_register_lib(&desc);
  atexit(unregister);
}

int main(void) {
  printf("registered\n");
  return 0;
}
