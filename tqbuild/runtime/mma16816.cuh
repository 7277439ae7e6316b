// mma.sync m16n8k16 with float32 sums, shared by the tensor-core decode kernels
// (runtime/affine_gemv.cu, runtime/pair_gemv.cu): DT 0 bf16, 1 fp16 operands. Device only;
// the SIMT emulator (tests/simt/simt_host.h) supplies its own with the same fragment layout.
#pragma once
#include <cstdint>

// acc (16 × 8 float32, this lane's 4) += A (16 × 16) · B (16 × 8)
template <int DT>
__device__ __forceinline__ void mma16816(float* acc, const uint32_t* a, const uint32_t* b) {
  if constexpr (DT == 0)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
