// Decode-matvec of the pair trellis code (format version 3, kernels/trellis_codes.py) with
// int8 activations, one library per (k, L): nvcc -DTQ_K=k -DTQ_L=L. Also compiled for
// the host by the SIMT emulator (tests/simt/pair_host.cpp): device asm stays behind
// __CUDACC__.
//
// A step of two weights decodes as: its L-bit window (SHF; bits above the state stay
// in), h = window · (0x83DCD12D << (7 − L + 9)) (IMAD: bits [7, 16) of h are the table
// entry, bits [L − 9, L) of s·0x83DCD12D, which do not depend on the bits above the
// state), the entry's shared address (h & 0xFF80) | (0x10000 + 4·lane) (LOP3: the
// 512-entry table of int16 pairs sits at shared address 0x10000, entry e of lane l at
// word 32·e + l, so a warp's lookups never conflict), LDS, and IDP2A with the two int8
// inputs: ~3 instructions a weight against mul1's ~4.5 (bench/pair_gemv.py).
//
// Layout (DESIGN §5, formats/trellis.py): a period of 32 weights is k words; its step v
// (0..15) starts at bit 2k·v, its window running into the next period's first word (the
// block's first at the block's end). With col0 = (p / ppb)·T + T − 1 − 32·(p % ppb) the
// step's low int16 meets input col0 − 2v − 1 and its high int16 input col0 − 2v: in the
// period's aligned group g of 32, inputs 32g + 30 − 2v and 32g + 31 − 2v, the high or
// (v odd) low half of the group's int8 word 7 − v/2.
//
// `pair_rows` (axis 1): a persistent block quantizes x into shared memory, then warps
// take row groups of RB rows (WPR warps a group, lanes taking periods). `pair_cols`
// (axis 0, stored row i = input i, M = 1): x · the stored rows' scales quantized first
// by `pair_quantize`; lane = a period of output columns (a tile of 32 periods a warp),
// each warp a contiguous range of (tile, input) units, its sums added in the block in
// warp order, the blocks' partials by `pair_cols_sum` in block order (deterministic).
#include <cstdint>
#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define TQ_DEV __device__ __forceinline__
#define TQ_GLOBAL __global__
#define TQ_BOUNDS(n) __launch_bounds__(n)
#endif
#include "smem_abs.cuh"

#ifndef TQ_K
#error "define TQ_K and TQ_L"
#endif

namespace {

constexpr int K = TQ_K, L = TQ_L, Q = 9;
static_assert(L - Q >= 0 && L - Q <= 7, "the entry index must lie at or below bit 7 of h");
constexpr uint32_t HMUL = 0x83DCD12Du << (7 - L + Q);
constexpr uint32_t AMASK = ((1u << Q) - 1u) << 7;
constexpr uint32_t TAB = 0x10000;        // the table's shared address
constexpr int TAB_OFF = 0x10000 - 0x400;  // its offset in dynamic shared memory (after
                                          // Hopper's 1 KB reserve; checked in the kernel)
constexpr int TAB_WORDS = 32 << Q;
constexpr int NT = 512;                   // threads a block
constexpr int RED_OFF = 0x20000 - 0x400;  // pair_cols: the block's sums, after the table

#ifdef __CUDACC__
TQ_DEV int dp2a_lo(uint32_t e, uint32_t x, int c) { return __dp2a_lo((int)e, (int)x, c); }
TQ_DEV int dp2a_hi(uint32_t e, uint32_t x, int c) { return __dp2a_hi((int)e, (int)x, c); }
TQ_DEV float xload(const void* x, int dt, size_t i) {
    if (dt == 1) return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(x)[i]);
    if (dt == 2) return __half2float(reinterpret_cast<const __half*>(x)[i]);
    return reinterpret_cast<const float*>(x)[i];
}
TQ_DEV float half_of(const uint16_t* s, int i) {
    return __half2float(__ushort_as_half(__ldg(s + i)));
}
TQ_DEV float shfl_xor(float v, int o) { return __shfl_xor_sync(0xFFFFFFFFu, v, o); }
#else
TQ_DEV int dp2a_lo(uint32_t e, uint32_t x, int c) {
    return c + (int16_t)(e & 0xFFFF) * (int8_t)(x & 0xFF) +
           (int16_t)(e >> 16) * (int8_t)((x >> 8) & 0xFF);
}
TQ_DEV int dp2a_hi(uint32_t e, uint32_t x, int c) { return dp2a_lo(e, x >> 16, c); }
TQ_DEV float xload(const void* x, int dt, size_t i) {
    if (dt == 0) return reinterpret_cast<const float*>(x)[i];
    const uint16_t h = reinterpret_cast<const uint16_t*>(x)[i];
    return dt == 1 ? simt::bf16_float(h) : simt::f16_float(h);
}
TQ_DEV float half_of(const uint16_t* s, int i) { return simt::f16_float(s[i]); }
TQ_DEV float shfl_xor(float v, int o) { return warp_exchange(v, (int)(threadIdx.x & 31) ^ o); }
TQ_DEV uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, int sh) {
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh & 31));
}
#endif

// the window of step v (a constant after unrolling) from a period's k words + the next
TQ_DEV uint32_t window(const uint32_t (&w)[K + 1], int v) {
    const int b = 2 * K * v, wi = b >> 5, sh = b & 31;
    if (sh == 0) return w[wi];
    return (sh + L <= 32) ? (w[wi] >> sh) : __funnelshift_r(w[wi], w[wi + 1], sh);
}

TQ_DEV void load_words(const uint32_t* row, int p, int ppb, uint32_t (&w)[K + 1]) {
    const int last = (p & (ppb - 1)) == ppb - 1;
    const uint32_t* a = row + K * p;
#pragma unroll
    for (int j = 0; j < K; ++j) w[j] = __ldg(a + j);
    w[K] = __ldg(a + (last ? K * (1 - ppb) : K));
}

// the aligned group of 32 inputs (rows) or outputs (cols) period p meets
TQ_DEV int group_of(int p, int ppb) {
    const int pb = p & (ppb - 1);
    return (p - pb) + (ppb - 1 - pb);
}

// the table into shared memory at TAB, each entry 32 times (one a lane)
TQ_DEV void load_table(const uint32_t* table, char* base) {
    uint32_t* tab = reinterpret_cast<uint32_t*>(base + TAB_OFF);
    for (int i = threadIdx.x; i < TAB_WORDS; i += NT) tab[i] = __ldg(table + (i >> 5));
}

// the int8 quantization of 32 inputs v (lane = input) over a warp: q, and the scale
TQ_DEV int quant_lane(float v, float& scale) {
    float a = fabsf(v);
    for (int o = 16; o; o >>= 1) a = fmaxf(a, shfl_xor(a, o));
    const bool ok = a > 0.f && a == a && a <= 3.4e38f;
    const float inv = ok ? 127.f / a : 0.f;
    scale = ok ? a / 127.f : (a == a ? 0.f : __int_as_float(0x7FC00000));
    return ok ? max(-127, min(127, (int)rintf(v * inv))) : 0;
}

}  // namespace

// x [M, n] (dtype 0 f32, 1 bf16, 2 f16) -> out [M, rows] float32 (· row scale · factor)
template <int M, int RB, int WPR>
TQ_GLOBAL void TQ_BOUNDS(NT) pair_rows(const uint32_t* __restrict__ words,
                                       const uint16_t* __restrict__ scales,
                                       const uint32_t* __restrict__ table, const void* x, int dt,
                                       float* __restrict__ out, int rows, int n, int ppb,
                                       float factor, int nblocks) {
    TQ_DYN_SMEM;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int ng = n >> 5;
    uint32_t* xq = reinterpret_cast<uint32_t*>(smem + TAB_OFF + TAB_WORDS * 4);  // [M][n/4]
    float* gs = reinterpret_cast<float*>(xq + M * (n >> 2));                     // [M][n/32]
    float* red = gs + M * ng;                                                    // [warps][RB·M]
    load_table(table, smem);
    for (int gi = warp; gi < M * ng; gi += NT / 32) {  // a warp a group: lane = input
        const int m = gi / ng, g = gi - m * ng;
        float s;
        const int q = quant_lane(xload(x, dt, (size_t)m * n + 32 * g + lane), s);
        reinterpret_cast<int8_t*>(xq)[(size_t)m * n + 32 * g + lane] = (int8_t)q;
        if (lane == 0) gs[m * ng + g] = s;
    }
    __syncthreads();
    const uint32_t tb = shared_addr(smem + TAB_OFF);
    if (tb != TAB) {  // the layout's premise (dynamic shared memory at 0x400) does not hold
        for (int i = blockIdx.x * NT + threadIdx.x; i < M * rows; i += nblocks * NT)
            out[i] = __int_as_float(0x7FC00000);
        return;
    }
    const uint32_t lane4 = tb | (4u * lane);  // tb == TAB: a runtime value, one LOP3
    constexpr int RGB = NT / 32 / WPR;  // row groups a block
    const int rg = warp / WPR, wr = warp - rg * WPR, S = WPR * 32;
    const int nrg = (rows + RB - 1) / RB;
    for (int b0 = blockIdx.x * RGB; b0 < nrg; b0 += nblocks * RGB) {
        const int r0 = (b0 + rg) * RB;
        const uint32_t* wrow[RB];
#pragma unroll
        for (int r = 0; r < RB; ++r) wrow[r] = words + (size_t)min(r0 + r, rows - 1) * (ng * K);
        float facc[RB][M];
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int m = 0; m < M; ++m) facc[r][m] = 0.f;
        uint32_t nw[RB][K + 1];
        int p = wr * 32 + lane;
        if (p < ng) {
#pragma unroll
            for (int r = 0; r < RB; ++r) load_words(wrow[r], p, ppb, nw[r]);
        }
        for (; p < ng; p += S) {
            uint32_t w[RB][K + 1];
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int j = 0; j <= K; ++j) w[r][j] = nw[r][j];
            if (p + S < ng) {
#pragma unroll
                for (int r = 0; r < RB; ++r) load_words(wrow[r], p + S, ppb, nw[r]);
            }
            const int g = group_of(p, ppb);
            uint32_t xw[M][8];
#pragma unroll
            for (int m = 0; m < M; ++m)
#pragma unroll
                for (int j = 0; j < 8; ++j) xw[m][j] = xq[m * (n >> 2) + 8 * g + j];
            int acc[RB][M];
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int m = 0; m < M; ++m) acc[r][m] = 0;
#pragma unroll
            for (int v = 0; v < 16; ++v) {
#pragma unroll
                for (int r = 0; r < RB; ++r) {
                    const uint32_t e = lds_abs(((window(w[r], v) * HMUL) & AMASK) | lane4);
#pragma unroll
                    for (int m = 0; m < M; ++m)
                        acc[r][m] = (v & 1) ? dp2a_lo(e, xw[m][7 - (v >> 1)], acc[r][m])
                                            : dp2a_hi(e, xw[m][7 - (v >> 1)], acc[r][m]);
                }
            }
#pragma unroll
            for (int m = 0; m < M; ++m) {
                const float gm = gs[m * ng + g];
#pragma unroll
                for (int r = 0; r < RB; ++r) facc[r][m] = fmaf(gm, (float)acc[r][m], facc[r][m]);
            }
        }
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int m = 0; m < M; ++m) {
                float v = facc[r][m];
                for (int o = 16; o; o >>= 1) v += shfl_xor(v, o);
                facc[r][m] = v;
            }
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int m = 0; m < M; ++m) red[warp * RB * M + r * M + m] = facc[r][m];
        }
        __syncthreads();
        for (int t = threadIdx.x; t < RGB * RB * M; t += NT) {
            const int g2 = t / (RB * M), e = t - g2 * RB * M, r = e / M, m = e - r * M;
            const int row = (b0 + g2) * RB + r;
            float v = 0.f;
            for (int i = 0; i < WPR; ++i) v += red[(g2 * WPR + i) * RB * M + e];
            if (b0 + g2 < nrg && row < rows) out[(size_t)m * rows + row] = v * half_of(scales, row) * factor;
        }
        __syncthreads();
    }
}

// cols, step 1: x [n_in] · the stored rows' scales -> int8 q (one byte an input) and a
// scale a group of 32 (a warp a group)
TQ_GLOBAL void TQ_BOUNDS(NT) pair_quantize(const void* x, int dt,
                                           const uint16_t* __restrict__ scales, int n,
                                           int8_t* __restrict__ q, float* __restrict__ gs) {
    const int lane = threadIdx.x & 31;
    const int g = (blockIdx.x * NT + threadIdx.x) >> 5;
    if (32 * g >= n) return;  // whole warps (n is a multiple of 32)
    float s;
    const int i = 32 * g + lane;
    q[i] = (int8_t)quant_lane(xload(x, dt, i) * half_of(scales, i), s);
    if (lane == 0) gs[g] = s;
}

// cols, step 2: units u = tile·n_in + i (tile-major), block b takes [U·b/G, U·(b+1)/G)
// (at most two tiles: the recipe keeps n_in ≥ U/G); its warps split it, those of each
// tile equal shares in order, so a warp's lanes hold one tile's 32 periods (p = 32·tile
// + lane) of stored rows i. part [G][2][1024]: the block's sums of its first tile and
// the next, its warps' added in warp order.
TQ_GLOBAL void TQ_BOUNDS(NT) pair_cols(const uint32_t* __restrict__ words,
                                       const uint32_t* __restrict__ table,
                                       const int8_t* __restrict__ q,
                                       const float* __restrict__ gs, float* __restrict__ part,
                                       int n_in, int nperiods, int ppb, int nblocks) {
    TQ_DYN_SMEM;
    constexpr int W = NT / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* red = reinterpret_cast<float*>(smem + RED_OFF);  // [W][1024]
    load_table(table, smem);
    __syncthreads();
    const uint32_t tb = shared_addr(smem + TAB_OFF);
    const int tiles = (nperiods + 31) / 32;
    const int64_t U = (int64_t)tiles * n_in;
    const int64_t b_lo = U * blockIdx.x / nblocks, b_hi = U * (blockIdx.x + 1) / nblocks;
    const int t_first = (int)(b_lo / n_in);
    const int64_t cut = b_hi < (int64_t)(t_first + 1) * n_in ? b_hi : (int64_t)(t_first + 1) * n_in;
    const int64_t na = cut - b_lo, nb = b_hi - cut;  // units of the first tile, the next
    int wa = na == 0 ? 0 : nb == 0 ? W : (int)((W * na + (na + nb) / 2) / (na + nb));
    wa = na > 0 && wa == 0 ? 1 : nb > 0 && wa == W ? W - 1 : wa;  // warps of the first tile
    const bool first = warp < wa;
    const int ws = first ? warp : warp - wa, wn = first ? wa : W - wa;
    const int64_t s_lo = first ? b_lo : cut, s_n = first ? na : nb;
    const int64_t lo = s_lo + s_n * ws / wn, hi = s_lo + s_n * (ws + 1) / wn;
    const int tile = t_first + (first ? 0 : 1);
    const int p = min(32 * tile + lane, nperiods - 1);
    const uint32_t lane4 = tb | (4u * lane);  // tb == TAB: a runtime value, one LOP3
    const size_t nw = (size_t)nperiods * K;
    float facc[32];
    int acc[32];
#pragma unroll
    for (int o = 0; o < 32; ++o) { facc[o] = 0.f; acc[o] = 0; }
    if (tb == TAB && lo < hi) {
        const int i0 = (int)(lo - (int64_t)tile * n_in), i1 = (int)(hi - (int64_t)tile * n_in);
        uint32_t nxt[K + 1];
        load_words(words + (size_t)i0 * nw, p, ppb, nxt);
        for (int i = i0; i < i1; ++i) {
            uint32_t w[K + 1];
#pragma unroll
            for (int j = 0; j <= K; ++j) w[j] = nxt[j];
            if (i + 1 < i1) load_words(words + (size_t)(i + 1) * nw, p, ppb, nxt);
            const uint32_t xl = (uint32_t)__ldg(q + i) & 0xFFu, xh = xl << 8;
#pragma unroll
            for (int v = 0; v < 16; ++v) {
                const uint32_t e = lds_abs(((window(w, v) * HMUL) & AMASK) | lane4);
                acc[30 - 2 * v] = dp2a_lo(e, xl, acc[30 - 2 * v]);
                acc[31 - 2 * v] = dp2a_lo(e, xh, acc[31 - 2 * v]);
            }
            if (((i + 1) & 31) == 0 || i + 1 == i1) {  // the end of a group of inputs
                const float s = __ldg(gs + (i >> 5));
#pragma unroll
                for (int o = 0; o < 32; ++o) {
                    facc[o] = fmaf(s, (float)acc[o], facc[o]);
                    acc[o] = 0;
                }
            }
        }
    }
#pragma unroll
    for (int o = 0; o < 32; ++o) red[warp * 1024 + 32 * lane + o] = facc[o];
    __syncthreads();
    for (int e = threadIdx.x; e < 2048; e += NT) {  // slot e / 1024, in warp order
        const int slot = e >> 10;
        float v = 0.f;
        for (int w = slot ? wa : 0; w < (slot ? W : wa); ++w) v += red[w * 1024 + (e & 1023)];
        part[(size_t)blockIdx.x * 2048 + e] = tb == TAB ? v : __int_as_float(0x7FC00000);
    }
}

// cols, step 3: out [n_out] = Σ over blocks, in block order, of their sums of the
// output's tile, × factor
TQ_GLOBAL void TQ_BOUNDS(NT) pair_cols_sum(const float* __restrict__ part,
                                           float* __restrict__ out, int n_in, int nperiods,
                                           int ppb, float factor, int nblocks) {
    const int e = blockIdx.x * NT + threadIdx.x;  // (tile, lane, o)
    const int tiles = (nperiods + 31) / 32;
    if (e >= tiles * 1024) return;
    const int t = e >> 10, lane = (e >> 5) & 31, o = e & 31, p = 32 * t + lane;
    if (p >= nperiods) return;
    const int64_t U = (int64_t)tiles * n_in;
    float v = 0.f;
    for (int b = 0; b < nblocks; ++b) {
        const int64_t lo = U * b / nblocks, hi = U * (b + 1) / nblocks;
        if (lo == hi) continue;
        const int tf = (int)(lo / n_in), tl = (int)((hi - 1) / n_in);
        if (t >= tf && t <= tl) v += part[(size_t)b * 2048 + 1024 * (t - tf) + (e & 1023)];
    }
    out[32 * group_of(p, ppb) + o] = v * factor;
}

#ifdef __CUDACC__
namespace {
size_t rows_smem(int M, int n, int rb) {
    return (size_t)TAB_OFF + TAB_WORDS * 4 + (size_t)M * n + (size_t)M * (n / 32) * 4 +
           (size_t)(NT / 32) * rb * M * 4;
}
constexpr size_t COLS_SMEM = (size_t)RED_OFF + (NT / 32) * 1024 * 4;

template <int M, int RB, int WPR>
int rows_launch(const uint32_t* w, const uint16_t* s, const uint32_t* t, const void* x, int dt,
                float* out, int rows, int n, int ppb, float factor, int nblocks, cudaStream_t st) {
    const size_t smem = rows_smem(M, n, RB);
    auto kern = pair_rows<M, RB, WPR>;
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)smem);
    if (e != cudaSuccess) return (int)e;
    kern<<<nblocks, NT, smem, st>>>(w, s, t, x, dt, out, rows, n, ppb, factor, nblocks);
    return (int)cudaGetLastError();
}
}  // namespace

extern "C" {

// the dynamic shared memory a rows launch needs (the caller checks it fits the device)
size_t tq_pair_rows_smem(int M, int n, int rb) { return rows_smem(M, n, rb); }
size_t tq_pair_cols_smem() { return COLS_SMEM; }

// rows (axis 1): x [M, n] -> out [M, rows] float32; (M, rb, wpr) one of the instances
int tq_pair_rows(const void* words, const void* scales, const void* table, const void* x, int dt,
                 void* out, int M, int rows, int n, int T, int rb, int wpr, float factor,
                 int nblocks, void* stream) {
    auto W = (const uint32_t*)words;
    auto S = (const uint16_t*)scales;
    auto Tb = (const uint32_t*)table;
    auto O = (float*)out;
    auto st = (cudaStream_t)stream;
    const int ppb = T / 32;
#define TQ_PAIR_ROWS(m, r, p)                                                              \
    if (M == m && rb == r && wpr == p)                                                     \
        return rows_launch<m, r, p>(W, S, Tb, x, dt, O, rows, n, ppb, factor, nblocks, st);
    TQ_PAIR_ROWS(1, 2, 1) TQ_PAIR_ROWS(1, 2, 2) TQ_PAIR_ROWS(1, 4, 1) TQ_PAIR_ROWS(1, 4, 2)
    TQ_PAIR_ROWS(1, 4, 4) TQ_PAIR_ROWS(2, 2, 1) TQ_PAIR_ROWS(2, 2, 2) TQ_PAIR_ROWS(3, 1, 1)
    TQ_PAIR_ROWS(3, 1, 2) TQ_PAIR_ROWS(4, 1, 1) TQ_PAIR_ROWS(4, 1, 2) TQ_PAIR_ROWS(4, 2, 1)
    TQ_PAIR_ROWS(5, 1, 1) TQ_PAIR_ROWS(6, 1, 1) TQ_PAIR_ROWS(7, 1, 1) TQ_PAIR_ROWS(8, 1, 1)
#undef TQ_PAIR_ROWS
    return -1;
}

// cols (axis 0), one input row: x [n_in] -> out [n_out] float32 (words [n_in, nw] with
// nw = n_out·k/32); q (n_in bytes), gs (n_in/32 floats) and part (nblocks·2048 floats)
// are the caller's scratch
int tq_pair_cols(const void* words, const void* scales, const void* table, const void* x, int dt,
                 void* q, void* gs, void* part, void* out, int n_in, int n_out, int T,
                 float factor, int nblocks, void* stream) {
    auto st = (cudaStream_t)stream;
    const int ppb = T / 32, nperiods = n_out / 32;
    cudaError_t e = cudaFuncSetAttribute(pair_cols, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)COLS_SMEM);
    if (e != cudaSuccess) return (int)e;
    pair_quantize<<<(n_in + NT - 1) / NT, NT, 0, st>>>(x, dt, (const uint16_t*)scales, n_in,
                                                        (int8_t*)q, (float*)gs);
    pair_cols<<<nblocks, NT, COLS_SMEM, st>>>((const uint32_t*)words, (const uint32_t*)table,
                                              (const int8_t*)q, (const float*)gs, (float*)part,
                                              n_in, nperiods, ppb, nblocks);
    const int tiles = (nperiods + 31) / 32;
    pair_cols_sum<<<(tiles * 1024 + NT - 1) / NT, NT, 0, st>>>((const float*)part, (float*)out,
                                                             n_in, nperiods, ppb, factor, nblocks);
    return (int)cudaGetLastError();
}

}  // extern "C"
#endif
