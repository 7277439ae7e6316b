// Prototype decode-matvec of a trellis code of value PAIRS (V = 2, QTIP's HYB form),
// to measure what its decode costs next to mul1's (bench/pair_gemv.py; not a shipped
// format yet). nvcc -DPK=k -DPL=L -DPQ=Q [-DPNT=threads -DPMINB=blocks].
//
// Code: a step shifts 2k bits; state s = the step's L-bit window. Its entry is
// e = bits [L−Q, L) of s·0x83DCD12D: a pair of int16 values (lo half: the step's
// first weight, hi: its second) in a 2^Q-entry table. The table is replicated per
// lane in shared memory (entry e of lane l at word 32e + l: a warp's lookups never
// conflict), so an entry's byte address is (h & ((2^Q − 1) << 7)) | 4·lane with
// h = y·(0x83DCD12D << (7 − L + Q)) and y the window shifted down (bits above the
// state left in: the product's bits below L + 7 − L + Q... do not depend on them).
// Two weights: SHF (window), IMAD (hash), LOP3 (address), LDS, IDP2A with the two
// int8 inputs (x quantized to int8 in groups of 32 by the block).
//
// Layout (prototype): a row of n weights is n/32 periods of k words; step v (0..15)
// of period p starts at bit 2k·v of its words, running into the next period's first
// word (the block's first at the end of a T = 256 block, as the shipped format), and
// meets inputs 32p + 2v, 32p + 2v + 1.
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#ifndef PK
#error "define PK, PL, PQ"
#endif
#ifndef PNT
#define PNT 512
#endif
#ifndef PMINB
#define PMINB 1
#endif

namespace {

constexpr int K = PK, L = PL, Q = PQ;
static_assert(L - Q <= 7 && L - Q >= 0, "the entry index must lie at or below bit 7 of h");
constexpr uint32_t HMUL = 0x83DCD12Du << (7 - L + Q);
constexpr uint32_t AMASK = ((1u << Q) - 1u) << 7;
constexpr int PPB = 256 / 32;  // periods a T = 256 block
constexpr int TAB_OFF = 0x10000 - 0x400;  // dynamic shared offset of the table
static_assert(Q <= 9, "a 2^Q-entry table at 0x10000 must end below 0x20000");

__device__ __forceinline__ int dp2a(uint32_t e, uint32_t xw, int acc, bool hi) {
    int d;
    if (hi) asm("dp2a.hi.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(e), "r"(xw), "r"(acc));
    else asm("dp2a.lo.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(e), "r"(xw), "r"(acc));
    return d;
}

__device__ __forceinline__ uint32_t lds(uint32_t addr) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr));
    return v;
}

// the window of step v (constant after unrolling) from the period's k words + next
__device__ __forceinline__ uint32_t window(const uint32_t (&w)[K + 1], int v) {
    const int b = 2 * K * v, wi = b >> 5, sh = b & 31;
    if (sh == 0) return w[wi];
    return (sh + L <= 32) ? (w[wi] >> sh) : __funnelshift_r(w[wi], w[wi + 1], sh);
}

__device__ __forceinline__ void load_words(const uint32_t* row, int p, uint32_t (&w)[K + 1]) {
    const int last = (p & (PPB - 1)) == PPB - 1;
    const uint32_t* a = row + K * p;
#pragma unroll
    for (int j = 0; j < K; ++j) w[j] = __ldg(a + j);
    w[K] = __ldg(a + (last ? K * (1 - PPB) : K));
}

}  // namespace

// x [M, n] bf16 -> out [M, rows] float32. A persistent block: table into shared memory,
// x quantized (int8, groups of 32), then row groups of RB rows; a row group's periods
// split over WPR warps (lanes take periods), partial sums added in a fixed order.
template <int M, int RB, int WPR>
__global__ void __launch_bounds__(PNT, PMINB) pair_rows(
    const uint32_t* __restrict__ words, const __half* __restrict__ scales,
    const uint32_t* __restrict__ table, const __nv_bfloat16* __restrict__ x,
    float* __restrict__ out, int rows, int n, float factor) {
    extern __shared__ int4 smem4[];
    // the table at shared address 0x10000 (dynamic memory starts after Hopper's 1 KB
    // reserve, at 0x400): its entry addresses have no bits below 16 but the entry's
    // and the lane's, so (h & AMASK) | (4·lane + 0x10000) is one LOP3
    uint32_t* tab = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(smem4) + TAB_OFF);
    uint32_t* xq = tab + (32 << Q);                                  // [M][n/4] int8 x4
    float* gs = reinterpret_cast<float*>(xq + M * (n >> 2));         // [M][n/32]
    float* red = gs + M * (n >> 5);                                  // [warps][RB·M]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = PNT / 32;
    for (int e = threadIdx.x; e < (1 << Q); e += PNT) {
        const uint32_t v = __ldg(table + e);
        uint4* d = reinterpret_cast<uint4*>(tab + 32 * e);
#pragma unroll
        for (int c = 0; c < 8; ++c) d[c] = make_uint4(v, v, v, v);
    }
    const int ng = n >> 5;
    for (int gi = warp; gi < M * ng; gi += nwarps) {  // a warp a group: lane = input
        const int m = gi / ng, g = gi - m * ng;
        const float v = __bfloat162float(x[(size_t)m * n + 32 * g + lane]);
        float a = fabsf(v);
#pragma unroll
        for (int o = 16; o; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
        const float inv = a > 0.f ? 127.f / a : 0.f;
        const int q = max(-127, min(127, __float2int_rn(v * inv)));
        reinterpret_cast<int8_t*>(xq)[(size_t)m * n + 32 * g + lane] = (int8_t)q;
        if (lane == 0) gs[m * ng + g] = a / 127.f;
    }
    __syncthreads();
    const uint32_t tbase = (uint32_t)__cvta_generic_to_shared(tab);
    if ((tbase & 0xFFFFu) != 0u) {  // not where the layout needs it: say so in the output
        for (int i = blockIdx.x * PNT + threadIdx.x; i < M * rows; i += gridDim.x * PNT)
            out[i] = __int_as_float(0x7FC00000);
        return;
    }
    const uint32_t lane4 = tbase | (4 * lane);
    constexpr int RGB = PNT / 32 / WPR;  // row groups a block
    const int rg = warp / WPR, wr = warp - rg * WPR;
    const int nrg = (rows + RB - 1) / RB;
    for (int b0 = blockIdx.x * RGB; b0 < nrg; b0 += gridDim.x * RGB) {
        const int r0 = (b0 + rg) * RB;
        const uint32_t* wrow[RB];
#pragma unroll
        for (int r = 0; r < RB; ++r) wrow[r] = words + (size_t)min(r0 + r, rows - 1) * (ng * K);
        float facc[RB][M];
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int m = 0; m < M; ++m) facc[r][m] = 0.f;
        const int S = WPR * 32;
        uint32_t nw[RB][K + 1];
        int p = wr * 32 + lane;
        if (p < ng) {
#pragma unroll
            for (int r = 0; r < RB; ++r) load_words(wrow[r], p, nw[r]);
        }
        for (; p < ng; p += S) {
            uint32_t w[RB][K + 1];
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int j = 0; j <= K; ++j) w[r][j] = nw[r][j];
            if (p + S < ng) {
#pragma unroll
                for (int r = 0; r < RB; ++r) load_words(wrow[r], p + S, nw[r]);
            }
            uint4 xa[M], xb[M];
#pragma unroll
            for (int m = 0; m < M; ++m) {
                xa[m] = reinterpret_cast<const uint4*>(xq + m * (n >> 2) + 8 * p)[0];
                xb[m] = reinterpret_cast<const uint4*>(xq + m * (n >> 2) + 8 * p)[1];
            }
            int acc[RB][M];
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int m = 0; m < M; ++m) acc[r][m] = 0;
#pragma unroll
            for (int v = 0; v < 16; ++v) {
#pragma unroll
                for (int r = 0; r < RB; ++r) {
                    const uint32_t h = window(w[r], v) * HMUL;
                    const uint32_t e = lds((h & AMASK) | lane4);
#pragma unroll
                    for (int m = 0; m < M; ++m) {
                        const int i = v >> 1;
                        const uint32_t xw = i == 0 ? xa[m].x : i == 1 ? xa[m].y : i == 2 ? xa[m].z
                                          : i == 3 ? xa[m].w : i == 4 ? xb[m].x : i == 5 ? xb[m].y
                                          : i == 6 ? xb[m].z : xb[m].w;
                        acc[r][m] = dp2a(e, xw, acc[r][m], v & 1);
                    }
                }
            }
#pragma unroll
            for (int m = 0; m < M; ++m) {
                const float g = gs[m * ng + p];
#pragma unroll
                for (int r = 0; r < RB; ++r) facc[r][m] = fmaf(g, (float)acc[r][m], facc[r][m]);
            }
        }
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int m = 0; m < M; ++m) {
                float v = facc[r][m];
#pragma unroll
                for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
                facc[r][m] = v;
            }
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int m = 0; m < M; ++m) red[warp * RB * M + r * M + m] = facc[r][m];
        }
        __syncthreads();
        for (int t = threadIdx.x; t < RGB * RB * M; t += PNT) {
            const int g2 = t / (RB * M), e = t - g2 * RB * M, r = e / M, m = e - r * M;
            const int row = (b0 + g2) * RB + r;
            float v = 0.f;
            for (int i = 0; i < WPR; ++i) v += red[(g2 * WPR + i) * RB * M + e];
            if (b0 + g2 < nrg && row < rows)
                out[(size_t)m * rows + row] = v * __half2float(scales[row]) * factor;
        }
        __syncthreads();
    }
}

namespace {
template <int M, int RB, int WPR>
int launch(const uint32_t* w, const __half* s, const uint32_t* t, const __nv_bfloat16* x,
           float* out, int rows, int n, float factor, cudaStream_t st) {
    const size_t smem = TAB_OFF + (size_t)(32 << Q) * 4 + (size_t)M * n + (size_t)M * (n / 32) * 4 +
                        (size_t)(PNT / 32) * RB * M * 4;
    auto kern = pair_rows<M, RB, WPR>;
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem))
        return 1;
    int per_sm = 0, sms = 0, dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, PNT, smem);
    if (per_sm < 1) return 2;
    kern<<<sms * per_sm, PNT, smem, st>>>(w, s, t, x, out, rows, n, factor);
    return cudaGetLastError() != cudaSuccess ? 3 : 0;
}
}  // namespace

extern "C" int pair_gemv(const void* w, const void* s, const void* t, const void* x, void* out,
                         int M, int rows, int n, int rb, int wpr, float factor, void* stream) {
    auto W = (const uint32_t*)w;
    auto S = (const __half*)s;
    auto Tb = (const uint32_t*)t;
    auto X = (const __nv_bfloat16*)x;
    auto O = (float*)out;
    auto st = (cudaStream_t)stream;
#define PAIR_CASE(m, r, p) \
    if (M == m && rb == r && wpr == p) return launch<m, r, p>(W, S, Tb, X, O, rows, n, factor, st);
    PAIR_CASE(1, 2, 1) PAIR_CASE(1, 2, 2) PAIR_CASE(1, 2, 4) PAIR_CASE(1, 4, 1)
    PAIR_CASE(1, 4, 2) PAIR_CASE(1, 4, 4) PAIR_CASE(4, 1, 1) PAIR_CASE(4, 1, 2)
    PAIR_CASE(4, 2, 1) PAIR_CASE(4, 2, 2)
#undef PAIR_CASE
    return 4;
}
