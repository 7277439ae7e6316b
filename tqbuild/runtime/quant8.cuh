// int8 activations as runtime/act_int8.py defines them, shared by the decode kernels
// (runtime/trellis_gemv.cu, runtime/pair_gemv.cu): 8 inputs a thread loaded as float
// (`load8`), quantized in groups of 32 over 4 adjacent lanes (`quant8`), packed to
// bytes (`pack8`). Also compiled for the host by the SIMT emulator (tests/simt).
#pragma once
#include <cstdint>
#ifdef __CUDACC__
#include <cuda_fp16.h>
__device__ __forceinline__ float f16_bits_float(uint32_t h) {
    return __half2float(__ushort_as_half((unsigned short)h));
}
#else
inline float f16_bits_float(uint32_t h) { return simt::f16_float(h); }
using std::isinf;
using std::max;
using std::min;
using std::isnan;
#endif

// 8 consecutive inputs of one input row as float (dtype 0: f32, 1: bf16, 2: f16)
__device__ __forceinline__ void load8(const void* x, int dtype, size_t i, float (&v)[8]) {
    if (dtype == 0) {
        const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(x) + i);
        float4 a = __ldg(p), b = __ldg(p + 1);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        uint4 t = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + i));
        const uint32_t u[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (dtype == 1) {
                v[2 * j] = __uint_as_float(u[j] << 16);
                v[2 * j + 1] = __uint_as_float(u[j] & 0xFFFF0000u);
            } else {
                v[2 * j] = f16_bits_float(u[j] & 0xFFFF);
                v[2 * j + 1] = f16_bits_float(u[j] >> 16);
            }
        }
    }
}

// The largest |v| of a group of 32 spread over 4 adjacent lanes (8 values a lane; all
// lanes of the warp call it), and whether any value is NaN.
__device__ __forceinline__ float group_absmax(const float (&v)[8], bool& bad) {
    float a = 0.f;
    bad = false;
#pragma unroll
    for (int j = 0; j < 8; ++j) { a = fmaxf(a, fabsf(v[j])); bad |= isnan(v[j]); }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) {
        a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
        bad |= __shfl_xor_sync(0xFFFFFFFFu, (int)bad, o);
    }
    return a;
}

// Quantize 8 consecutive values of a group of 32 spread over 4 adjacent lanes
// (all lanes of the warp call it): splats q, and the group's scale and −510·Σq.
__device__ __forceinline__ void quant8(const float (&v)[8], int (&q)[8], float& gscale,
                                       int& gbias) {
    bool bad;
    const float a = group_absmax(v, bad);
    const bool ok = a > 0.f && !bad && !isinf(a);
    const float inv = ok ? __fdiv_rn(127.f, a) : 0.f;
    int sq = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int t = ok ? max(-127, min(127, (int)rintf(__fmul_rn(v[j], inv)))) : 0;
        sq += t;
        q[j] = (int)((uint32_t)(t & 0xFF) * 0x01010101u);
    }
#pragma unroll
    for (int o = 1; o <= 2; o <<= 1) sq += __shfl_xor_sync(0xFFFFFFFFu, sq, o);
    gscale = bad ? __int_as_float(0x7FC00000) : __fdiv_rn(a, 127.f);
    gbias = -510 * sq;
}

// 8 int8 values (quant8's splats: any byte of each) as 8 bytes, value j in byte j
__device__ __forceinline__ uint2 pack8(const int (&q)[8]) {
    uint2 b;
    b.x = (q[0] & 0xFF) | (q[1] & 0xFF) << 8 | (q[2] & 0xFF) << 16 | (uint32_t)(q[3] & 0xFF) << 24;
    b.y = (q[4] & 0xFF) | (q[5] & 0xFF) << 8 | (q[6] & 0xFF) << 16 | (uint32_t)(q[7] & 0xFF) << 24;
    return b;
}
