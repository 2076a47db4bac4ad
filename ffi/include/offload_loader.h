/*
 * offload_loader.h -- C ABI of offload-loader.
 *
 * Link liboffload_loader (shared: -loffload_loader, or static:
 * liboffload_loader.a with -lpthread -ldl -lm) into a program that clang built
 * for HIP (-x hip --offload-arch=...) or OpenMP offload (-fopenmp
 * --offload-arch=...), or that nvcc built with -cudart none (CUDA 13's
 * __cudaRegisterFatBinary family). The registration calls its startup code makes are
 * answered here: the program's images are found in memory, the best image for
 * each GPU found on this machine is selected by the target-ID rules, loaded
 * through the HSA runtime or the CUDA driver (lazily at first lookup, or at
 * the first query after registration with OFFLOAD_LOADER_EAGER=1), and every
 * registered kernel and variable is resolved to its device handle or address.
 *
 * Registration and unregistration only record: devices are detected, images
 * selected and loaded, at the first query or lookup, and the modules of an
 * unregistered library are unloaded by the next query. They run in
 * constructors and destructors, where the dynamic loader's lock may be held,
 * and wait there on no other thread (beyond readers of the library's memory,
 * which do no more than copy it).
 *
 * Out of scope: launching kernels, allocating or copying memory. This library
 * exports no hipLaunchKernel, hipMalloc or __tgt_target_kernel; the runtime
 * above it uses the query API below to get handles and addresses.
 *
 * Never fatal: no entry point aborts or unwinds into the caller. A failure
 * (no GPU, no compatible image, a malformed fat binary, a driver error) is
 * reported on stderr when the program could not run otherwise, recorded as
 * the calling thread's last error, and registration goes on.
 *
 * Environment:
 *   OFFLOAD_LOADER_DEVICES=gfx90a:sramecc+:xnack-,sm_80  use these devices
 *   OFFLOAD_LOADER_HSA_LIBRARY, OFFLOAD_LOADER_CUDA_LIBRARY  driver paths
 *   OFFLOAD_LOADER_EAGER=1   load images at the first query after registration,
 *                            not at each library's first lookup
 *   OFFLOAD_LOADER_INFO=1    one line per registration and device on stderr
 *   OFFLOAD_LOADER_LOG=...   tracing filter, e.g. offload_loader=debug
 *
 * All functions are thread-safe.
 */
#ifndef OFFLOAD_LOADER_H
#define OFFLOAD_LOADER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version --------------------------------------------------------- */
/* The version of this header; offload_loader_version() gives the library's.
 * The library's SONAME is liboffload_loader.so.<MAJOR>. */
#define OFFLOAD_LOADER_VERSION_MAJOR 0
#define OFFLOAD_LOADER_VERSION_MINOR 1
#define OFFLOAD_LOADER_VERSION_PATCH 0
#define OFFLOAD_LOADER_VERSION_STRING "0.1.0"

/* ---- Return codes of the query API ---------------------------------- */
#define OFFLOAD_LOADER_OK 0
#define OFFLOAD_LOADER_NOT_FOUND (-1) /* no such device, library, symbol */
#define OFFLOAD_LOADER_NO_IMAGE (-2)  /* no compatible image for the device */
#define OFFLOAD_LOADER_DRIVER (-3)    /* the driver failed to load/resolve */
#define OFFLOAD_LOADER_INVALID (-4)   /* null pointer or bad argument */
#define OFFLOAD_LOADER_TOO_SMALL (-5) /* caller's buffer too small */
#define OFFLOAD_LOADER_INTERNAL (-6)  /* internal error, caught */
#define OFFLOAD_LOADER_BAD_IMAGE (-7) /* the image cannot be read: malformed, hash mismatch, compressed */

/* ---- HIP registration (emitted by clang in __hip_module_ctor/dtor) ---- */

/* `wrapper` points to {uint32 magic 0x48495046, uint32 version 1,
 * const void* fatbin, void* unused} in .hipFatBinSegment; fatbin is a clang
 * offload bundle or a CCOB compressed bundle, parsed at first use. Returns
 * the handle passed to the calls below: an opaque token, never dereferenced,
 * never NULL. */
void **__hipRegisterFatBinary(const void *wrapper);
/* Releases a handle once; a handle released twice or never issued is an
 * error (offload_loader_last_error), never a crash. Returns only when no
 * other thread still reads the library's memory. */
void __hipUnregisterFatBinary(void **handle);
int __hipRegisterFunction(void **handle, const void *host_stub, char *dev_name,
                          const char *name, int thread_limit, void *tid,
                          void *bid, void *block_dim, void *grid_dim,
                          int *warp_size);
void __hipRegisterVar(void **handle, void *host_var, char *dev_name,
                      const char *name, int ext, size_t size, int constant,
                      int global);
/* Recorded and resolved; no managed memory is allocated: *pointer is left. */
void __hipRegisterManagedVar(void *handle, void **pointer, void *init_value,
                             const char *name, size_t size, unsigned align);
void __hipRegisterSurface(void **handle, void *var, char *dev_name,
                          const char *name, int dim, int ext);
void __hipRegisterTexture(void **handle, void *var, char *dev_name,
                          const char *name, int dim, int norm, int ext);

/* ---- CUDA registration (nvcc -cudart none; CUDA's crt/host_runtime.h) -- */

/* Declared here only for C programs that do not include CUDA's own headers
 * (which declare the same functions with CUDA's types). */
#if !defined(__CUDACC__) && !defined(__CUDA_RUNTIME_H__)
typedef struct offload_loader_dim3 {
  unsigned x, y, z;
} offload_loader_dim3;

/* `wrapper` points to {uint32 magic 0x466243b1, uint32 version, const void*
 * fatbin, void* unused} in .nvFatBinSegment. Returns a handle as HIP's. */
void **__cudaRegisterFatBinary(void *wrapper);
/* Nothing is left to do at the end of registration. */
void __cudaRegisterFatBinaryEnd(void **handle);
/* Releases a handle once, as __hipUnregisterFatBinary. */
void __cudaUnregisterFatBinary(void **handle);
/* nvcc's managed-variable initialiser calls this (nvcc 13.0 emits it into every
 * -cudart none program with a device variable): loads the selected image on
 * every device that has one, then points each managed variable's host pointer
 * that is still null at the driver's memory for it (the first device's
 * module), or with no GPU at host memory holding its initial value. 1 when an
 * image was loaded; 0 and the last error for a handle that names no
 * registered fat binary, or a failed load. Not from a constructor: it detects
 * the devices. */
char __cudaInitModule(void **handle);
/* A __managed__ variable: nvcc's host code reaches it through the pointer at
 * host_var_ptr, which __cudaInitModule sets; looked up by that address then. */
void __cudaRegisterManagedVar(void **handle, void **host_var_ptr,
                              char *device_address, const char *name, int ext,
                              size_t size, int constant, int global);
void __cudaRegisterFunction(void **handle, const char *host_fun,
                            char *device_fun, const char *name,
                            int thread_limit, void *tid, void *bid,
                            void *block_dim, void *grid_dim, int *warp_size);
void __cudaRegisterVar(void **handle, char *host_var, char *device_address,
                       const char *name, int ext, size_t size, int constant,
                       int global);
/* The launch configuration a kernel's host stub pops: kept per thread. */
unsigned __cudaPushCallConfiguration(offload_loader_dim3 grid,
                                     offload_loader_dim3 block, size_t shared,
                                     void *stream);
int __cudaPopCallConfiguration(offload_loader_dim3 *grid,
                               offload_loader_dim3 *block, size_t *shared,
                               void **stream);
/* The CUfunction of a host stub on device 0 (loads the image if needed). */
int __cudaGetKernel(void **kernel, const void *host_fun);
/* Always cudaErrorNotSupported (801): launch with cuLaunchKernel. */
int __cudaLaunchKernel(const void *kernel, offload_loader_dim3 grid,
                       offload_loader_dim3 block, void **args, size_t shared,
                       void *stream);
#endif

/* ---- OpenMP registration (emitted by clang's offload wrapper) --------- */

/* struct __tgt_bin_desc { int32_t NumDeviceImages; __tgt_device_image
 * *DeviceImages; entry *HostEntriesBegin, *HostEntriesEnd; } where
 * __tgt_device_image is {void *ImageStart, *ImageEnd; entry *EntriesBegin,
 * *EntriesEnd;}; images may be LLVM offload binaries (0x10FF10AD) or ELF;
 * entries use the legacy 32-byte or the LLVM 20+ 56-byte layout. */
void __tgt_register_lib(void *desc);
void __tgt_unregister_lib(void *desc);
/* Obsolete (requirements travel as entries since LLVM 18); recorded only. */
void __tgt_register_requires(int64_t flags);
/* Does nothing: libomptarget loads its plugins here, from a constructor;
 * this library detects devices at the first query instead. */
void __tgt_init_all_rtls(void);
/* AOMP: {int32 version, image_number, number_images; char *offload_arch;
 * char *compile_opts}: names the target of image `image_number` of the next
 * registered descriptor when the image itself does not say. */
void __tgt_register_image_info(void *image_info);

/* ---- Query API --------------------------------------------------------- */

/* The library's version, "MAJOR.MINOR.PATCH" (static storage; never NULL),
 * to compare with OFFLOAD_LOADER_VERSION_STRING at run time. */
const char *offload_loader_version(void);

/* Devices found (or given by OFFLOAD_LOADER_DEVICES). */
int offload_loader_device_count(void);
/* Device target ("gfx90a:sramecc+:xnack-", "sm_90"), NUL-terminated. */
int offload_loader_device_target(int device, char *buf, size_t len);

/* Libraries registered so far, unregistered ones included; ids run 0..count-1. */
int offload_loader_library_count(void);
/* Kernels and variables registered in a library, or -1. */
int offload_loader_symbol_count(int library);
/* The image selected for `device`: its index in the container, target ID,
 * and bytes (valid while the library is registered). Any out-pointer may be
 * NULL. OFFLOAD_LOADER_NO_IMAGE when no image fits. */
int offload_loader_selected_image(int library, int device, int *index,
                                  char *target, size_t target_len,
                                  const void **data, size_t *size);

/* Device handle of a kernel by its host stub or device-side name: an HSA
 * kernel object (name.kd) or a CUfunction. Loads the image if needed. */
int offload_loader_kernel(const void *host_stub, int device, uint64_t *handle);
int offload_loader_kernel_by_name(const char *name, int device,
                                  uint64_t *handle);
/* Device address and size of a variable by its host shadow address. */
int offload_loader_variable(const void *host_var, int device,
                            uint64_t *address, uint64_t *size);

/* The calling thread's last error, or NULL; valid until its next call. */
const char *offload_loader_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* OFFLOAD_LOADER_H */
