// See two_modules.cu. The table makes its cubin larger than a page, so that
// emptying its fat binary frees space and the result is written.
__device__ int table[32768] = {7};
__global__ void there(int *x) { *x = table[threadIdx.x]; }
void other(int *x) { there<<<1, 1>>>(x); }
