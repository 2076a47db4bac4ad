// See two_modules.cu.
__global__ void there(int *x) { *x = 7; }
void other(int *x) { there<<<1, 1>>>(x); }
