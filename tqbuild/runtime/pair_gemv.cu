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
// `pair_rows_mma` (axis 1, M ≤ 8, below): the same rows on the tensor cores, x in bf16 or
// fp16, one decode for every row of x.
// `pair_rows` (axis 1): a persistent block asks for its first rows' words, fills the
// table, quantizes x into shared memory (8 inputs a thread, quant8.cuh); with WPR = 1 each
// warp then decodes its share of an even split of the rows (chunks of RB rows, then single
// rows; lanes taking periods, two periods' words in flight a lane, across row ends), with
// WPR > 1 row groups of RB rows go round the block's warps (WPR warps a group, summed in
// shared memory). `pair_cols` (axis 0, stored row i = input i, M = 1): lane = a period of
// output columns (a tile of 32 periods a walker of 1 or 2 warps), each walker a contiguous
// range of (tile, input) units walked with D inputs' words in flight; the block quantizes
// the inputs its units meet (x · the stored rows' scales) into shared memory first; the
// walkers' sums are added in the block in walker order, the partials of the blocks that
// meet a tile by `pair_cols_sum` in a fixed order (deterministic). Its `HALF` instances walk in
// packed fp16 instead (cols_steps_half: one HFMA2 a step for two IDP2A). Outputs in the caller's
// dtype (f32, bf16, f16), rounded once. Both kernels read x only after
// griddepcontrol.wait (TQ_PDL_IN: launched with programmatic dependent launch, their
// words and table on their way while the kernel before them ends).
#include <cstdint>
#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define TQ_DEV __device__ __forceinline__
#define TQ_GLOBAL __global__
#define TQ_BOUNDS(n) __launch_bounds__(n)
#include "pdl_launch.cuh"  // pdl_trigger, pdl_wait, launch, raise_smem
#include "mma16816.cuh"    // mma16816<DT>
#define TQ_SHARED __shared__
#endif
#include "quant8.cuh"
#include "row_words.cuh"
#include "smem_abs.cuh"

#ifndef TQ_K
#error "define TQ_K and TQ_L"
#endif

// the pair_rows instances (M, RB, WPR, NTH) the library holds (runtime/pair_cuda.py's ROWS_CFGS)
#define TQ_PAIR_ROWS_INSTANCES                                                              \
    TQ_PAIR_ROWS(1, 2, 1, 512) TQ_PAIR_ROWS(1, 2, 2, 512) TQ_PAIR_ROWS(1, 4, 1, 512)        \
    TQ_PAIR_ROWS(1, 4, 2, 512) TQ_PAIR_ROWS(1, 1, 1, 1024) TQ_PAIR_ROWS(1, 2, 1, 1024)      \
    TQ_PAIR_ROWS(1, 2, 2, 1024) TQ_PAIR_ROWS(2, 2, 1, 512) TQ_PAIR_ROWS(2, 2, 2, 512)       \
    TQ_PAIR_ROWS(2, 1, 1, 1024) TQ_PAIR_ROWS(3, 1, 1, 512) TQ_PAIR_ROWS(3, 1, 2, 512)       \
    TQ_PAIR_ROWS(4, 1, 1, 512) TQ_PAIR_ROWS(4, 1, 2, 512) TQ_PAIR_ROWS(4, 2, 1, 512)        \
    TQ_PAIR_ROWS(4, 1, 1, 1024) TQ_PAIR_ROWS(5, 1, 1, 512) TQ_PAIR_ROWS(6, 1, 1, 512)       \
    TQ_PAIR_ROWS(7, 1, 1, 512) TQ_PAIR_ROWS(8, 1, 1, 512)

#ifdef TQ_PAIR_MMA_ONLY  // benchmark sweeps of pair_rows_mma's knobs: no other kernel built
#undef TQ_PAIR_ROWS_INSTANCES
#define TQ_PAIR_ROWS_INSTANCES
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
constexpr int NT = 512;                   // threads a block (pair_rows: NTH, 512 or 1024)
constexpr int RED_OFF = 0x20000 - 0x400;  // pair_cols: the block's sums, after the table
constexpr int RED_LANE = 33;  // pair_cols: floats a lane's 32 sums take (padded: no conflicts)
constexpr int RED_WARP = 32 * RED_LANE;
constexpr int XQ_OFF = TAB_OFF + TAB_WORDS * 4;  // pair_rows: x quantized, after the table
// words a quantized group of 32 inputs takes in shared memory: 8 of int8 q, padded to 12
// where it fits (a warp's two LDS.128 of 32 different groups then hit every bank once)
constexpr int GSW_PAD = 12, GSW_TIGHT = 8;
#ifndef TQ_PAIR_COLS_D
#define TQ_PAIR_COLS_D 4  // pair_cols: inputs' words in flight a walker (SUB = 2: D / 2 a warp)
#endif
constexpr int COLS_D = TQ_PAIR_COLS_D;
#ifndef TQ_PAIR_ROWS_D
#define TQ_PAIR_ROWS_D 3  // pair_rows (one warp a row group, 512 threads): periods in flight a lane
#endif
constexpr int GSW_HALF = 16;  // pair_cols in fp16: words a group of 32 inputs takes (halves)
#ifndef TQ_PDL_IN
#define TQ_PDL_IN 0  // 1: pair_rows and pair_cols launched with programmatic dependent launch
                     // (runtime/gpu_info.pdl_defines: where inductor's kernels trigger early);
                     // either way they wait for the kernel before them only to read x
#endif

#ifdef __CUDACC__
TQ_DEV uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {  // a·b + c, two fp16 lanes
    uint32_t d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
TQ_DEV uint32_t f16_bits(float v) { return __half_as_ushort(__float2half_rn(v)); }
TQ_DEV uint32_t bf16_bits(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
// 16 bytes global -> shared without registers (cp.async), and the wait for all of a thread's
TQ_DEV void copy16_async(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                 :: "r"((uint32_t)__cvta_generic_to_shared(dst)), "l"(src) : "memory");
}
TQ_DEV void copy_async_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }
TQ_DEV int dp2a_lo(uint32_t e, uint32_t x, int c) { return __dp2a_lo((int)e, (int)x, c); }
TQ_DEV int dp2a_hi(uint32_t e, uint32_t x, int c) { return __dp2a_hi((int)e, (int)x, c); }
TQ_DEV float half_of(const uint16_t* s, int i) {
    return __half2float(__ushort_as_half(__ldg(s + i)));
}
#else
TQ_DEV uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) { return fma2<1>(a, b, c); }
TQ_DEV uint32_t f16_bits(float v) { return simt::f16_round(v); }
TQ_DEV uint32_t bf16_bits(float v) { return simt::bf16_round(v); }
TQ_DEV void copy16_async(void* dst, const void* src) { std::memcpy(dst, src, 16); }
TQ_DEV void copy_async_wait() {}
TQ_DEV int dp2a_lo(uint32_t e, uint32_t x, int c) {
    return c + (int16_t)(e & 0xFFFF) * (int8_t)(x & 0xFF) +
           (int16_t)(e >> 16) * (int8_t)((x >> 8) & 0xFF);
}
TQ_DEV int dp2a_hi(uint32_t e, uint32_t x, int c) { return dp2a_lo(e, x >> 16, c); }
TQ_DEV float half_of(const uint16_t* s, int i) { return simt::f16_float(s[i]); }
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
    period_words<K>(a, w);
    w[K] = __ldg(a + (last ? K * (1 - ppb) : K));
}

// periods p … p + PP − 1 (p a multiple of PP ≤ ppb: one block's, so that each period's next
// word but the last's is the following period's first) of a stored row: their PP·K words in
// loads of `vec` bytes (16, 8 or 4: what the run's length and the rows' alignment allow, the
// same for every lane: run_words) and the next period's first word; the periods before ng
// only (a run cut short by the row's end: its periods one by one)
template <int PP>
TQ_DEV void load_run(const uint32_t* row, int p, int ppb, int ng, int vec,
                     uint32_t (&w)[PP * K + 1]) {
    if (PP > 1 && p + PP > ng) {
#pragma unroll
        for (int h = 0; h < PP; ++h)
            if (p + h < ng) load_words(row, p + h, ppb, reinterpret_cast<uint32_t (&)[K + 1]>(w[h * K]));
        return;
    }
    run_words<PP * K>(row + K * p, vec, w);
    const int pl = p + PP - 1, last = (pl & (ppb - 1)) == ppb - 1;  // the run's last period
    w[PP * K] = __ldg(row + K * (last ? pl + 1 - ppb : pl + 1));
}

// an output tensor: float32 (dt 0), bf16 (1) or f16 (2), written rounded to nearest even
struct Out {
    void* p;
    int dt;
};
TQ_DEV void put(const Out& o, size_t i, float v) {
#ifdef __CUDACC__
    if (o.dt == 1) reinterpret_cast<__nv_bfloat16*>(o.p)[i] = __float2bfloat16_rn(v);
    else if (o.dt == 2) reinterpret_cast<__half*>(o.p)[i] = __float2half_rn(v);
    else reinterpret_cast<float*>(o.p)[i] = v;
#else
    if (o.dt == 1) reinterpret_cast<uint16_t*>(o.p)[i] = simt::bf16_round(v);
    else if (o.dt == 2) reinterpret_cast<uint16_t*>(o.p)[i] = simt::f16_round(v);
    else reinterpret_cast<float*>(o.p)[i] = v;
#endif
}

// the aligned group of 32 inputs (rows) or outputs (cols) period p meets
TQ_DEV int group_of(int p, int ppb) {
    const int pb = p & (ppb - 1);
    return (p - pb) + (ppb - 1 - pb);
}

// the table into shared memory at TAB, each entry 32 times (one a lane): four copies a
// 16-byte store, every load of a thread issued at once. HALF 0: the int16 pairs as stored;
// 1: each pair as two fp16 of the entry · 2^-13, the low half first; 2: as two bf16 of it
TQ_DEV uint32_t half_pair(uint32_t e, int half) {
    const float lo = (float)(int16_t)(e & 0xFFFF) * (1.f / 8192), hi = (float)(int16_t)(e >> 16) * (1.f / 8192);
    return half == 2 ? bf16_bits(lo) | bf16_bits(hi) << 16 : f16_bits(lo) | f16_bits(hi) << 16;
}
template <int NTH, int HALF = 0>
TQ_DEV void load_table(const uint32_t* table, char* base) {
    constexpr int N4 = TAB_WORDS / 4;
    static_assert(N4 % NTH == 0, "whole trips");
    uint4* tab = reinterpret_cast<uint4*>(base + TAB_OFF);
    uint32_t v[N4 / NTH];
#pragma unroll
    for (int j = 0; j < N4 / NTH; ++j) v[j] = __ldg(table + ((j * NTH + (int)threadIdx.x) >> 3));
    if constexpr (HALF != 0) {
#pragma unroll
        for (int j = 0; j < N4 / NTH; ++j) v[j] = half_pair(v[j], HALF);
    }
#pragma unroll
    for (int j = 0; j < N4 / NTH; ++j) tab[j * NTH + threadIdx.x] = make_uint4(v[j], v[j], v[j], v[j]);
}

// Slots s of groups of 32 inputs, quantized into shared memory: for input row m = s / ns,
// slot j = s % ns holds group ga + j (j < na) or j − na (the cols kernel's second tile,
// from input 0); its int8 q at xq + s·gsw (8 words, input 4i + b in byte b of word i), its
// scale at gs[s]. rs: the inputs times their stored rows' fp16 scales first (cols).
// 8 inputs a thread, whole warps a trip (quant8's shuffles), the loads of QB trips issued
// together (pair_rows at 512 threads: M = 4 × 8192 takes 8 trips). HALF (pair_cols in fp16): a
// slot holds 32 fp16 of the inputs / the group's largest |input| (16 words), its scale that
// largest |input| · 2^13 (the table's fp16 entries are the int16 ones · 2^-13).
template <bool HALF = false, int QB = 1>
TQ_DEV void quantize_slots(const void* x, int dt, int M, int n, int ga, int na, int ns,
                           const uint16_t* rs, uint32_t* xq, int gsw, float* gs, int nth) {
    const int chunks = 4 * M * ns;
    for (int c00 = 0; c00 < chunks; c00 += QB * nth) {
        float v[QB][8];
        int i0[QB], sl[QB];
#pragma unroll
        for (int t = 0; t < QB; ++t) {
            const int c = c00 + t * nth + (int)threadIdx.x;
            const bool in = c < chunks;
            const int s = in ? c >> 2 : 0, m = s / ns, j = s - m * ns;
            i0[t] = 32 * (j < na ? ga + j : j - na) + 8 * (c & 3);
            sl[t] = in ? c : -1;
#pragma unroll
            for (int b = 0; b < 8; ++b) v[t][b] = 0.f;
            if (in) load8(x, dt, (size_t)m * n + i0[t], v[t]);
        }
#pragma unroll
        for (int t = 0; t < QB; ++t) {
            if (c00 + t * nth >= chunks) break;  // the same for the whole block: no lane left out
            const int c = sl[t], s = c >> 2;
            const bool in = c >= 0;
            if (in && rs) {
#pragma unroll
                for (int b = 0; b < 8; ++b) v[t][b] = __fmul_rn(v[t][b], half_of(rs, i0[t] + b));
            }
            if constexpr (HALF) {
                bool bad;
                const float a = group_absmax(v[t], bad);
                const bool ok = a > 0.f && !bad && !isinf(a);
                const float inv = ok ? __fdiv_rn(1.f, a) : 0.f;
                uint32_t h[4];
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    h[j] = f16_bits(__fmul_rn(v[t][2 * j], inv)) |
                           f16_bits(__fmul_rn(v[t][2 * j + 1], inv)) << 16;
                if (!in) continue;
                *reinterpret_cast<uint4*>(xq + s * gsw + 4 * (c & 3)) = make_uint4(h[0], h[1], h[2], h[3]);
                if ((c & 3) == 0) gs[s] = bad ? __int_as_float(0x7FC00000) : __fmul_rn(a, 8192.f);
            } else {
                int q[8];
                float scale;
                int unused;
                quant8(v[t], q, scale, unused);
                if (!in) continue;
                *reinterpret_cast<uint2*>(xq + s * gsw + 2 * (c & 3)) = pack8(q);
                if ((c & 3) == 0) gs[s] = scale;
            }
        }
    }
}

// a group's 8 words of int8 q from shared memory (two 16-byte loads)
TQ_DEV void group_words(const uint32_t* src, uint32_t (&xw)[8]) {
    const uint4 a = reinterpret_cast<const uint4*>(src)[0], b = reinterpret_cast<const uint4*>(src)[1];
    xw[0] = a.x; xw[1] = a.y; xw[2] = a.z; xw[3] = a.w;
    xw[4] = b.x; xw[5] = b.y; xw[6] = b.z; xw[7] = b.w;
}

// V values (V ≤ 32) summed over a warp's lanes with log2(V') shuffles halving the values
// (V' the power of two ≥ V, the rest zero), then 5 − log2(V') on the one left: returns
// the sum of value `idx`, which lane takes (idx ≥ V: a padding value's)
__host__ __device__ constexpr int pow2_ceil(int v) { return v <= 1 ? 1 : 2 * pow2_ceil((v + 1) / 2); }
template <int V>
TQ_DEV float warp_sums(const float (&v)[V], int lane, int& idx) {
    constexpr int P = pow2_ceil(V);
    static_assert(P <= 32, "at most 32 values");
    float t[P];
#pragma unroll
    for (int i = 0; i < P; ++i) t[i] = i < V ? v[i] : 0.f;
    idx = 0;
#pragma unroll
    for (int h = P / 2, o = 16; h >= 1; h /= 2, o /= 2) {  // keep one half, send the other
        const bool up = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < h; ++i) {
            const float keep = up ? t[i + h] : t[i], send = up ? t[i] : t[i + h];
            t[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, o);
        }
        idx += up ? h : 0;
    }
    float r = t[0];
#pragma unroll
    for (int o = 16 / P; o >= 1; o /= 2) r += __shfl_xor_sync(0xFFFFFFFFu, r, o);
    return r;
}

// one period of RB rows (words w) against the group it meets: facc += its scale · Σ
// (nothing where !on: the sums of a lane without a period, made without a branch)
template <int M, int RB>
TQ_DEV void rows_period(const uint32_t (&w)[RB][K + 1], int p, int ppb, int ng, int gsw,
                        const uint32_t* xq, const float* gs, uint32_t lane4,
                        float (&facc)[RB][M], bool on = true) {
    const int g = group_of(p, ppb);
    uint32_t xw[M][8];
#pragma unroll
    for (int m = 0; m < M; ++m) group_words(xq + (m * ng + g) * gsw, xw[m]);
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
        const float gm = on ? gs[m * ng + g] : 0.f;
#pragma unroll
        for (int r = 0; r < RB; ++r) facc[r][m] = fmaf(gm, (float)acc[r][m], facc[r][m]);
    }
}

// whether the table's shared address tb is TAB (the layout's premise: dynamic shared memory
// at 0x400); where not, the block writes NaN over its share of the n_out outputs
TQ_DEV bool table_at_tab(uint32_t tb, const Out& out, int n_out, int nblocks, int nth) {
    if (tb == TAB) return true;
    for (int i = blockIdx.x * nth + threadIdx.x; i < n_out; i += nblocks * nth)
        put(out, i, __int_as_float(0x7FC00000));
    return false;
}

// a slot reloaded with period p of the rows (if any)
template <int RB>
TQ_DEV void reload(uint32_t (&slot)[RB][K + 1], const uint32_t* const (&wrow)[RB], int p, int ng,
                   int ppb) {
    if (p < ng) {
#pragma unroll
        for (int r = 0; r < RB; ++r) load_words(wrow[r], p, ppb, slot[r]);
    }
}

}  // namespace

// x [M, n] (dtype 0 f32, 1 bf16, 2 f16) -> out [M, rows] (· row scale · factor, in out's dtype);
// gsw: GSW_PAD or GSW_TIGHT (what fits)
template <int M, int RB, int WPR, int NTH>
TQ_GLOBAL void TQ_BOUNDS(NTH) pair_rows(const uint32_t* __restrict__ words,
                                        const uint16_t* __restrict__ scales,
                                        const uint32_t* __restrict__ table, const void* x, int dt,
                                        Out out, int rows, int n, int ppb, int gsw,
                                        float factor, int nblocks) {
    TQ_DYN_SMEM;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int ng = n >> 5, nw = ng * K;
    uint32_t* xq = reinterpret_cast<uint32_t*>(smem + XQ_OFF);  // [M][ng][gsw]
    float* gs = reinterpret_cast<float*>(xq + M * ng * gsw);    // [M][ng]
    float* red = gs + M * ng;                                   // [warps][RB·M]
    constexpr int RGB = NTH / 32 / WPR;  // row groups a block
    const int rg = warp / WPR, wr = warp - rg * WPR, S = WPR * 32, p0 = wr * 32 + lane;
    const int nrg = (rows + RB - 1) / RB, b_first = blockIdx.x * RGB;
    // two periods' words in flight a lane (slots wa, wb; RD = 3 where WPR == 1 at 512
    // threads: a third, wc), each reloaded once decoded;
    // the first row group's asked for before the table and x are ready
    const uint32_t* wrow[RB];
    uint32_t wa[RB][K + 1], wb[RB][K + 1], wc[RB][K + 1];
    constexpr int RD = WPR == 1 && NTH == 512 ? TQ_PAIR_ROWS_D : 2;
    static_assert(RD == 2 || RD == 3, "two or three periods in flight");
    auto start = [&](int r0) {
        start_row_words<RB, K + 1, load_words>(words, r0, rows, nw, p0, S, ng, ppb, wrow, wa, wb);
    };
    // WPR == 1: warp gw owns rows [lo, hi) of an even split, decoded as units — nc chunks
    // of RB rows, then the nt < RB rows left one at a time — each of nit items (a period
    // a lane); the two slots run over the warp's item stream, across unit ends
    const int gw = blockIdx.x * RGB + rg, W = nblocks * RGB;
    const int lo = (int)((int64_t)rows * gw / W), hi = (int)((int64_t)rows * (gw + 1) / W);
    const int nc = (hi - lo) / RB, nu = nc + (hi - lo) - nc * RB, nit = (ng + 31) >> 5;
    auto load_item = [&](int u, int it, uint32_t (&slot)[RB][K + 1]) {
        const int p = lane + 32 * it;
        if (u >= nu || p >= ng) return;
        if (u < nc) {
#pragma unroll
            for (int r = 0; r < RB; ++r) load_words(words + (size_t)(lo + u * RB + r) * nw, p, ppb, slot[r]);
        } else {
            load_words(words + (size_t)(lo + nc * RB + u - nc) * nw, p, ppb, slot[0]);
        }
    };
    int lu = 0, lit = 0;  // the next item to load
    auto next = [&](int& u, int& it) {
        if (++it == nit) { it = 0; ++u; }
    };
    if constexpr (WPR == 1) {
        load_item(lu, lit, wa);
        next(lu, lit);
        load_item(lu, lit, wb);
        next(lu, lit);
        if constexpr (RD == 3) {
            load_item(lu, lit, wc);
            next(lu, lit);
        }
    } else {
        start((b_first + rg) * RB);
    }
    load_table<NTH>(table, smem);
    pdl_wait();  // x: the kernel before this one's (under PDL; the words on their way)
    pdl_trigger();  // after the wait: a kernel launched early may rely on all before this one
    quantize_slots<false, NTH == 512 ? 4 : 1>(x, dt, M, n, 0, ng, ng, nullptr, xq, gsw, gs, NTH);
    __syncthreads();
    const uint32_t tb = shared_addr(smem + TAB_OFF);
    if (!table_at_tab(tb, out, M * rows, nblocks, NTH)) return;
    const uint32_t lane4 = tb | (4u * lane);  // tb == TAB: a runtime value, one LOP3
    if constexpr (WPR == 1) {  // no block-wide step: warps run apart
        float facc[RB][M];
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int m = 0; m < M; ++m) facc[r][m] = 0.f;
        int du = 0, dit = 0;  // the item decoded
        // decode the item in `slot`, reload it with the next item to load; at a unit's end
        // its sums go out
        auto item = [&](uint32_t (&slot)[RB][K + 1]) {
            const int p = lane + 32 * dit, pc = min(p, ng - 1);  // every lane decodes
            if (du < nc)
                rows_period<M, RB>(slot, pc, ppb, ng, gsw, xq, gs, lane4, facc, p < ng);
            else
                rows_period<M, 1>(reinterpret_cast<uint32_t (&)[1][K + 1]>(slot), pc, ppb, ng, gsw,
                                  xq, gs, lane4, reinterpret_cast<float (&)[1][M]>(facc), p < ng);
            load_item(lu, lit, slot);
            next(lu, lit);
            if (dit == nit - 1) {
                const int r0 = lo + (du < nc ? du * RB : nc * RB + du - nc);
                int e;
                const float v = warp_sums<RB * M>(reinterpret_cast<float (&)[RB * M]>(facc), lane, e);
                const int r = e / M, m = e - r * M;  // lanes of one sum: the lowest writes
                if (e < (du < nc ? RB : 1) * M && (lane & (32 / pow2_ceil(RB * M) - 1)) == 0)
                    put(out, (size_t)m * rows + r0 + r, v * half_of(scales, r0 + r) * factor);
#pragma unroll
                for (int r2 = 0; r2 < RB; ++r2)
#pragma unroll
                    for (int m2 = 0; m2 < M; ++m2) facc[r2][m2] = 0.f;
            }
            next(du, dit);
        };
        for (int f = 0; f < nu * nit; f += RD) {
            item(wa);
            if (f + 1 == nu * nit) break;
            item(wb);
            if constexpr (RD == 3) {
                if (f + 2 == nu * nit) break;
                item(wc);
            }
        }
    } else {
        for (int b0 = b_first; b0 < nrg; b0 += nblocks * RGB) {
            const int r0 = (b0 + rg) * RB;
            if (b0 != b_first) start(r0);
            float facc[RB][M];
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int m = 0; m < M; ++m) facc[r][m] = 0.f;
            for (int p = p0; p < ng; p += 2 * S) {  // a slot is reloaded once decoded
                rows_period<M, RB>(wa, p, ppb, ng, gsw, xq, gs, lane4, facc);
                reload<RB>(wa, wrow, p + 2 * S, ng, ppb);
                if (p + S >= ng) break;
                rows_period<M, RB>(wb, p + S, ppb, ng, gsw, xq, gs, lane4, facc);
                reload<RB>(wb, wrow, p + 3 * S, ng, ppb);
            }
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int m = 0; m < M; ++m) {
                    float v = facc[r][m];
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
            for (int t = threadIdx.x; t < RGB * RB * M; t += NTH) {
                const int g2 = t / (RB * M), e = t - g2 * RB * M, r = e / M, m = e - r * M;
                const int row = (b0 + g2) * RB + r;
                float v = 0.f;
                for (int i = 0; i < WPR; ++i) v += red[(g2 * WPR + i) * RB * M + e];
                if (b0 + g2 < nrg && row < rows) put(out, (size_t)m * rows + row, v * half_of(scales, row) * factor);
            }
            __syncthreads();
        }
    }
}

// `pair_rows_mma` (axis 1, M ≤ 8) on the tensor cores: x in bf16 (DT 0; f32 x rounded to
// it) or fp16 (DT 1) in shared memory as it is, the table as pairs of DT halves (each
// entry · 2^-13: `factor` · 8192 applies), mma.m16n8k16 with a tile of 16 rows' weights as A
// and x as B (column m = row m of x, zero at m ≥ M), float32 sums: the decode is shared by
// every row of x, its cost ~2 instructions a weight whatever M. Lane (g, c) = (lane / 4,
// lane % 4) decodes rows g and g + 8 of the tile at periods PP·(4u + c) + h (h < PP, a run
// PP of adjacent ones: their words in wider loads) of the tile's item u: for each h, mma j
// takes steps 2j + 1 (k-slots 2c, 2c + 1) and 2j (2c + 8, 2c + 9) of both rows — a step's
// entry is the pair of halves A wants there — against row g of x's inputs of the same steps
// (its group's words 14 − 2j, 15 − 2j: the order they load in), the mma in MMA_ACC chains.
// A block takes whole tiles (an even split), its warps an even split of the block's items
// (tile-major), MMA_D items' words in flight a lane; a warp writes the tiles it takes whole,
// its sums of the others (at most its first and last) go through shared memory, added in
// warp order (deterministic).
//
// x in shared memory: row m of x at mma_x_off (rows below the table where they fit, the
// rest after it), group G at 64·G bytes, its 16-byte chunk q at 16·(q ^ ((m + G/2) & 3)):
// a warp's 16-byte loads of 4 rows × 4 adjacent groups then hit each bank twice at most.
#ifndef TQ_PAIR_MMA_NTH
#define TQ_PAIR_MMA_NTH 512  // pair_rows_mma: threads a block (one block an SM)
#endif
#ifndef TQ_PAIR_MMA_ACC
#define TQ_PAIR_MMA_ACC 2  // pair_rows_mma: independent chains of mma an item (their sums)
#endif
constexpr int MMA_NTH = TQ_PAIR_MMA_NTH, MMA_ACC = TQ_PAIR_MMA_ACC;
#ifndef TQ_PAIR_MMA_D
#define TQ_PAIR_MMA_D 2  // pair_rows_mma: items' words in flight a lane (a slot: 2·(PP·K + 1)
                         // words; with ACC 2 the one knob set s32b's timing finished: 8192²,
                         // k = 3, M = 4 23.94 µs on an H100, bench/results/pair_gemv-cuda-s32b*)
#endif
constexpr int MMA_D = TQ_PAIR_MMA_D;

static_assert(8 % MMA_ACC == 0, "an item's 8 mma over the chains");
TQ_DEV int mma_x_slot(int m, int G, int q) { return 64 * G + 16 * (q ^ ((m + (G >> 1)) & 3)); }
// rows of x below the table (the dynamic shared memory below TAB_OFF is otherwise unused)
inline __host__ __device__ int mma_rows_low(int M, int n) {
    const int low = TAB_OFF / (2 * n);
    return low < M ? low : M;
}
inline __host__ __device__ int mma_x_off(int m, int M, int n) {
    const int low = mma_rows_low(M, n);
    return m < low ? 2 * n * m : XQ_OFF + 2 * n * (m - low);
}

// x [M, n] (dtype dt: 0 f32, 1 bf16, 2 f16) into shared memory as DT halves, 8 inputs a
// thread a trip: halves copied as they are (cp.async, every trip's issued at once), float32
// rounded to bf16 (DT 0) through registers, four trips' loads issued together
template <int DT, int NTH>
TQ_DEV void stage_x_halves(const void* x, int dt, int M, int n, char* base) {
    const int per = n >> 3, chunks = M * per;
    auto dst = [&](int c) {
        const int m = c / per, j = c - m * per;
        return base + mma_x_off(m, M, n) + mma_x_slot(m, j >> 2, j & 3);
    };
    if (dt != 0) {
        for (int c = threadIdx.x; c < chunks; c += NTH)
            copy16_async(dst(c), static_cast<const uint16_t*>(x) + (size_t)8 * c);
        copy_async_wait();
        return;
    }
    constexpr int QB = 4;
    for (int c0 = 0; c0 < chunks; c0 += QB * NTH) {
        uint4 v[QB];
#pragma unroll
        for (int t = 0; t < QB; ++t) {
            const int c = c0 + t * NTH + (int)threadIdx.x;
            if (c >= chunks) continue;
            float f[8];
            load8(x, 0, (size_t)8 * c, f);
            v[t] = make_uint4(bf16_bits(f[0]) | bf16_bits(f[1]) << 16, bf16_bits(f[2]) | bf16_bits(f[3]) << 16,
                              bf16_bits(f[4]) | bf16_bits(f[5]) << 16, bf16_bits(f[6]) | bf16_bits(f[7]) << 16);
        }
#pragma unroll
        for (int t = 0; t < QB; ++t) {
            const int c = c0 + t * NTH + (int)threadIdx.x;
            if (c < chunks) *reinterpret_cast<uint4*>(dst(c)) = v[t];
        }
    }
}

// dynamic shared memory of a pair_rows_mma launch: the table, x's rows after it, the warps'
// sums of tiles they share (two tiles of 16 × 8 a warp)
inline __host__ __device__ int mma_part_off(int M, int n) { return XQ_OFF + 2 * n * (M - mma_rows_low(M, n)); }
inline size_t rows_mma_smem(int M, int n) { return (size_t)mma_part_off(M, n) + (MMA_NTH / 32) * 2 * 128 * 4; }

template <int DT, int PP>
TQ_GLOBAL void TQ_BOUNDS(MMA_NTH) pair_rows_mma(const uint32_t* __restrict__ words,
                                                const uint16_t* __restrict__ scales,
                                                const uint32_t* __restrict__ table, const void* x,
                                                int dt, Out out, int M, int rows, int n, int ppb,
                                                float factor, int nblocks) {
    TQ_DYN_SMEM;
    constexpr int NW = MMA_NTH / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    static_assert(PP == 1 || PP == 2 || PP == 4, "1, 2 or 4 periods a lane");
    constexpr int D = MMA_D, WN = PP * K + 1;  // items in flight; words a row a slot
    const int ng = n >> 5, nw = ng * K, nu = (ng + 4 * PP - 1) / (4 * PP);  // periods, words
    // a row; items a tile (an item: 4·PP periods of the tile's 16 rows)
    // the widest load a lane's run of words allows: its bytes, a row's, the words' address
    // (no lambda here: nvcc 13.0's front end fails on one called in place in this kernel)
    const uintptr_t wa = (uintptr_t)words;
    const int vec = PP * K % 4 == 0 && nw % 4 == 0 && wa % 16 == 0  ? 16
                    : PP * K % 2 == 0 && nw % 2 == 0 && wa % 8 == 0 ? 8
                                                                     : 4;
    const int tiles = (rows + 15) >> 4;
    const int ta = (int)((int64_t)tiles * blockIdx.x / nblocks);
    const int N = ((int)((int64_t)tiles * (blockIdx.x + 1) / nblocks) - ta) * nu;  // the block's items
    const int lo = N * warp / NW, hi = N * (warp + 1) / NW;  // this warp's
    float* part = reinterpret_cast<float*>(smem + mma_part_off(M, n));  // [NW][2][4][32]
    uint32_t ws[D][2][WN] = {};  // the slots (a lane past ng decodes any words)
    int lt = lo / nu, lu = lo - lt * nu, li = lo;  // the next item to load: tile (of the block's), item
    const uint32_t *row0, *row1;  // its rows g and g + 8 (past the last row: the last row)
    auto tile_rows = [&] {
        const int r = 16 * (ta + lt) + g;
        row0 = words + (size_t)min(r, rows - 1) * nw;
        row1 = words + (size_t)min(r + 8, rows - 1) * nw;
    };
    tile_rows();
    auto load_item = [&](uint32_t (&slot)[2][WN]) {
        const int p = PP * (4 * lu + c);
        if (li < hi && p < ng) {
            load_run<PP>(row0, p, ppb, ng, vec, slot[0]);
            load_run<PP>(row1, p, ppb, ng, vec, slot[1]);
        }
        ++li;
        if (++lu == nu) {
            lu = 0;
            ++lt;
            tile_rows();
        }
    };
#pragma unroll
    for (int d = 0; d < D; ++d) load_item(ws[d]);
    load_table<MMA_NTH, DT == 0 ? 2 : 1>(table, smem);
    pdl_wait();  // x: the kernel before this one's (under PDL; the words on their way)
    pdl_trigger();
    stage_x_halves<DT, MMA_NTH>(x, dt, M, n, smem);
    __syncthreads();
    const uint32_t tb = shared_addr(smem + TAB_OFF);
    if (!table_at_tab(tb, out, M * rows, nblocks, MMA_NTH)) return;
    const uint32_t lane4 = tb | (4u * lane);
    const char* xrow = smem + mma_x_off(g, M, n);  // row g of x (g < M)
    const float fs = factor * 8192.f;
    float acc[MMA_ACC][4] = {};  // mma j adds to chain j % MMA_ACC
    int dtl = lo / nu, du = lo - dtl * nu, di = lo;  // the item decoded: tile, item
    auto entry = [&](const uint32_t (&w)[K + 1], int v) {
        return lds_abs(((window(w, v) * HMUL) & AMASK) | lane4);
    };
    auto item = [&](uint32_t (&slot)[2][WN]) {
#pragma unroll
        for (int h = 0; h < PP; ++h) {  // the lane's period p of the item (words from hK)
            const int p = PP * (4 * du + c) + h;
            uint32_t xv[16];
            if (g < M && p < ng) {
                const int G = group_of(p, ppb);
#pragma unroll
                for (int q = 0; q < 4; ++q) {
                    const uint4 t = *reinterpret_cast<const uint4*>(xrow + mma_x_slot(g, G, q));
                    xv[4 * q] = t.x; xv[4 * q + 1] = t.y; xv[4 * q + 2] = t.z; xv[4 * q + 3] = t.w;
                }
            } else {
#pragma unroll
                for (int q = 0; q < 16; ++q) xv[q] = 0u;
            }
            const auto& w0 = reinterpret_cast<const uint32_t (&)[K + 1]>(slot[0][h * K]);
            const auto& w1 = reinterpret_cast<const uint32_t (&)[K + 1]>(slot[1][h * K]);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const uint32_t a[4] = {entry(w0, 2 * j + 1), entry(w1, 2 * j + 1), entry(w0, 2 * j),
                                       entry(w1, 2 * j)};
                const uint32_t b[2] = {xv[14 - 2 * j], xv[15 - 2 * j]};  // adjacent registers
                mma16816<DT>(acc[j % MMA_ACC], a, b);
            }
        }
        load_item(slot);
        if (du == nu - 1 || di == hi - 1) {  // the tile's sums: out, or to shared memory
            const int t = ta + dtl, ts = dtl * nu;
#pragma unroll
            for (int i = 1; i < MMA_ACC; ++i)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[0][r] += acc[i][r];
            if (lo <= ts && hi >= ts + nu) {
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int row = 16 * t + g + 8 * (r >> 1), m = 2 * c + (r & 1);
                    if (m < M && row < rows)
                        put(out, (size_t)m * rows + row, acc[0][r] * half_of(scales, row) * fs);
                }
            } else {
                float* pp = part + (warp * 2 + (dtl == lo / nu ? 0 : 1)) * 128;
#pragma unroll
                for (int r = 0; r < 4; ++r) pp[32 * r + lane] = acc[0][r];
            }
#pragma unroll
            for (int i = 0; i < MMA_ACC; ++i)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[i][r] = 0.f;
        }
        ++di;
        if (++du == nu) { du = 0; ++dtl; }
    };
    for (int f = lo; f < hi; f += D) {
#pragma unroll
        for (int d = 0; d < D; ++d)
            if (f + d < hi) item(ws[d]);
    }
    __syncthreads();
    // tiles the block's warps share: their sums added in warp order
    for (int e = threadIdx.x; e < N / nu * 128; e += MMA_NTH) {
        const int tl = e >> 7, k = e & 127, r = k >> 5, l = k & 31, ts = tl * nu, te = ts + nu;
        float v = 0.f;
        bool whole = false;
        for (int w = 0; w < NW && !whole; ++w) {
            const int wl = N * w / NW, wh = N * (w + 1) / NW;
            if (wl >= te || wh <= ts || wl == wh) continue;
            whole = wl <= ts && wh >= te;  // its sums went out
            if (!whole) v += part[(w * 2 + (tl == wl / nu ? 0 : 1)) * 128 + k];
        }
        const int row = 16 * (ta + tl) + (l >> 2) + 8 * (r >> 1), m = 2 * (l & 3) + (r & 1);
        if (!whole && m < M && row < rows)
            put(out, (size_t)m * rows + row, v * half_of(scales, row) * fs);
    }
}

// cols: the (tile, input) units u = tile·n_in + i (tile-major) of block b,
// [U·b/G, U·(b+1)/G), lie in at most two tiles (the recipe keeps n_in ≥ U/G): inputs
// [ia, ia + na) of tile `first`, then inputs [0, nb) of the next
struct ColsSplit {
    int first, ia, na, nb;
};
TQ_DEV ColsSplit cols_split(int b, int nblocks, int n_in, int tiles) {
    const int64_t U = (int64_t)tiles * n_in;
    const int64_t lo = U * b / nblocks, hi = U * (b + 1) / nblocks;
    const int first = (int)(lo / n_in);
    const int64_t cut = hi < (int64_t)(first + 1) * n_in ? hi : (int64_t)(first + 1) * n_in;
    return {first, (int)(lo - (int64_t)first * n_in), (int)(cut - lo), (int)(hi - cut)};
}

// the shared-memory slots of groups of 32 inputs a cols block quantizes (quantize_slots):
// tile `first`'s groups from ia's, then the next tile's from input 0
struct ColsSlots {
    int ga, sa, sb;
};
TQ_DEV ColsSlots cols_slots(const ColsSplit& c) {
    const int ga = c.ia >> 5;
    return {ga, c.na ? ((c.ia + c.na + 31) >> 5) - ga : 0, (c.nb + 31) >> 5};
}

template <int V>
struct IntC {
    static constexpr int value = V;
};

// cols: steps [V0, V0 + VS) of one input's period (words w) times its int8 value (xl;
// xh = xl << 8): step v adds to the sums of outputs 30 − 2v and 31 − 2v, acc[j] and
// acc[j + 1] with j = 2(V0 + VS − 1 − v)
template <int V0, int VS>
TQ_DEV void cols_steps(const uint32_t (&w)[K + 1], uint32_t xl, uint32_t xh, uint32_t lane4,
                       int (&acc)[2 * VS]) {
#pragma unroll
    for (int vv = 0; vv < VS; ++vv) {
        const int j = 2 * (VS - 1 - vv);
        const uint32_t e = lds_abs(((window(w, V0 + vv) * HMUL) & AMASK) | lane4);
        acc[j] = dp2a_lo(e, xl, acc[j]);
        acc[j + 1] = dp2a_lo(e, xh, acc[j + 1]);
    }
}

// cols in fp16: steps [V0, V0 + VS) of one input's period times its fp16 value in both
// halves of xx[m] for each input row m: step v adds its pair (two fp16, table entries ·
// 2^-13) to row m's sums of outputs 30 − 2v (low half) and 31 − 2v (high) in one packed fma,
// acc[m][VS − 1 − v]. One fma a step and row instead of two IDP2A (half rate on the
// FMA-heavy pipe): 5 instructions a step at M = 1, and the decode shared by M rows above.
// At M = 1 the sums of a group of 32 inputs stay below 2^7 (|entry| < 4, |x| ≤ its group's
// largest): fp16's 11 bits there lose less than the int8 inputs of the other kernels do.
template <int V0, int VS, int M>
TQ_DEV void cols_steps_half(const uint32_t (&w)[K + 1], const uint32_t (&xx)[M], uint32_t lane4,
                            uint32_t (&acc)[M][VS]) {
#pragma unroll
    for (int vv = 0; vv < VS; ++vv) {
        const uint32_t e = lds_abs(((window(w, V0 + vv) * HMUL) & AMASK) | lane4);
#pragma unroll
        for (int m = 0; m < M; ++m) acc[m][VS - 1 - vv] = hfma2(e, xx[m], acc[m][VS - 1 - vv]);
    }
}

// cols at M > 1 (fp16 slots, gsw = GSW_HALF): each row's slots brought to one scale, the
// largest of the row's group scales in the block (rowscale[m]; NaN where a group's is),
// so a walker sums its whole range in fp16 with no flush a group: 16·M packed sums a
// lane, where M × 32 float sums would not fit the registers. Ends on a block barrier.
TQ_DEV void rescale_rows(uint32_t* xq, const float* gs, float* rowscale, int M, int ns, int nth) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (warp < M) {
        int a = 0;  // the scales' bits: ≥ 0 or NaN, which is above every finite one as int
        for (int j = lane; j < ns; j += 32) a = max(a, __float_as_int(gs[warp * ns + j]));
        for (int o = 16; o > 0; o >>= 1) a = max(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
        if (lane == 0) rowscale[warp] = __int_as_float(a);
    }
    __syncthreads();
    for (int q = threadIdx.x; q < M * ns * GSW_HALF; q += nth) {
        const int s = q / GSW_HALF;
        const float r = rowscale[s / ns], f = r == 0.f ? 0.f : __fdiv_rn(gs[s], r);
        const uint32_t h = xq[q];
        xq[q] = f16_bits(__fmul_rn(f16_bits_float(h & 0xFFFF), f)) |
                f16_bits(__fmul_rn(f16_bits_float(h >> 16), f)) << 16;
    }
    __syncthreads();
}

// cols: x [M, n_in] -> part [G][M][2][1024], each row's sums of the block's first tile and
// the next, its walkers' added in walker order, and tile_range [tiles] (pair_cols_sum's): .x =
// 2·b0 + the slot of b0's part holding the tile, .y = b1, the tile's first and last block
// (each written by that block); gsw as pair_rows'. A walker is SUB adjacent warps walking
// the same inputs, warp s of it decoding steps [16s/SUB, 16(s+1)/SUB) of each period
// (32/SUB outputs a lane: SUB = 2 halves the registers, so NTHC = 1024 threads fit);
// NTHC / 32 / SUB = 16 walkers a block either way. M > 1 (HALF only): one decode for the M
// rows, each row's sums in fp16 over the walker's whole range (rescale_rows).
template <int SUB, int NTHC, bool HALF, int M = 1>
TQ_GLOBAL void TQ_BOUNDS(NTHC) pair_cols(const uint32_t* __restrict__ words,
                                         const uint16_t* __restrict__ scales,
                                         const uint32_t* __restrict__ table, const void* x, int dt,
                                         float* __restrict__ part, int* __restrict__ tile_range,
                                         int n_in, int nperiods, int ppb, int gsw, int nblocks) {
    TQ_DYN_SMEM;
    static_assert(M == 1 || HALF, "rows share a decode in the fp16 walk only");
    constexpr int W = NTHC / 32 / SUB, VS = 16 / SUB, NO = 32 / SUB;  // walkers, steps, sums
    static_assert(W == NT / 32, "the shared-memory layout holds 16 walkers' sums");
    const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) / SUB;  // warp: the walker
    const int sub = (threadIdx.x >> 5) % SUB;  // its steps: [VS·sub, VS·(sub + 1))
    const int o0 = 32 - NO * (sub + 1);  // its sums: outputs [o0, o0 + NO) of the period
    constexpr int D = COLS_D / SUB > 0 ? COLS_D / SUB : 1;  // inputs' words in flight a warp
    float* red = reinterpret_cast<float*>(smem + RED_OFF);  // [W][32 lanes][RED_LANE]
    uint32_t* xq = reinterpret_cast<uint32_t*>(red + W * RED_WARP);  // [M][slots][gsw]
    const int tiles = (nperiods + 31) / 32;
    const ColsSplit c = cols_split(blockIdx.x, nblocks, n_in, tiles);
    const ColsSlots sl = cols_slots(c);
    const int ns = sl.sa + sl.sb;  // slots a row
    float* gs = reinterpret_cast<float*>(xq + M * ns * gsw);  // [M][slots], then rowscale [M]
    // warps of the first tile: shares of the units in proportion, at least one a part
    const int na = c.na, nb = c.nb;
    int wa = na == 0 ? 0 : nb == 0 ? W : (W * na + (na + nb) / 2) / (na + nb);
    wa = na > 0 && wa == 0 ? 1 : nb > 0 && wa == W ? W - 1 : wa;
    const bool first = warp < wa;
    const int ws = first ? warp : warp - wa, wn = first ? wa : W - wa, sn = first ? na : nb;
    const int i0 = (first ? c.ia : 0) + (int)((int64_t)sn * ws / wn);
    const int i1 = (first ? c.ia : 0) + (int)((int64_t)sn * (ws + 1) / wn);
    const int tile = c.first + (first ? 0 : 1);
    const int p = min(32 * tile + lane, nperiods - 1);
    const size_t nw = (size_t)nperiods * K;
    // period p's words of input i0's row and its next period's first word, walked a row
    // an input; D inputs' words in flight, asked for before the table and x are ready
    const int pb = p & (ppb - 1);
    const uint32_t* pf = words + (size_t)i0 * nw + K * p;
    const uint32_t* pn = pf + (pb == ppb - 1 ? K * (1 - ppb) : K);
    uint32_t ring[D][K + 1];
#pragma unroll
    for (int d = 0; d < D; ++d) {
        if (i0 + d < i1) {
            period_words<K>(pf, ring[d]);
            ring[d][K] = __ldg(pn);
        }
        pf += nw;
        pn += nw;
    }
    load_table<NTHC, HALF ? 1 : 0>(table, smem);
    pdl_wait();  // x: the kernel before this one's (under PDL)
    pdl_trigger();  // pair_cols_sum (and, under PDL, later kernels) may launch
    quantize_slots<HALF>(x, dt, M, n_in, sl.ga, sl.sa, ns, scales, xq, gsw, gs, NTHC);
    __syncthreads();
    float* rowscale = gs + M * ns;
    if constexpr (M > 1) rescale_rows(xq, gs, rowscale, M, ns, NTHC);
    const uint32_t tb = shared_addr(smem + TAB_OFF);
    const uint32_t lane4 = tb | (4u * lane);  // tb == TAB: a runtime value, one LOP3
    // input i's int8 q: byte i % 32 of its group's slot — slot i / 32 − ga (first tile),
    // sa + i / 32 (the next); the slot's scale
    const int s0 = (first ? -sl.ga : sl.sa) + (i0 >> 5);
    // (HALF: fp16 value i % 32 of the slot; row m's M·… slots on); XB: bytes an input takes
    constexpr int XB = HALF ? 2 : 1;
    const unsigned char* xb =
        reinterpret_cast<const unsigned char*>(xq + s0 * gsw) + XB * (i0 & 31);
    const int xrow = ns * gsw * 4;  // bytes from a row's slots to the next row's
    const float* gsp = gs + s0;
    float facc[NO];
    int acc[NO];  // acc[j]: output o0 + j
    uint32_t hacc[M][NO / 2];  // HALF: row m's outputs o0 + 2j (low half) and o0 + 2j + 1 (high)
#pragma unroll
    for (int o = 0; o < NO; ++o) { facc[o] = 0.f; acc[o] = 0; }
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int o = 0; o < NO / 2; ++o) hacc[m][o] = 0;
    // the walk, its steps constants: one loop for each part of the period (SUB = 2)
    auto walk = [&](auto part_c) {
        constexpr int V0 = decltype(part_c)::value * VS;
        for (int i = i0; i < i1; i += D) {
#pragma unroll
            for (int d = 0; d < D; ++d) {
                const int ii = i + d;
                if (ii >= i1) break;
                if constexpr (HALF) {
                    uint32_t xx[M];
#pragma unroll
                    for (int m = 0; m < M; ++m)
                        xx[m] = *reinterpret_cast<const uint16_t*>(xb + m * xrow) * 0x10001u;
                    xb += XB;
                    cols_steps_half<V0, VS, M>(ring[d], xx, lane4, hacc);
                } else {
                    const uint32_t xl = *xb++, xh = xl << 8;
                    cols_steps<V0, VS>(ring[d], xl, xh, lane4, acc);
                }
                if (ii + D < i1) {  // the slot, once decoded, takes input ii + D
                    period_words<K>(pf, ring[d]);
                    ring[d][K] = __ldg(pn);
                }
                pf += nw;
                pn += nw;
                if (((ii + 1) & 31) == 0 || ii + 1 == i1) {  // the end of a group of inputs
                    xb += 4 * gsw - 32 * XB;  // to the next slot's first input
                    if constexpr (M > 1) continue;  // one scale a row: no flush
                    const float sc = *gsp++;
                    if constexpr (HALF) {
#pragma unroll
                        for (int o = 0; o < NO / 2; ++o) {
                            facc[2 * o] = fmaf(sc, f16_bits_float(hacc[0][o] & 0xFFFF), facc[2 * o]);
                            facc[2 * o + 1] = fmaf(sc, f16_bits_float(hacc[0][o] >> 16), facc[2 * o + 1]);
                            hacc[0][o] = 0;
                        }
                    } else {
#pragma unroll
                        for (int o = 0; o < NO; ++o) {
                            facc[o] = fmaf(sc, (float)acc[o], facc[o]);
                            acc[o] = 0;
                        }
                    }
                }
            }
        }
    };
    if (tb == TAB) {
        if (SUB == 1 || sub == 0)
            walk(IntC<0>{});
        else
            walk(IntC<1>{});
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {  // a row at a time through the walkers' shared sums
        if (m > 0) __syncthreads();  // the row before read
        float* r = red + warp * RED_WARP + RED_LANE * lane + o0;
        if constexpr (M == 1) {
#pragma unroll
            for (int o = 0; o < NO; ++o) r[o] = facc[o];
        } else {
            const float sc = rowscale[m];
#pragma unroll
            for (int o = 0; o < NO / 2; ++o) {
                r[2 * o] = sc * f16_bits_float(hacc[m][o] & 0xFFFF);
                r[2 * o + 1] = sc * f16_bits_float(hacc[m][o] >> 16);
            }
        }
        __syncthreads();
        float* pm = part + ((size_t)blockIdx.x * M + m) * 2048;
        for (int e = threadIdx.x; e < 2048; e += NTHC) {  // slot e / 1024, in walker order
            const int slot = e >> 10;
            float v = 0.f;
            const int i = RED_LANE * ((e >> 5) & 31) + (e & 31);
            for (int w = slot ? wa : 0; w < (slot ? W : wa); ++w) v += red[w * RED_WARP + i];
            pm[e] = tb == TAB ? v : __int_as_float(0x7FC00000);
        }
    }
    if (threadIdx.x == 0) {  // the tiles this block begins or ends (for pair_cols_sum)
        const int b = blockIdx.x, t0 = 2 * c.first, t1 = t0 + 2;  // [2t], [2t + 1]: .x, .y
        if (c.na > 0 && c.ia == 0) tile_range[t0] = 2 * b;
        if (c.na > 0 && c.ia + c.na == n_in) tile_range[t0 + 1] = b;
        if (c.nb > 0) tile_range[t1] = 2 * b + 1;
        if (c.nb == n_in) tile_range[t1 + 1] = b;
    }
}

// cols, step 2: out [M, n_out] = the sums of the blocks that meet each output's tile
// (tile_range), × factor; block (p, m): row m's period p. A block of SUM_W warps takes one
// period's 32 outputs: warp w adds blocks b0 + w, b0 + w + SUM_W, ... in order, warp 0
// then the warps' sums in warp order (a fixed order: deterministic). It lets the kernel
// after it launch once its wait is over.
constexpr int SUM_W = 8, SUM_B = 4;
TQ_GLOBAL void TQ_BOUNDS(32 * SUM_W) pair_cols_sum(const float* __restrict__ part,
                                                   const int2* __restrict__ tile_range, Out out,
                                                   int ppb, float factor) {
    TQ_SHARED float red[SUM_W][32];
    const int p = blockIdx.x, t = p >> 5, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int m = blockIdx.y, M = gridDim.y;
    const size_t e = (size_t)m * 2048 + (p & 31) * 32 + lane;  // the output's place in a part
    pdl_wait();  // the cols kernel's sums
    pdl_trigger();
    const int2 r = __ldg(tile_range + t);
    const int b0 = r.x >> 1;
    float v = 0.f;
    for (int b = b0 + w; b <= r.y; b += SUM_B * SUM_W) {  // SUM_B loads in flight
        float pv[SUM_B];
#pragma unroll
        for (int j = 0; j < SUM_B; ++j) {  // b0 may hold the tile second, the rest first
            const int bj = b + j * SUM_W;
            const size_t at = (size_t)bj * M * 2048 + (bj == b0 ? 1024 * (r.x & 1) : 0) + e;
            pv[j] = bj <= r.y ? __ldg(part + at) : 0.f;
        }
#pragma unroll
        for (int j = 0; j < SUM_B; ++j) v += pv[j];
    }
    red[w][lane] = v;
    __syncthreads();
    if (w == 0) {
        for (int i = 1; i < SUM_W; ++i) v += red[i][lane];
        put(out, (size_t)m * 32 * gridDim.x + 32 * group_of(p, ppb) + lane, v * factor);
    }
}

// dynamic shared memory of a rows launch: the table, x quantized, the warps' sums
inline size_t rows_smem(int M, int n, int rb, int nth, int gsw) {
    return (size_t)XQ_OFF + (size_t)M * (n / 32) * (gsw + 1) * 4 + (size_t)(nth / 32) * rb * M * 4;
}
// the pair_rows_mma instance for x of dtype dt (2: fp16, else bf16) and a run of pp periods
// a lane (1, 2 or 4)
using RowsMmaKernel = void (*)(const uint32_t*, const uint16_t*, const uint32_t*, const void*,
                               int, Out, int, int, int, int, float, int);
inline RowsMmaKernel rows_mma_kernel(int dt, int pp) {
    if (dt == 2) return pp == 1 ? pair_rows_mma<1, 1> : pp == 2 ? pair_rows_mma<1, 2> : pair_rows_mma<1, 4>;
    return pp == 1 ? pair_rows_mma<0, 1> : pp == 2 ? pair_rows_mma<0, 2> : pair_rows_mma<0, 4>;
}
// cols: a block's (tile, input) units at most (G blocks)
inline int64_t cols_per(int n_in, int n_out, int nblocks) {
    const int64_t units = (int64_t)((n_out / 32 + 31) / 32) * n_in;
    return (units + nblocks - 1) / nblocks;
}
// of a cols launch of G blocks, m rows: the table, the warps' sums, the slots a block
// quantizes (m rows), the rows' scales
inline size_t cols_smem(int n_in, int n_out, int nblocks, int gsw, int m) {
    const int64_t per = cols_per(n_in, n_out, nblocks);
    return (size_t)RED_OFF + (size_t)(NT / 32) * RED_WARP * 4 +
           (size_t)m * ((per / 32 + 3) * (gsw + 1) + 1) * 4;
}
// the rows a cols launch shares one decode over: up to COLS_M in the fp16 walk, where a
// walker's range (at most per / 8 + 1 inputs of a block's per units: its share of a tile's
// part, 16 walkers a block) is at most 513 inputs, so its fp16 sums stay below 2^11 (entries
// below 4, inputs at most 1), as many as fit `limit` bytes of shared memory; else one (the
// int8 walk, or longer ranges)
constexpr int COLS_M = 4;
inline int cols_rows(int M, int half, int n_in, int n_out, int nblocks, size_t limit) {
    int m = half && cols_per(n_in, n_out, nblocks) <= 4096 ? (M < COLS_M ? M : COLS_M) : 1;
    while (m > 1 && cols_smem(n_in, n_out, nblocks, GSW_HALF, m) > limit) --m;
    return m;
}
// the cols kernel instance: sub warps a walker, half (the fp16 walk), m rows (half only)
using ColsKernel = void (*)(const uint32_t*, const uint16_t*, const uint32_t*, const void*, int,
                            float*, int*, int, int, int, int, int);
inline ColsKernel cols_kernel(int sub, int half, int m) {
#ifdef TQ_PAIR_MMA_ONLY
    return nullptr;
#endif
    if (sub == 1 && !half && m == 1) return pair_cols<1, NT, false>;
    if (sub == 2 && !half && m == 1) return pair_cols<2, 2 * NT, false>;
    if (!half || (sub != 1 && sub != 2)) return nullptr;
#define TQ_COLS_M(r) \
    if (m == r) return sub == 1 ? pair_cols<1, NT, true, r> : pair_cols<2, 2 * NT, true, r>;
    TQ_COLS_M(1) TQ_COLS_M(2) TQ_COLS_M(3) TQ_COLS_M(4)
#undef TQ_COLS_M
    return nullptr;
}

#ifdef __CUDACC__
namespace {
// the padded group layout where it fits the device, else the tight one (0: neither)
size_t smem_limit() {  // the dynamic shared memory a block may opt in to
    static int limit = 0;
    if (!limit) {
        int dev = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    }
    return (size_t)limit;
}
template <typename F>
int pick_gsw(F need, int pad = GSW_PAD, int tight = GSW_TIGHT) {
    const size_t limit = smem_limit();
    return need(pad) <= limit ? pad : need(tight) <= limit ? tight : 0;
}

template <int M, int RB, int WPR, int NTH>
int rows_launch(const uint32_t* w, const uint16_t* s, const uint32_t* t, const void* x, int dt,
                Out out, int rows, int n, int ppb, float factor, int nblocks, bool pdl,
                cudaStream_t st) {
    const int gsw = pick_gsw([&](int g) { return rows_smem(M, n, RB, NTH, g); });
    if (!gsw) return -2;
    const size_t smem = rows_smem(M, n, RB, NTH, gsw);
    auto kern = pair_rows<M, RB, WPR, NTH>;
    const cudaError_t e = raise_smem(kern, smem);
    if (e != cudaSuccess) return (int)e;
    return launch(kern, nblocks, NTH, smem, st, TQ_PDL_IN && pdl, w, s, t, x, dt, out, rows, n, ppb,
                  gsw, factor, nblocks);
}
}  // namespace

extern "C" {

// the dynamic shared memory a launch needs at least (the tight layout; the caller checks
// it fits the device)
size_t tq_pair_rows_smem(int M, int n, int rb, int nth) { return rows_smem(M, n, rb, nth, GSW_TIGHT); }
size_t tq_pair_rows_mma_smem(int M, int n) { return rows_mma_smem(M, n); }
size_t tq_pair_cols_smem(int n_in, int n_out, int nblocks, int half) {  // of one row
    return cols_smem(n_in, n_out, nblocks, half ? GSW_HALF : GSW_TIGHT, 1);
}

// rows (axis 1): x [M, n] -> out [M, rows] of dtype odt (0 f32, 1 bf16, 2 f16); (M, rb, wpr,
// nth) one of the instances
int tq_pair_rows(const void* words, const void* scales, const void* table, const void* x, int dt,
                 void* out, int odt, int M, int rows, int n, int T, int rb, int wpr, int nth, float factor,
                 int nblocks, int pdl, void* stream) {
    if ((uintptr_t)words % words_align<K>()) return -3;  // period_words' vector loads
    auto W = (const uint32_t*)words;
    auto S = (const uint16_t*)scales;
    auto Tb = (const uint32_t*)table;
    const Out O{out, odt};
    auto st = (cudaStream_t)stream;
    const int ppb = T / 32;
#define TQ_PAIR_ROWS(m, r, p, t)                                                          \
    if (M == m && rb == r && wpr == p && nth == t)                                        \
        return rows_launch<m, r, p, t>(W, S, Tb, x, dt, O, rows, n, ppb, factor, nblocks, pdl != 0, st);
    TQ_PAIR_ROWS_INSTANCES
#undef TQ_PAIR_ROWS
    return -1;
}

// rows on the tensor cores (pair_rows_mma): x [M ≤ 8, n] (dt 0 f32, 1 bf16, 2 f16: the fp16
// instance, else bf16) -> out [M, rows] of dtype odt; pp: the run of periods a lane takes of a
// row an item (1, 2, 4; T ≥ 32·pp)
int tq_pair_rows_mma(const void* words, const void* scales, const void* table, const void* x,
                     int dt, void* out, int odt, int M, int rows, int n, int T, int pp,
                     float factor, int nblocks, int pdl, void* stream) {
    if ((uintptr_t)words % words_align<K>()) return -3;  // period_words' vector loads
    if (M < 1 || M > 8 || (pp != 1 && pp != 2 && pp != 4)) return -1;
    if (T < 32 * pp) return -4;  // a lane's run of periods in one block
    const size_t smem = rows_mma_smem(M, n);
    if (smem > smem_limit()) return -2;
    const RowsMmaKernel kern = rows_mma_kernel(dt, pp);
    const cudaError_t e = raise_smem(kern, smem);
    if (e != cudaSuccess) return (int)e;
    return launch(kern, nblocks, MMA_NTH, smem, (cudaStream_t)stream, TQ_PDL_IN && pdl != 0,
                  (const uint32_t*)words, (const uint16_t*)scales, (const uint32_t*)table, x, dt,
                  Out{out, odt}, M, rows, n, T / 32, factor, nblocks);
}

// cols (axis 0): x [M, n_in] -> out [M, n_out] of dtype odt (words [n_in, nw] with
// nw = n_out·k/32); sub: warps a walker (1: 512 threads a block, 2: 1024); half: the walk in
// packed fp16 (cols_steps_half), rows sharing a decode cols_rows at a time, else int8 inputs
// and IDP2A, a row at a time; part (nblocks·(2048·min(M, COLS_M) + 2) floats, tiles ≤
// nblocks) is the caller's scratch
int tq_pair_cols(const void* words, const void* scales, const void* table, const void* x, int dt,
                 void* part, void* out, int odt, int M, int n_in, int n_out, int T, int sub,
                 int half, float factor, int nblocks, int pdl, void* stream) {
    if ((uintptr_t)words % words_align<K>()) return -3;  // period_words' vector loads
    auto st = (cudaStream_t)stream;
    const int ppb = T / 32, nperiods = n_out / 32;
    if ((nperiods + 31) / 32 > nblocks) return -4;  // a block's units span at most two tiles
    const int mc = cols_rows(M, half, n_in, n_out, nblocks, smem_limit());
    if (!cols_kernel(sub, half, mc)) return -1;
    const int gsw = pick_gsw([&](int g) { return cols_smem(n_in, n_out, nblocks, g, mc); },
                             half ? GSW_HALF : GSW_PAD, half ? GSW_HALF : GSW_TIGHT);
    if (!gsw) return -2;
    float* sums = (float*)part;
    int* tile_range = reinterpret_cast<int*>(sums + (size_t)nblocks * 2048 * mc);
    const size_t xs = dt ? 2 : 4, os = odt ? 2 : 4;  // bytes an input, an output
    int rc = 0;
    for (int m0 = 0; m0 < M && !rc; m0 += mc) {
        const int m = M - m0 < mc ? M - m0 : mc;
        const ColsKernel kern = cols_kernel(sub, half, m);
        const size_t smem = cols_smem(n_in, n_out, nblocks, gsw, m);
        const cudaError_t e = raise_smem(kern, smem);
        if (e != cudaSuccess) return (int)e;
        rc = launch(kern, nblocks, sub * NT, smem, st, TQ_PDL_IN && pdl, (const uint32_t*)words,
                    (const uint16_t*)scales, (const uint32_t*)table,
                    (const void*)((const char*)x + m0 * n_in * xs), dt, sums, tile_range, n_in,
                    nperiods, ppb, gsw, nblocks);
        rc = rc ? rc : launch(pair_cols_sum, dim3(nperiods, m), 32 * SUM_W, 0, st, pdl != 0,
                              (const float*)sums, reinterpret_cast<const int2*>(tile_range),
                              Out{(char*)out + m0 * n_out * os, odt}, ppb, factor);
    }
    return rc;
}

}  // extern "C"
#endif
