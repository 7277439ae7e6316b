// Programmatic dependent launch (sm_90+), shared by the decode kernels' sources:
// a kernel launched with it may start while the kernel before it runs; it must
// pdl_wait() before reading that kernel's output, and pdl_trigger() lets the kernel
// after it start. Without the launch attribute (or before sm_90) both are no-ops.
// (nvcc.build keys its cache on this file too: local includes are hashed.)
#pragma once
#include <cuda_runtime.h>

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// a kernel launch, with programmatic dependent launch where `pdl`
template <typename... P, typename... A>
static int launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                  bool pdl, A... args) {
    cudaLaunchConfig_t c = {};
    c.gridDim = grid;
    c.blockDim = block;
    c.dynamicSmemBytes = smem;
    c.stream = st;
    cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = a;
    c.numAttrs = pdl ? 1 : 0;
    const cudaError_t e = cudaLaunchKernelEx(&c, kernel, static_cast<P>(args)...);
    const cudaError_t pending = cudaGetLastError();  // read, so a failure is reported once
    return (int)(e != cudaSuccess ? e : pending);
}

// The runtime keeps the last error until cudaGetLastError reads it, and a launch that
// succeeds reports it: the setup calls below read their own, so a refused raise or query
// fails only itself (the launch that needed it fails on its own), never a later launch.

// allow `kernel` `smem` bytes of dynamic shared memory (beyond 48 KB: an opt-in)
template <typename K>
static cudaError_t raise_smem(K kernel, size_t smem) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) cudaGetLastError();
    return e;
}

// blocks of `kernel` an SM holds at `threads` a block and `smem` bytes (0 where refused)
template <typename K>
static int occupancy(K kernel, int threads, size_t smem) {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}
