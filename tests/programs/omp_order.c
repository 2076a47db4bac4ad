/* Stands between offload-loader and libomptarget, as a second definition of
 * __tgt_register_lib would: prints the ELF e_flags of each image of the
 * descriptor it is handed (an AMDGPU code object's processor and feature
 * settings, at offset 48 of its ELF64 header), in the order handed, then
 * passes the call on to the next definition (libomptarget's), as
 * offload-loader does. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct image { const char *start, *end; void *entries_begin, *entries_end; };
struct desc { int32_t count; struct image *images; void *entries_begin, *entries_end; };

static unsigned flags_of(const char *image) {
  uint32_t flags;
  memcpy(&flags, image + 48, 4);
  return flags;
}

void __tgt_register_lib(struct desc *d) {
  for (int i = 0; i < d->count; i++)
    fprintf(stderr, "vendor: image %d: %#x\n", i, flags_of(d->images[i].start));
  void (*next)(struct desc *) = (void (*)(struct desc *))dlsym(RTLD_NEXT, "__tgt_register_lib");
  if (next) next(d);
}

void __tgt_unregister_lib(struct desc *d) {
  fprintf(stderr, "vendor: unregister %d images, first %#x\n", d->count,
          d->count ? flags_of(d->images[0].start) : 0u);
  void (*next)(struct desc *) = (void (*)(struct desc *))dlsym(RTLD_NEXT, "__tgt_unregister_lib");
  if (next) next(d);
}
