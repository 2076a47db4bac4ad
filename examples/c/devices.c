/* C example: a program that links the installed liboffload_loader and asks
 * it for its version and the devices it finds (or that OFFLOAD_LOADER_DEVICES
 * names). Built with CMake (examples/c/CMakeLists.txt) and with pkg-config by
 * tests/c_library.rs; see README "Installing".
 *
 *   cc devices.c $(pkg-config --cflags --libs offload_loader) -o devices
 */
#include <stdio.h>
#include <string.h>

#include "offload_loader.h"

int main(void) {
  const char *version = offload_loader_version();
  /* The library loaded at run time must be the one this was compiled for. */
  if (strcmp(version, OFFLOAD_LOADER_VERSION_STRING) != 0) {
    fprintf(stderr, "header %s, library %s\n", OFFLOAD_LOADER_VERSION_STRING, version);
    return 1;
  }
  int n = offload_loader_device_count();
  printf("liboffload_loader %s: %d device(s)\n", version, n);
  for (int d = 0; d < n; d++) {
    char target[64] = "";
    if (offload_loader_device_target(d, target, sizeof target) != OFFLOAD_LOADER_OK) {
      const char *error = offload_loader_last_error();
      fprintf(stderr, "device %d: %s\n", d, error ? error : "?");
      return 1;
    }
    printf("device %d: %s\n", d, target);
  }
  return 0;
}
