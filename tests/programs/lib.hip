#include "hip_prelude.h"
__attribute__((global)) void lib_kernel(int *p) { *p = 7; }
__attribute__((device)) int lib_var = 1;
extern "C" void lib_report(int library) { report("lib", library, (const void *)lib_kernel, (const void *)&lib_var); }
