// A shared library built by `nvcc -shared -cudart none` against
// liboffload_loader: its constructor registers its fat binary through
// __cudaRegisterFatBinary, its destructor unregisters it (tests/loader_lock.rs
// opens and closes it while other threads query).
__device__ int cuda_lib_scale = 1;
extern "C" __global__ void cuda_lib_kernel(int *x) { x[threadIdx.x] += cuda_lib_scale; }
