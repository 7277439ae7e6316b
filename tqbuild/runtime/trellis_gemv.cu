// Trellis decode-matvec with int8 activations (small M), one library per
// (k, L, code): nvcc -DTQ_K=k -DTQ_L=L -DTQ_CODE=c (0: 1MAD, 2: mul1).
//
// Byte-sum codes are affine in the byte sum of a 32-bit hash h(s):
// value = (bytesum(h) − 510) / 147.8. With the activations quantized to int8 in
// groups of 32 inputs (x ≈ gs·q), a weight times its input is one dp4a:
// dp4a(h, q·0x01010101, acc) adds bytesum(h)·q, so a weight costs
// shift + mask (the state), IMAD (the hash) and IDP4A — no float work inside the
// loop; each group's −510·Σq and its scale gs are applied once per 32 weights.
//
// Layout (DESIGN §5): a row's block of T weights is T/32 periods of 32 weights
// in k words; weight j = T−1−t of a block starts at bit k·j, so weight v (0..31)
// of period p starts at bit k·v of its k words, the window running into the next
// period's first word (the block's first at its end). Weight v of a period meets
// input col0 − v, col0 = (p / ppb)·T + T−1 − 32·(p % ppb): the period's 32 inputs
// are one aligned activation group g = col0 / 32.
//
// `rows` (axis 1): a persistent block first quantizes x into shared memory; then
// each warp owns RB output rows at a time, its lanes taking periods (two
// prefetched), every splat serving RB weights; lanes are summed by shuffles
// (fixed order).
// `cols` (axis 0, stored transposed: stored row i = input i): a warp's lanes take
// 32 consecutive periods of output columns; warps split the 32-weight period
// into S = 32/VPT sub-periods (VPT accumulators per input row M) and the input
// rows into units of U rows; splits of the rows go to partial sums added by a
// second kernel in a fixed order (deterministic, no atomics).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "pdl_launch.cuh"
#include "quant8.cuh"
#include "row_words.cuh"

#ifndef TQ_K
#error "define TQ_K, TQ_L and TQ_CODE"
#endif

namespace {

constexpr int K = TQ_K;
constexpr int L = TQ_L;
constexpr uint32_t MASK = L >= 32 ? 0xFFFFFFFFu : ((1u << L) - 1u);
constexpr int U = 8;  // cols: input rows per unit
#ifndef TQ_COLS_WARPS
// cols: warps a block. 16 (one block an SM, its inputs quantized once for 16 warps) beat 8
// (two blocks an SM at most) on one H100: the 8B decode 389.5–390.8 vs 382.7–385.1 tokens/s
// over three processes each, bf16 158 (decode_8b-cuda-s24*.json); alone at M = 1, k = 2 / 3 /
// 4: 4096 × 14336 17.6 / 17.9 / 18.2 vs 18.4 / 18.9 / 19.4 µs, 5120 × 17408 23.1 / 24.1 /
// 24.3 vs 24.7 / 26.1 / 27.6 (cols_splits-cuda-s23a.json, -s24.json). All 64 int8
// reference cases match under both (logs/int8-cases-s24.log). -DTQ_COLS_WARPS=8: the old block
#define TQ_COLS_WARPS 16
#endif
#ifndef TQ_COLS_MINB  // cols blocks an SM must hold (caps registers at 128 either way)
#define TQ_COLS_MINB (TQ_COLS_WARPS >= 16 ? 1 : 2)
#endif
#ifndef TQ_TC_MINB
#define TQ_TC_MINB 2  // rows_tc blocks an SM must hold at M > 2 (2 caps registers at 128)
#endif
#ifndef TQ_TC_TL
#define TQ_TC_TL 2  // rows_tc: 16-row tiles a warp takes at M ≤ 2 (registers vs reuse of B)
#endif
#ifndef TQ_TC_MINB12
#define TQ_TC_MINB12 2  // rows_tc blocks an SM must hold at M ≤ 2
#endif
#ifndef TQ_TC_ACC
#define TQ_TC_ACC 1  // rows_tc: independent MMA accumulators a D fragment (1 or 2)
#endif
#ifndef TQ_TC_SPLIT
#define TQ_TC_SPLIT 0  // rows_tc: 1 = each warp a contiguous range of rounds (a tuning sweep)
#endif
#ifndef TQ_TC_WALK
#define TQ_TC_WALK 0  // rows_tc: 1 = row pointers advanced a round (not recomputed)
#endif
#ifndef TQ_SUM_WARPS
#define TQ_SUM_WARPS 8  // sum_splits: warps a block of 32 outputs, each a share of the splits
#endif
constexpr int SUM_WARPS = TQ_SUM_WARPS;
#ifndef TQ_PDL_IN
#define TQ_PDL_IN 0  // 1: rows_fused (x quantized in the block) and cols_kernel also launched
                     // with programmatic dependent launch: they may start while the kernel
                     // before them runs (when it lets them: inductor's with
                     // TORCHINDUCTOR_ENABLE_PDL=1) and wait for it before reading x
#endif
#ifndef TQ_COLS_DEPTH
#define TQ_COLS_DEPTH 4  // cols: rows of words in flight ahead of the decode
#endif

__device__ __forceinline__ uint32_t code_hash(uint32_t s) {
#if TQ_CODE == 0
    return s * 34038481u + 76625530u;
#else
    return s * 0x83DCD12Du;
#endif
}

// an output buffer and its dtype (as x's: 0 float32, 1 bfloat16, 2 float16): the
// kernels round their float32 results once, as torch's .to() would (RNE)
struct Out { void* p; int dt; };
__device__ __forceinline__ void put(Out o, size_t i, float v) {
    if (o.dt == 1) reinterpret_cast<__nv_bfloat16*>(o.p)[i] = __float2bfloat16_rn(v);
    else if (o.dt == 2) reinterpret_cast<__half*>(o.p)[i] = __float2half_rn(v);
    else reinterpret_cast<float*>(o.p)[i] = v;
}
// output (token m, row) of a rows kernel: its sum v times the row's scale and the
// code's factor
__device__ __forceinline__ void put_row(Out o, int m, int rows, int row, float v,
                                        const __half* scales, float factor) {
    put(o, (size_t)m * rows + row, v * __half2float(scales[row]) * factor);
}

// acc + Σ_b unsigned byte b of h · signed byte b of q
__device__ __forceinline__ int dp4a_us(uint32_t h, int q, int acc) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(h), "r"(q), "r"(acc));
    return d;
}

// state of weight v of a period from its k words and the next one (w[K]);
// v is a constant after unrolling, so are the word index and the shift
__device__ __forceinline__ uint32_t state(const uint32_t (&w)[K + 1], int v) {
    const int wi = (K * v) >> 5, sh = (K * v) & 31;
    uint32_t s = (sh + L <= 32) ? (w[wi] >> sh) : __funnelshift_r(w[wi], w[wi + 1], sh);
    return s & MASK;
}

#ifndef TQ_TC_LSTATE
#define TQ_TC_LSTATE 1  // rows_tc: states within a word by a left then a right shift
#endif
#ifndef TQ_TC_CMUL
#define TQ_TC_CMUL -1  // rows_tc: ≥ 0: in-word windows by a multiply only for weights v < N
#endif
#if TQ_TC_CMUL >= 0
// 2^i, read from the constant bank: ptxas keeps IMAD R, R, c[..] (the FMA pipe) where a
// multiply by an immediate power of two may become SHF.L (the ALU pipe), so the
// split of the state's work over the two half-rate pipes is chosen here
__constant__ uint32_t kPow2[32] = {
    1u << 0, 1u << 1, 1u << 2, 1u << 3, 1u << 4, 1u << 5, 1u << 6, 1u << 7,
    1u << 8, 1u << 9, 1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15,
    1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21, 1u << 22, 1u << 23,
    1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31};
#endif
// state() for an ALU-bound loop (rows_tc: SHF, LOP3, PRMT, address arithmetic on
// the ALU pipe, only the hash on the FMA pipe): a window inside one word is
// left-aligned by a multiply (IMAD.SHL, the FMA pipe; ptxas would fold a plain
// shift pair back into SHF + LOP3), then one right shift drops the bits below it,
// no mask; windows at bit 0 or across two words as state()
__device__ __forceinline__ uint32_t state_l(const uint32_t (&w)[K + 1], int v) {
    const int wi = (K * v) >> 5, sh = (K * v) & 31;
#if TQ_TC_CMUL >= 0
    if (sh > 0 && sh + L < 32 && v < TQ_TC_CMUL) return (w[wi] * kPow2[32 - L - sh]) >> (32 - L);
#else
    if (TQ_TC_LSTATE && sh > 0 && sh + L < 32) {
        uint32_t y;
        asm("mul.lo.u32 %0, %1, %2;" : "=r"(y) : "r"(w[wi]), "r"(1u << (32 - L - sh)));
        return y >> (32 - L);
    }
#endif
    return state(w, v);
}

// word offsets of period p in its row: its first word, the next period's first
// word (the block's first after its last period)
struct Offsets { int first, next; };
__device__ __forceinline__ Offsets offsets(int p, int ppb) {
    const int last = (p & (ppb - 1)) == ppb - 1;
    return {K * p, K * p + (last ? K * (1 - ppb) : K)};
}

__device__ __forceinline__ void load_ptr(const uint32_t* a, const uint32_t* nxt,
                                         uint32_t (&w)[K + 1]) {
    period_words<K>(a, w);
    w[K] = __ldg(nxt);
}

// the k words of period p of a stored row and the next period's first word
__device__ __forceinline__ void load_words(const uint32_t* row, int p, int ppb,
                                           uint32_t (&w)[K + 1]) {
    const Offsets o = offsets(p, ppb);
    load_ptr(row + o.first, row + o.next, w);
}

__device__ __forceinline__ int comp(const int4& s, int i) {
    return i == 0 ? s.x : i == 1 ? s.y : i == 2 ? s.z : s.w;
}


// x [M, n] quantized into sp (shared memory, by one block: id = threadIdx.x,
// stride = blockDim.x; or global memory, by a grid): per input row m, group g at
// sp + m·ng·GS + g·GS (Q8: 8 words of int8 q; else 32 int32 splats), the group's
// scale and −510·Σq in gsm / gbm [M][ng]. Thread `id` takes chunks of 8 inputs
// id, id + stride, …
template <bool Q8, int GS>
__device__ __forceinline__ void quantize_groups(const void* x, int dtype, int M, int n, int* sp,
                                                float* gsm, int* gbm, int id, int stride,
                                                const __half* rs = nullptr) {
    const int ng = n >> 5, sps = ng * GS;
    // every lane of a warp runs each trip (quant8 shuffles); a group's 4 lanes are
    // all in range or all out (the chunk count is a multiple of 4)
    for (int c0 = 0; c0 < M * (n >> 3); c0 += stride) {
        const int c = c0 + id;
        const bool in = c < M * (n >> 3);
        const int m = M == 1 || !in ? 0 : c / (n >> 3), i0 = in ? (c - m * (n >> 3)) * 8 : 0;
        float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        if (in) load8(x, dtype, (size_t)m * n + i0, v);
        if (in && rs) {  // axis 0: x times its stored row's scale, as the cols kernel
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = __fmul_rn(v[j], __half2float(rs[i0 + j]));
        }
        int q[8];
        float gscale;
        int gbias;
        quant8(v, q, gscale, gbias);
        if (!in) continue;
        const int g = i0 >> 5;
        if constexpr (Q8) {
            *reinterpret_cast<uint2*>(sp + m * sps + g * GS + ((i0 & 31) >> 2)) = pack8(q);
        } else {
            int4* dst = reinterpret_cast<int4*>(sp + m * sps + g * GS + (i0 & 31));
            dst[0] = make_int4(q[0], q[1], q[2], q[3]);
            dst[1] = make_int4(q[4], q[5], q[6], q[7]);
        }
        if ((i0 & 31) == 0) {
            gsm[m * ng + g] = gscale;
            gbm[m * ng + g] = gbias;
        }
    }
}

// one period p of RB rows (words w) against the shared-memory inputs: facc +=
template <int M, int RB, bool Q8, int GS>
__device__ __forceinline__ void rows_period(const uint32_t (&w)[RB][K + 1], int p, int ppb,
                                            int ng, int sps, const int* sp, const float* gsm,
                                            const int* gbm, float (&facc)[RB][M]) {
    const int pb = p & (ppb - 1);
    const int g = (p - pb) + (ppb - 1 - pb);
    int acc[RB][M];
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < RB; ++r) acc[r][m] = gbm[m * ng + g];
    int4 q8[M][2];  // Q8: the group's 32 int8 inputs, 8 words
    if constexpr (Q8) {
#pragma unroll
        for (int m = 0; m < M; ++m) {
            q8[m][0] = *reinterpret_cast<const int4*>(sp + m * sps + g * GS);
            q8[m][1] = *reinterpret_cast<const int4*>(sp + m * sps + g * GS + 4);
        }
    }
#pragma unroll
    for (int a = 0; a < 8; ++a) {
        int4 s[M];
        if constexpr (!Q8) {
#pragma unroll
            for (int m = 0; m < M; ++m)
                s[m] = *reinterpret_cast<const int4*>(sp + m * sps + g * GS + 4 * (7 - a));
        }
#pragma unroll
        for (int b = 0; b < 4; ++b) {
            int sv[M];  // the splat of input 31 − 4a − b of each row of x
#pragma unroll
            for (int m = 0; m < M; ++m) {
                if constexpr (Q8)
                    sv[m] = (int)__byte_perm((uint32_t)comp(q8[m][(7 - a) >> 2], (7 - a) & 3),
                                             0u, (3 - b) * 0x1111u);
                else
                    sv[m] = comp(s[m], 3 - b);
            }
#pragma unroll
            for (int r = 0; r < RB; ++r) {
                const uint32_t h = code_hash(state(w[r], 4 * a + b));
#pragma unroll
                for (int m = 0; m < M; ++m) acc[r][m] = dp4a_us(h, sv[m], acc[r][m]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < RB; ++r)
            facc[r][m] = fmaf(gsm[m * ng + g], (float)acc[r][m], facc[r][m]);
}

// w = a prefetch slot's words; the slot then loads period pn (if any)
template <int RB>
__device__ __forceinline__ void take(uint32_t (&slot)[RB][K + 1], uint32_t (&w)[RB][K + 1],
                                     const uint32_t* const (&wrow)[RB], int pn, int ng,
                                     int ppb) {
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int j = 0; j <= K; ++j) w[r][j] = slot[r][j];
    if (pn < ng) {
#pragma unroll
        for (int r = 0; r < RB; ++r) load_words(wrow[r], pn, ppb, slot[r]);
    }
}

// Programmatic dependent launch (pdl_launch.cuh): quantize_x lets the kernel after
// it start at once; that kernel loads its first weight words, then waits for x.

// quantize_x's global layout (qw, gs, gb) -> a rows block's shared memory as
// quantize_groups<Q8, GS> writes it (M = 1: the int8 q splatted to int32)
template <bool Q8, int GS>
__device__ __forceinline__ void expand_groups(const uint32_t* __restrict__ qw,
                                              const float* __restrict__ gs,
                                              const int* __restrict__ gb, int M, int n, int* sp,
                                              float* gsm, int* gbm, int id, int stride) {
    const int ng = n >> 5, sps = ng * GS;
    for (int i = id; i < M * ng * 8; i += stride) {  // word j of group g of row m
        const int m = i / (ng * 8), r = i - m * ng * 8, g = r >> 3, j = r & 7;
        const uint32_t w = __ldg(qw + i);
        if constexpr (Q8) {
            sp[m * sps + g * GS + j] = (int)w;
        } else {
            *reinterpret_cast<int4*>(sp + m * sps + g * GS + 4 * j) =
                make_int4((int)__byte_perm(w, 0u, 0x0000u), (int)__byte_perm(w, 0u, 0x1111u),
                          (int)__byte_perm(w, 0u, 0x2222u), (int)__byte_perm(w, 0u, 0x3333u));
        }
    }
    for (int i = id; i < M * ng; i += stride) {
        gsm[i] = __ldg(gs + i);
        gbm[i] = __ldg(gb + i);
    }
}

// rows, the activations quantized by the block itself into shared memory: a
// persistent grid (each block quantizes x once, then takes row blocks in turn);
// 4 lanes quantize a group (8 inputs each). Splats are stored 36 ints a group
// (the 4-int pad spreads one LDS.128 per lane over all banks). A block holds RGB
// row groups of RB rows, each spread over WPR warps of periods.
template <int M, int RB>
__global__ void __launch_bounds__(512) rows_fused(
    const uint32_t* __restrict__ words, const __half* __restrict__ scales, const void* x,
    int dtype, const uint32_t* __restrict__ qw, const float* __restrict__ gs,
    const int* __restrict__ gb, Out out, int rows, int nw, int n, int ppb,
    int wpr, float factor) {
    // qw: x quantized by quantize_x (then expanded here, after its words are asked
    // for); null: the block quantizes x itself.
    // M = 1: int32 splats, 36 ints a group; M > 1: int8 q, 12 ints a group (the
    // splat made by one PRMT where used, so M rows of x fit in shared memory)
    constexpr bool Q8 = M > 1;
    constexpr int GS = Q8 ? 12 : 36;
    extern __shared__ int4 smem4[];
    int* smem = reinterpret_cast<int*>(smem4);
    const int ng = n >> 5, sps = ng * GS;
    int* sp = smem;
    float* gsm = reinterpret_cast<float*>(sp + M * sps);
    int* gbm = reinterpret_cast<int*>(gsm + M * ng);
    float* red = reinterpret_cast<float*>(gbm + M * ng);  // [warps][RB * M]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int rg = warp / wpr, wr = warp - rg * wpr, rgb = (blockDim.x >> 5) / wpr;
    const int nrb = (rows + RB - 1) / RB;
    // software pipeline two periods deep: slots A and B hold the words of the
    // next two periods of this lane, each reloaded as soon as it is consumed; the
    // first row block's are requested before x is quantized (the prologue hides
    // their latency)
    const int S = wpr * 32, p0 = wr * 32 + lane;
    const uint32_t* wrow[RB];
    uint32_t wa[RB][K + 1], wb[RB][K + 1];
    auto start_rows = [&](int r0) {
        start_row_words<RB, K + 1, load_words>(words, r0, rows, nw, p0, S, ng, ppb, wrow, wa, wb);
    };
    start_rows((blockIdx.x * rgb + rg) * RB);
    if (qw) {
        pdl_wait();
        expand_groups<Q8, GS>(qw, gs, gb, M, n, sp, gsm, gbm, threadIdx.x, blockDim.x);
    } else {
        if (TQ_PDL_IN) {
            pdl_wait();  // x: the kernel before this one's (words on their way)
            pdl_trigger();  // after the wait: a kernel launched early may rely on every
                            // kernel before this one having finished (inductor's do)
        }
        quantize_groups<Q8, GS>(x, dtype, M, n, sp, gsm, gbm, threadIdx.x, blockDim.x);
    }
    __syncthreads();
    for (int rb0 = blockIdx.x * rgb; rb0 < nrb; rb0 += gridDim.x * rgb) {
        const int r0 = (rb0 + rg) * RB;
        if (rb0 != blockIdx.x * rgb) start_rows(r0);
        float facc[RB][M];
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int m = 0; m < M; ++m) facc[r][m] = 0.f;
        for (int p = p0; p < ng; p += 2 * S) {
            uint32_t w[RB][K + 1];
            take<RB>(wa, w, wrow, p + 2 * S, ng, ppb);
            rows_period<M, RB, Q8, GS>(w, p, ppb, ng, sps, sp, gsm, gbm, facc);
            if (p + S >= ng) break;
            take<RB>(wb, w, wrow, p + 3 * S, ng, ppb);
            rows_period<M, RB, Q8, GS>(w, p + S, ppb, ng, sps, sp, gsm, gbm, facc);
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
        if (wpr == 1) {  // a warp owns its rows: no block-wide step, warps run apart
#pragma unroll
            for (int e0 = 0; e0 < RB * M; e0 += 32) {
                const int e = e0 + lane, r = e / M, m = e - r * M, row = r0 + r;
                float v = 0.f;
#pragma unroll
                for (int i = e0; i < RB * M && i < e0 + 32; ++i) v = i == e ? facc[i / M][i % M] : v;
                if (e < RB * M && rb0 + rg < nrb && row < rows)
                    put_row(out, m, rows, row, v, scales, factor);
            }
            continue;
        }
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < RB; ++r)
#pragma unroll
                for (int m = 0; m < M; ++m) red[warp * RB * M + r * M + m] = facc[r][m];
        }
        __syncthreads();
        int t = threadIdx.x;
        for (; t < rgb * RB * M; t += blockDim.x) {
            const int g2 = t / (RB * M), e = t - g2 * RB * M, r = e / M, m = e - r * M;
            const int row = (rb0 + g2) * RB + r;
            float v = 0.f;
            for (int i = 0; i < wpr; ++i) v += red[(g2 * wpr + i) * RB * M + e];
            if (rb0 + g2 < nrb && row < rows)
                put_row(out, m, rows, row, v, scales, factor);
        }
        __syncthreads();
    }
}

// rows on the tensor cores, for up to 8 input rows (tokens) at once: one
// mma.m16n8k32 (u8 × s8 → s32) takes 16 output rows × 8 weights × 8 tokens. The
// A fragment's four k columns of a thread are the four bytes of one weight's
// hash, B's are that weight's input splatted over four bytes, so the MMA sums
// bytesum(h)·q exactly as dp4a does — for all 8 tokens at once. Thread (g =
// lane / 4, t = lane % 4) decodes rows g and g + 8 at positions 8t .. 8t + 7 of
// each period (two per MMA, k slots t and t + 4); tokens ≥ M get zero inputs.
// A block's warps split one 16-row tile's periods into contiguous ranges and add
// their sums in shared memory (fixed order).
__device__ __forceinline__ void mma_u8s8(int (&d)[4], const uint32_t (&a)[4], int b0, int b1) {
#ifdef TQ_TC_NOMMA  // timing experiment only (wrong results): the MMA's inputs kept live
    d[0] += (int)(a[0] ^ a[1] ^ a[2]);
    d[1] += (int)a[3] ^ b0 ^ b1;
    return;
#endif
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// the 64-bit window of a thread's quarter of a period (bits 8tk .. of its words),
// shifted down to bit 0: (lo, hi)
struct Window { uint32_t lo, hi; };
__device__ __forceinline__ Window quarter(const uint32_t* row, Offsets o, int wi0, int sh0) {
    const uint32_t a = __ldg(row + o.first + wi0);
    const uint32_t b = __ldg(wi0 + 1 < K ? row + o.first + wi0 + 1 : row + o.next);
    return {__funnelshift_r(a, b, sh0), b >> sh0};
}

// state of local position i (0..7) of a quarter window; i constant after unrolling
__device__ __forceinline__ uint32_t qstate(Window w, int i) {
    const int sh = K * i;
    return ((sh + L <= 32) ? (w.lo >> sh) : __funnelshift_r(w.lo, w.hi, sh)) & MASK;
}

constexpr int TL = 2;  // rows_mma: 16-row tiles a warp decodes per period

template <int M>
__global__ void __launch_bounds__(256) rows_mma(
    const uint32_t* __restrict__ words, const __half* __restrict__ scales, const void* x,
    int dtype, Out out, int rows, int nw, int n, int ppb, float factor) {
    extern __shared__ int4 smem4[];
    int* smem = reinterpret_cast<int*>(smem4);
    constexpr int GS = 12;  // int8 q, 12 ints a group (as rows_fused at M > 1)
    const int ng = n >> 5, sps = ng * GS;
    int* sp = smem;
    float* gsm = reinterpret_cast<float*>(sp + M * sps);
    int* gbm = reinterpret_cast<int*>(gsm + M * ng);
    float* red = reinterpret_cast<float*>(gbm + M * ng);  // [warps][TL][32][4]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    quantize_groups<true, GS>(x, dtype, M, n, sp, gsm, gbm, threadIdx.x, blockDim.x);
    __syncthreads();
    const int gq = lane >> 2, t = lane & 3;
    const int wi0 = (8 * t * K) >> 5, sh0 = (8 * t * K) & 31;
    const int tok = gq;                     // this thread's B column (token)
    const int t0 = 2 * t, t1 = 2 * t + 1;   // its D columns
    const int per = (ng + nwarps - 1) / nwarps;
    const int pa = warp * per, pz = min(ng, pa + per);
    for (int tile = blockIdx.x; tile * 16 * TL < rows; tile += gridDim.x) {
        const uint32_t* rw[2 * TL];  // rows g, g + 8 of each of the TL 16-row tiles
#pragma unroll
        for (int j = 0; j < 2 * TL; ++j)
            rw[j] = words + (size_t)min(tile * 16 * TL + gq + 8 * j, rows - 1) * nw;
        float f[TL][4] = {};  // per tile: rows g, g + 8 × tokens 2t, 2t + 1
        Window nx[2 * TL];
        if (pa < pz) {
            const Offsets o = offsets(pa, ppb);
#pragma unroll
            for (int j = 0; j < 2 * TL; ++j) nx[j] = quarter(rw[j], o, wi0, sh0);
        }
        for (int p = pa; p < pz; ++p) {
            Window wn[2 * TL];
#pragma unroll
            for (int j = 0; j < 2 * TL; ++j) wn[j] = nx[j];
            if (p + 1 < pz) {  // the next period's words load while this one decodes
                const Offsets o = offsets(p + 1, ppb);
#pragma unroll
                for (int j = 0; j < 2 * TL; ++j) nx[j] = quarter(rw[j], o, wi0, sh0);
            }
            const int pb = p & (ppb - 1);
            const int g = (p - pb) + (ppb - 1 - pb);
            // this thread's 8 inputs: positions 8t .. 8t+7 meet inputs 31−8t .. 24−8t,
            // words 7−2t (inputs 28−8t .. 31−8t) and 6−2t of the group's int8 q
            uint32_t qa = 0, qb = 0;
            if (tok < M) {
                const int2 w2 = *reinterpret_cast<const int2*>(sp + tok * sps + g * GS + 6 - 2 * t);
                qa = (uint32_t)w2.y;  // inputs 28−8t .. 31−8t: byte j = input 28−8t+j
                qb = (uint32_t)w2.x;  // inputs 24−8t .. 27−8t
            }
            const int g0 = t0 < M ? gbm[t0 * ng + g] : 0, g1 = t1 < M ? gbm[t1 * ng + g] : 0;
            int d[TL][4];
#pragma unroll
            for (int j = 0; j < TL; ++j) {
                d[j][0] = d[j][2] = g0;
                d[j][1] = d[j][3] = g1;
            }
#pragma unroll
            for (int c = 0; c < 4; ++c) {  // positions 8t + 2c (slot t), 8t + 2c + 1 (slot t + 4)
                // position 2c ↔ input 31−8t−2c: byte 3−2c of qa for c < 2, of qb after
                const uint32_t src = c < 2 ? qa : qb;
                const int b0 = (int)__byte_perm(src, 0u, ((3 - 2 * c) & 3) * 0x1111u);
                const int b1 = (int)__byte_perm(src, 0u, ((2 - 2 * c) & 3) * 0x1111u);
#pragma unroll
                for (int j = 0; j < TL; ++j) {
                    const uint32_t a[4] = {code_hash(qstate(wn[2 * j], 2 * c)),
                                           code_hash(qstate(wn[2 * j + 1], 2 * c)),
                                           code_hash(qstate(wn[2 * j], 2 * c + 1)),
                                           code_hash(qstate(wn[2 * j + 1], 2 * c + 1))};
                    mma_u8s8(d[j], a, b0, b1);
                }
            }
            const float s0 = t0 < M ? gsm[t0 * ng + g] : 0.f;
            const float s1 = t1 < M ? gsm[t1 * ng + g] : 0.f;
#pragma unroll
            for (int j = 0; j < TL; ++j) {
                f[j][0] = fmaf(s0, (float)d[j][0], f[j][0]);
                f[j][1] = fmaf(s1, (float)d[j][1], f[j][1]);
                f[j][2] = fmaf(s0, (float)d[j][2], f[j][2]);
                f[j][3] = fmaf(s1, (float)d[j][3], f[j][3]);
            }
        }
#pragma unroll
        for (int j = 0; j < TL; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) red[((warp * TL + j) * 32 + lane) * 4 + i] = f[j][i];
        __syncthreads();
        for (int e = threadIdx.x; e < 16 * TL * M; e += blockDim.x) {  // (row, token) pairs
            const int r = e / M, m = e - r * M, j = r >> 4, rt = r & 15;
            const int ln = (rt & 7) * 4 + (m >> 1), i = (rt >> 3) * 2 + (m & 1);
            float v = 0.f;
            for (int w = 0; w < nwarps; ++w) v += red[((w * TL + j) * 32 + ln) * 4 + i];
            const int row = tile * 16 * TL + r;
            if (row < rows) put_row(out, m, rows, row, v, scales, factor);
        }
        __syncthreads();
    }
}


// ---- rows on the tensor cores, v2 (`rows_tc`) ----
// x is quantized first by `quantize_x` into global memory (int8 q, a scale and
// −510·Σq a group of 32), so no block repeats that work. A block takes tiles of
// 16·TL rows; its warps take every nwarps-th round of 4 periods (so together they
// read adjacent words of a row); thread (g = lane / 4, t = lane % 4)
// decodes period t of the round, all 32 weights, for rows g and g + 8 of each
// tile, from the K words + 1 of the period as stored. One MMA m16n8k32 takes 16
// rows × 8 weight slots × 8 columns: slots t and t + 4 (weights 2c and 2c + 1 of
// period t) and columns (token, period j) — 2 tokens × 4 periods; B is zero where
// the column's period is not the slot's, so a D element sums exactly one period,
// one activation group, and keeps its own int32 sum. NB = ⌈M/2⌉ MMAs share each
// A fragment (the decode), one per pair of tokens.
#ifndef TQ_TC_TL_HI
#define TQ_TC_TL_HI 1  // rows_tc: 16-row tiles a warp takes at M > 2
#endif
__host__ __device__ constexpr int tc_tl(int M) { return M <= 2 ? TQ_TC_TL : TQ_TC_TL_HI; }
constexpr int TC_NW = K + 1;  // a period's words and the next one (L ≤ K + 32)

// x [M, n] -> per input row m and group g: 8 words of int8 q at
// qw + (m·ng + g)·8 (byte j of word i: input 4i + j), scale gs and −510·Σq gb at
// m·ng + g (quantize_groups' Q8 layout in global memory, one chunk a thread)
__global__ void quantize_x(const void* x, int dtype, int M, int n, uint32_t* __restrict__ qw,
                           float* __restrict__ gs, int* __restrict__ gb,
                           const __half* __restrict__ rs) {
    pdl_trigger();
    quantize_groups<true, 8>(x, dtype, M, n, reinterpret_cast<int*>(qw), gs, gb,
                             blockIdx.x * blockDim.x + threadIdx.x, gridDim.x * blockDim.x, rs);
}

// a round's loads of a thread: its rows' words; per MMA u, its B chunk (8 words of
// int8 q; loaded with the words where registers allow, QPRE) and the bias and scale
// of its two D columns
template <int TL, int NB, bool QPRE>
struct TcRound {
    uint32_t w[2 * TL][TC_NW];
    uint32_t q[QPRE ? NB : 1][8];
    int b0[NB], b1[NB];
    float s0[NB], s1[NB];
};

__device__ __forceinline__ void load_q8(const uint32_t* s, bool on, uint32_t (&q)[8]) {
    if (on) {
        const uint4 u = __ldg(reinterpret_cast<const uint4*>(s));
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(s) + 1);
        q[0] = u.x; q[1] = u.y; q[2] = u.z; q[3] = u.w;
        q[4] = v.x; q[5] = v.y; q[6] = v.z; q[7] = v.w;
    } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) q[i] = 0u;
    }
}

template <int M>
__global__ void __launch_bounds__(256, M <= 2 ? TQ_TC_MINB12 : TQ_TC_MINB) rows_tc(
    const uint32_t* __restrict__ words, const __half* __restrict__ scales,
    const uint32_t* __restrict__ qw, const float* __restrict__ gs, const int* __restrict__ gb,
    Out out, int rows, int nw, int n, int ppb, float factor) {
    constexpr int TL = tc_tl(M), NB = (M + 1) / 2, RT = 16 * TL;
    constexpr bool QPRE = NB <= 2;
    using Round = TcRound<TL, NB, QPRE>;
    extern __shared__ float red[];  // [warps][NB][TL][32 lanes][4]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int gq = lane >> 2, t = lane & 3;
    const int ng = n >> 5, nr = ng / 4;
    // B of MMA u: column gq = (token 2u + gq / 4, period gq % 4); this thread's
    // slots carry period t. D columns 2t, 2t + 1: token 2u + t / 2, periods jd, jd + 1
    const int jd = 2 * (t & 1);
    const bool bcol = (gq & 3) == t;
#if TQ_TC_SPLIT  // a warp's rounds: a contiguous range
    const int per = (nr + nwarps - 1) / nwarps, ra = warp * per, rz = min(nr, ra + per), rs = 1;
#else  // every nwarps-th: the block's warps read adjacent rounds of a row together
    const int ra = warp, rz = nr, rs = nwarps;
#endif
    for (int tile = blockIdx.x; tile * RT < rows; tile += gridDim.x) {
        const uint32_t* rp[2 * TL];  // rows g, g + 8 of each tile
#pragma unroll
        for (int r = 0; r < 2 * TL; ++r) {
#ifdef TQ_TC_SAMEROWS  // timing experiment only (wrong results): every tile reads tile 0's rows
            rp[r] = words + (size_t)min(8 * r + gq, rows - 1) * nw + K * t;
#else
            rp[r] = words + (size_t)min(tile * RT + 8 * r + gq, rows - 1) * nw + K * t;
#endif
        }
        // period p0 + j of a round meets group gl − j (blocks of ppb periods run
        // backwards along the inputs)
        auto group = [&](int rd) {
            const int p0 = rd * 4, pb0 = p0 & (ppb - 1);
            return p0 - pb0 + ppb - 1 - pb0;
        };
        auto load_b = [&](int gl, int u, uint32_t (&q)[8]) {
            const int m = 2 * u + (gq >> 2);
            load_q8(qw + ((size_t)min(m, M - 1) * ng + gl - t) * 8, bcol && m < M, q);
        };
        // the next period's first word: the block's first at a block end
        auto nxt_of = [&](int rd) {
            return t < 3 ? K : ((rd * 4 + 4) & (ppb - 1)) == 0 ? K - K * ppb : K;
        };
#if TQ_TC_WALK
        // pointers walk the rows, rounds in the order load_w is called (ra, ra + rs, …):
        // a round's first word and its next-period word, each row; a warp's rounds share
        // their block-end status where rs is a multiple of a block's rounds (else the
        // next word's pointer is set again every round)
        const bool same_end = rs % max(1, ppb / 4) == 0;
        const uint32_t* pw[2 * TL];
        const uint32_t* pn[2 * TL];
#pragma unroll
        for (int r = 0; r < 2 * TL; ++r) {
            pw[r] = rp[r] + ra * 4 * K;
            pn[r] = pw[r] + nxt_of(ra);
        }
        auto load_w = [&](int rd, Round& b) {
            if (!same_end) {
                const int nxt = nxt_of(rd);
#pragma unroll
                for (int r = 0; r < 2 * TL; ++r) pn[r] = pw[r] + nxt;
            }
#pragma unroll
            for (int r = 0; r < 2 * TL; ++r) {
#pragma unroll
                for (int i = 0; i < K; ++i) b.w[r][i] = __ldg(pw[r] + i);
                b.w[r][K] = __ldg(pn[r]);
                pw[r] += rs * 4 * K;
                pn[r] += rs * 4 * K;
            }
        };
#else
        auto load_w = [&](int rd, Round& b) {
            const int base = rd * 4 * K, nxt = nxt_of(rd);
#pragma unroll
            for (int r = 0; r < 2 * TL; ++r) {
#pragma unroll
                for (int i = 0; i < K; ++i) b.w[r][i] = __ldg(rp[r] + base + i);
                b.w[r][K] = __ldg(rp[r] + base + nxt);
            }
        };
#endif
        auto load_x = [&](int rd, Round& b) {  // quantize_x's output for round rd
            const int gl = group(rd);
#pragma unroll
            for (int u = 0; u < NB; ++u) {
                const int c = min(2 * u + (t >> 1), M - 1) * ng + gl;
                b.b0[u] = __ldg(gb + c - jd);
                b.b1[u] = __ldg(gb + c - jd - 1);
                b.s0[u] = __ldg(gs + c - jd);
                b.s1[u] = __ldg(gs + c - jd - 1);
                if constexpr (QPRE) load_b(gl, u, b.q[u]);
            }
        };
        auto load = [&](int rd, Round& b) { load_w(rd, b); load_x(rd, b); };
        float f[NB][TL][4] = {};
        auto run = [&](int rd, const Round& b) {
            // TQ_TC_ACC independent int32 sums a D fragment (MMA c adds into sum c %
            // TQ_TC_ACC: shorter dependency chains), added exactly at the round's end
            int d[NB][TL][4], d2[TQ_TC_ACC][NB][TL][4];
#pragma unroll
            for (int u = 0; u < NB; ++u)
#pragma unroll
                for (int tl = 0; tl < TL; ++tl) {
                    d[u][tl][0] = d[u][tl][2] = b.b0[u];
                    d[u][tl][1] = d[u][tl][3] = b.b1[u];
#pragma unroll
                    for (int a = 0; a < TQ_TC_ACC; ++a)
#pragma unroll
                        for (int i = 0; i < 4; ++i) d2[a][u][tl][i] = 0;
                }
            uint32_t qn[QPRE ? 1 : NB][8];
            if constexpr (!QPRE) {
#pragma unroll
                for (int u = 0; u < NB; ++u) load_b(group(rd), u, qn[u]);
            }
#pragma unroll
            for (int c = 0; c < 16; ++c) {  // slot t: weight 2c, slot t + 4: 2c + 1
                uint32_t a[TL][4];
#pragma unroll
                for (int tl = 0; tl < TL; ++tl) {
                    a[tl][0] = code_hash(state_l(b.w[2 * tl], 2 * c));
                    a[tl][1] = code_hash(state_l(b.w[2 * tl + 1], 2 * c));
                    a[tl][2] = code_hash(state_l(b.w[2 * tl], 2 * c + 1));
                    a[tl][3] = code_hash(state_l(b.w[2 * tl + 1], 2 * c + 1));
                }
                // weight i of a period meets input 31 − i of its group
                const int r0 = 31 - 2 * c, r1 = 30 - 2 * c;
#pragma unroll
                for (int u = 0; u < NB; ++u) {
                    const uint32_t* q;
                    if constexpr (QPRE) q = b.q[u]; else q = qn[u];
                    const int b0 = (int)__byte_perm(q[r0 >> 2], 0u, (r0 & 3) * 0x1111u);
                    const int b1 = (int)__byte_perm(q[r1 >> 2], 0u, (r1 & 3) * 0x1111u);
#pragma unroll
                    for (int tl = 0; tl < TL; ++tl) {
                        if (TQ_TC_ACC == 1 || c % TQ_TC_ACC == 0)
                            mma_u8s8(d[u][tl], a[tl], b0, b1);
                        else
                            mma_u8s8(d2[c % TQ_TC_ACC][u][tl], a[tl], b0, b1);
                    }
                }
            }
#pragma unroll
            for (int x = 1; x < TQ_TC_ACC; ++x)
#pragma unroll
                for (int u = 0; u < NB; ++u)
#pragma unroll
                    for (int tl = 0; tl < TL; ++tl)
#pragma unroll
                        for (int i = 0; i < 4; ++i) d[u][tl][i] += d2[x][u][tl][i];
#pragma unroll
            for (int u = 0; u < NB; ++u)
#pragma unroll
                for (int tl = 0; tl < TL; ++tl) {
                    f[u][tl][0] = fmaf(b.s0[u], (float)d[u][tl][0], f[u][tl][0]);
                    f[u][tl][1] = fmaf(b.s1[u], (float)d[u][tl][1], f[u][tl][1]);
                    f[u][tl][2] = fmaf(b.s0[u], (float)d[u][tl][2], f[u][tl][2]);
                    f[u][tl][3] = fmaf(b.s1[u], (float)d[u][tl][3], f[u][tl][3]);
                }
        };
        Round ba, bn;
        if (ra < rz) load_w(ra, ba);
        pdl_wait();  // x quantized (the first words on their way)
        if (ra < rz) load_x(ra, ba);
        for (int rd = ra; rd < rz; rd += 2 * rs) {  // the next round loads while one decodes
            if (rd + rs < rz) load(rd + rs, bn);
            run(rd, ba);
            if (rd + rs >= rz) break;
            if (rd + 2 * rs < rz) load(rd + 2 * rs, ba);
            run(rd + rs, bn);
        }
#pragma unroll
        for (int u = 0; u < NB; ++u)
#pragma unroll
            for (int tl = 0; tl < TL; ++tl)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    red[(((warp * NB + u) * TL + tl) * 32 + lane) * 4 + i] = f[u][tl][i];
        __syncthreads();
        // output (row, token m): the warps' and the 4 periods' sums, in a fixed order
        for (int e = threadIdx.x; e < RT * M; e += blockDim.x) {
            const int r = e / M, m = e - r * M, tl = r >> 4, rt = r & 15, u = m >> 1;
            float s = 0.f;
            for (int w = 0; w < nwarps; ++w)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int col = (m & 1) * 4 + j;
                    s += red[((((w * NB + u) * TL + tl) * 32 + (rt & 7) * 4 + (col >> 1)) * 4) +
                             (rt >> 3) * 2 + (col & 1)];
                }
            const int row = tile * RT + r;
            if (row < rows) put_row(out, m, rows, row, s, scales, factor);
        }
        __syncthreads();
    }
}

// one warp's share of a cols block: sub-period SUB of its lane's period, the
// units rg, rg + RG, … of the split's rows (splats and group terms in shared
// memory, indexed from the split's first row); per-thread sums -> `red`
template <int M, int VPT, int SUB>
__device__ __forceinline__ void cols_body(const uint32_t* __restrict__ words, const int* spl,
                                          const float* gsm, const int* gbm, float* red, int per,
                                          int nw, int p, int ppb, int row0, int nrows_split,
                                          int rg, int RG) {
    const int pg = per >> 5;
    float facc[VPT][M];
#pragma unroll
    for (int v = 0; v < VPT; ++v)
#pragma unroll
        for (int m = 0; m < M; ++m) facc[v][m] = 0.f;
    // software pipeline, D rows deep: row i's words were loaded D rows earlier into
    // ring slot i % D; rn/qf/qn walk the rows to load (U a unit, then a jump
    // over the other RG − 1 units' rows)
    constexpr int D = TQ_COLS_DEPTH;
    static_assert(U % D == 0 && D < U, "the ring must tile a unit");
    uint32_t ring[D][K + 1];
    int rn = rg * U;
    const size_t jump = (size_t)((RG - 1) * U + 1) * nw;
    const Offsets po = offsets(p, ppb);
    const uint32_t* qf = words + (size_t)(row0 + rn) * nw + po.first;
    const uint32_t* qn = words + (size_t)(row0 + rn) * nw + po.next;
#pragma unroll
    for (int d = 0; d < D; ++d) {  // rows 0 .. D−1 of the first unit
        if (rn < nrows_split) load_ptr(qf, qn, ring[d]);
        rn += 1;
        qf += nw;
        qn += nw;
    }
    for (int u = rg * U; u < nrows_split; u += RG * U) {
        const int g = u >> 5;
        int acc[VPT][M];
#pragma unroll
        for (int m = 0; m < M; ++m) {
            const int b = (u & 31) == 0 ? gbm[m * pg + g] : 0;
#pragma unroll
            for (int v = 0; v < VPT; ++v) acc[v][m] = b;
        }
#pragma unroll
        for (int q4 = 0; q4 < U / 4; ++q4) {
            int4 s[M];
#pragma unroll
            for (int m = 0; m < M; ++m)
                s[m] = *reinterpret_cast<const int4*>(spl + m * per + u + 4 * q4);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int pos = q4 * 4 + i;  // this row in the unit; the load is row pos + D
                uint32_t w[K + 1];
#pragma unroll
                for (int j = 0; j <= K; ++j) w[j] = ring[pos % D][j];
                if (rn < nrows_split) load_ptr(qf, qn, ring[pos % D]);
                const bool unit_end = (pos + D) % U == U - 1;  // the loaded row ends a unit
                rn += unit_end ? (RG - 1) * U + 1 : 1;
                qf += unit_end ? jump : (size_t)nw;
                qn += unit_end ? jump : (size_t)nw;
#pragma unroll
                for (int v = 0; v < VPT; ++v) {
                    const uint32_t h = code_hash(state(w, SUB * VPT + v));
#pragma unroll
                    for (int m = 0; m < M; ++m) acc[v][m] = dp4a_us(h, comp(s[m], i), acc[v][m]);
                }
            }
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
            const float sc = gsm[m * pg + g];
#pragma unroll
            for (int v = 0; v < VPT; ++v) facc[v][m] = fmaf(sc, (float)acc[v][m], facc[v][m]);
        }
    }
    // red[rg][SUB*VPT + v][m][lane]
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int v = 0; v < VPT; ++v)
#pragma unroll
        for (int m = 0; m < M; ++m)
            red[(((size_t)rg * 32 + SUB * VPT + v) * M + m) * 32 + lane] = facc[v][m];
}

__host__ __device__ constexpr int vpt_for(int M) { return M == 1 ? 32 : M == 2 ? 16 : M <= 4 ? 8 : 4; }
constexpr int COLS_WARPS = TQ_COLS_WARPS;

__host__ __device__ constexpr size_t cols_smem(int M, int per) {
    return ((size_t)(COLS_WARPS / (32 / vpt_for(M))) * 32 * M * 32 + (size_t)M * per +
            2 * (size_t)M * (per / 32)) * 4;
}

// A block: 32 periods of output columns × one split of `per` input rows, whose
// activations (x · the rows' scales) it quantizes first into shared memory.
template <int M>
__global__ void __launch_bounds__(COLS_WARPS * 32, TQ_COLS_MINB) cols_kernel(
    const uint32_t* __restrict__ words, const void* x, int dtype,
    const __half* __restrict__ rs, Out dst, int nrows, int nw, int n_out,
    int ppb, int per, float factor) {
    if (TQ_PDL_IN) pdl_wait();  // x: the kernel before this one's
    pdl_trigger();  // sum_splits may start (it waits for this grid); after the wait
    constexpr int VPT = vpt_for(M), S = 32 / VPT, RG = COLS_WARPS / S;
    extern __shared__ int4 smem4[];
    float* red = reinterpret_cast<float*>(smem4);  // [RG][32][M][32]
    int* spl = reinterpret_cast<int*>(red + RG * 32 * M * 32);  // [M][per]
    float* gsm = reinterpret_cast<float*>(spl + M * per);  // [M][per / 32]
    int* gbm = reinterpret_cast<int*>(gsm + M * (per >> 5));
    const int row0 = blockIdx.y * per;
    const int nrows_split = min(nrows - row0, per);
    for (int c0 = 0; c0 < M * (per >> 3); c0 += blockDim.x) {  // whole warps (quant8)
        const int c = c0 + threadIdx.x;
        const bool in = c < M * (per >> 3);
        const int m = in ? c / (per >> 3) : 0, i0 = in ? (c - m * (per >> 3)) * 8 : 0;
        float v[8];
        if (in && i0 < nrows_split) {
            load8(x, dtype, (size_t)m * nrows + row0 + i0, v);
            uint4 t = __ldg(reinterpret_cast<const uint4*>(rs + row0 + i0));
            const uint32_t u4[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                v[2 * j] = __fmul_rn(v[2 * j], __half2float(__ushort_as_half(
                    (unsigned short)(u4[j] & 0xFFFF))));
                v[2 * j + 1] = __fmul_rn(v[2 * j + 1], __half2float(__ushort_as_half(
                    (unsigned short)(u4[j] >> 16))));
            }
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) v[j] = 0.f;
        }
        int q[8];
        float gscale;
        int gbias;
        quant8(v, q, gscale, gbias);
        if (!in) continue;
        int4* d = reinterpret_cast<int4*>(spl + m * per + i0);
        d[0] = make_int4(q[0], q[1], q[2], q[3]);
        d[1] = make_int4(q[4], q[5], q[6], q[7]);
        if ((i0 & 31) == 0) {
            gsm[m * (per >> 5) + (i0 >> 5)] = gscale;
            gbm[m * (per >> 5) + (i0 >> 5)] = gbias;
        }
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = warp % S, rg = warp / S;
    const int ngo = n_out >> 5;
    const int p = min(blockIdx.x * 32 + lane, ngo - 1);
#define TQ_SUB(X) case X: if constexpr (X < S) cols_body<M, VPT, X>(words, spl, gsm, gbm, red, \
        per, nw, p, ppb, row0, nrows_split, rg, RG); break;
    switch (sub) { TQ_SUB(0) TQ_SUB(1) TQ_SUB(2) TQ_SUB(3) TQ_SUB(4) TQ_SUB(5) TQ_SUB(6) TQ_SUB(7) }
#undef TQ_SUB
    __syncthreads();
    // sum the RG row groups in order; thread t: (weight v, input row m, lane) triples
    const size_t o0 = (size_t)blockIdx.y * M * n_out;  // this split's partial sums
    for (int e = threadIdx.x; e < 32 * M * 32; e += COLS_WARPS * 32) {
        const int ln = e & 31, vm = e >> 5, v = vm / M, m = vm % M;
        float s = 0.f;
        for (int j = 0; j < RG; ++j) s += red[(size_t)j * 32 * M * 32 + e];
        const int pp = blockIdx.x * 32 + ln;
        if (pp < ngo) {
            const int pb = pp & (ppb - 1);
            const int col0 = (pp - pb) * 32 + (ppb - 1 - pb) * 32 + 31;
            put(dst, o0 + (size_t)m * n_out + col0 - v, s * factor);
        }
    }
}

// cols on the tensor cores (axis 0, M ≤ 8): one mma.m16n8k32 takes 16 outputs ×
// 8 inputs (k slots, 4 bytes each: a weight's hash) × 8 tokens. Thread (g, t)
// decodes the 4 consecutive weights 4g … 4g + 3 of output period pp of stored rows
// (inputs) i + t (slot t) and i + t + 4 (slot t + 4) from one 32-bit window (A rows
// g / g + 8 of tile j: weights 4g + 2j / 4g + 2j + 1); B is the inputs' int8 q of
// x·rs (quantize_x) splatted, column = token; D columns 2t, 2t + 1 are tokens.
// D starts a group of 32 inputs at −510·Σq and is scaled once a group. A block's
// warps take the groups of its split of the inputs in turn and add their sums in
// shared memory in a fixed order.
// (3K + L ≤ 32: a thread's 4 weights in one 32-bit window; other (k, L) build without it)
constexpr bool COLS_TC = 3 * K + L <= 32;
struct ColsTcGroup {
    uint32_t w[4][4];  // k-step: row i + t words wi0, wi0 + 1; row i + t + 4 the same
    uint2 q[4];        // k-step: token g's q of inputs 8ks .. 8ks + 7 of the group
    int b0, b1;        // −510·Σq of tokens 2t, 2t + 1
    float s0, s1;      // their scales
};

template <int M>
__global__ void __launch_bounds__(256) cols_tc(
    const uint32_t* __restrict__ words, const uint32_t* __restrict__ qw,
    const float* __restrict__ gs, const int* __restrict__ gb, Out dst,
    int nrows, int nw, int n_out, int ppb, int per, float factor) {
    static_assert(M > 0 && COLS_TC, "cols_tc: a thread's 4 weights in one 32-bit window");
    pdl_trigger();  // sum_splits may start (it waits for this grid)
    extern __shared__ float red[];  // [warps][2 tiles][32 lanes][4]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int ng = nrows >> 5, pp = blockIdx.x;
    const int g0 = blockIdx.y * (per >> 5), g1 = min(ng, g0 + (per >> 5));
    const int bit0 = K * 4 * g, wi0 = bit0 >> 5, sh0 = bit0 & 31;
    const Offsets po = offsets(pp, ppb);
    const int off_a = po.first + wi0, off_b = wi0 + 1 < K ? off_a + 1 : po.next;
    const int m0 = min(2 * t, M - 1), m1 = min(2 * t + 1, M - 1), mq = min(g, M - 1);
    auto load_w = [&](int gi, ColsTcGroup& c) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            const uint32_t* ra = words + (size_t)(gi * 32 + ks * 8 + t) * nw;
            const uint32_t* rb = ra + (size_t)4 * nw;
            c.w[ks][0] = __ldg(ra + off_a);
            c.w[ks][1] = __ldg(ra + off_b);
            c.w[ks][2] = __ldg(rb + off_a);
            c.w[ks][3] = __ldg(rb + off_b);
        }
    };
    auto load_x = [&](int gi, ColsTcGroup& c) {
        const uint2* qg = reinterpret_cast<const uint2*>(qw + ((size_t)mq * ng + gi) * 8);
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) c.q[ks] = g < M ? __ldg(qg + ks) : make_uint2(0u, 0u);
        c.b0 = __ldg(gb + m0 * ng + gi);
        c.b1 = __ldg(gb + m1 * ng + gi);
        c.s0 = __ldg(gs + m0 * ng + gi);
        c.s1 = __ldg(gs + m1 * ng + gi);
    };
    float f[2][4] = {};
    auto run = [&](const ColsTcGroup& c) {
        int d[2][4];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            d[j][0] = d[j][2] = c.b0;
            d[j][1] = d[j][3] = c.b1;
        }
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
            const uint32_t wa = __funnelshift_r(c.w[ks][0], c.w[ks][1], sh0);
            const uint32_t wb = __funnelshift_r(c.w[ks][2], c.w[ks][3], sh0);
            // slot t: input 8ks + t (byte t of q word 0), slot t + 4: 8ks + t + 4 (word 1)
            const int b0 = (int)__byte_perm(c.q[ks].x, 0u, t * 0x1111u);
            const int b1 = (int)__byte_perm(c.q[ks].y, 0u, t * 0x1111u);
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const uint32_t a[4] = {code_hash((wa >> (K * 2 * j)) & MASK),
                                       code_hash((wa >> (K * (2 * j + 1))) & MASK),
                                       code_hash((wb >> (K * 2 * j)) & MASK),
                                       code_hash((wb >> (K * (2 * j + 1))) & MASK)};
                mma_u8s8(d[j], a, b0, b1);
            }
        }
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            f[j][0] = fmaf(c.s0, (float)d[j][0], f[j][0]);
            f[j][1] = fmaf(c.s1, (float)d[j][1], f[j][1]);
            f[j][2] = fmaf(c.s0, (float)d[j][2], f[j][2]);
            f[j][3] = fmaf(c.s1, (float)d[j][3], f[j][3]);
        }
    };
    ColsTcGroup ca, cn;
    const int ga = g0 + warp;
    if (ga < g1) load_w(ga, ca);
    pdl_wait();  // x quantized (the first words on their way)
    if (ga < g1) load_x(ga, ca);
    for (int gi = ga; gi < g1; gi += 2 * nwarps) {  // the next group loads while one runs
        if (gi + nwarps < g1) { load_w(gi + nwarps, cn); load_x(gi + nwarps, cn); }
        run(ca);
        if (gi + nwarps >= g1) break;
        if (gi + 2 * nwarps < g1) { load_w(gi + 2 * nwarps, ca); load_x(gi + 2 * nwarps, ca); }
        run(cn);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[((warp * 2 + j) * 32 + lane) * 4 + i] = f[j][i];
    __syncthreads();
    // output (weight v of the period, token m): the warps' sums in order
    const size_t o0 = (size_t)blockIdx.y * M * n_out;  // this split's partial sums
    const int pb = pp & (ppb - 1), col0 = (pp - pb) * 32 + (ppb - 1 - pb) * 32 + 31;
    for (int e = threadIdx.x; e < 32 * M; e += blockDim.x) {
        const int v = e / M, m = e - v * M;
        const int ln = (v >> 2) * 4 + (m >> 1), j = (v >> 1) & 1, i = (v & 1) * 2 + (m & 1);
        float sum = 0.f;
        for (int w = 0; w < nwarps; ++w) sum += red[((w * 2 + j) * 32 + ln) * 4 + i];
        put(dst, o0 + (size_t)m * n_out + col0 - v, sum * factor);
    }
}

// the splits' partial sums, 32 outputs a block: warp w adds splits w, w + W, w + 2W, ...
// in that order, then warp 0 adds the W warps' sums in warp order (a fixed order:
// deterministic, no atomics). One warp reading every split in turn (W = 1): down_proj's
// 64 splits at M = 1 0.4–0.7 µs slower (H100, trellis_gemv-cuda-s14sum-variants.json).
__global__ void __launch_bounds__(32 * SUM_WARPS)
sum_splits(const float* __restrict__ part, Out out, int splits, int count) {
    pdl_wait();  // the cols kernel's partial sums
    pdl_trigger();  // after the wait: the kernel after this one may launch
    __shared__ float red[SUM_WARPS][32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int i = blockIdx.x * 32 + lane;
    float s = 0.f;
    if (i < count)
        for (int j = w; j < splits; j += SUM_WARPS) s += part[(size_t)j * count + i];
    red[w][lane] = s;
    __syncthreads();
    if (w == 0 && i < count) {
        float t = red[0][lane];
        for (int v = 1; v < SUM_WARPS; ++v) t += red[v][lane];
        put(out, i, t);
    }
}

int sm_count() {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return sms;
}

// a kernel's allowed dynamic shared memory on each device (a function's attributes are
// per device: the calling thread's current one, which the Python side sets to the tensors')
struct SmemLimits {
    size_t by_device[64];
    SmemLimits() {
        for (size_t& a : by_device) a = 48 * 1024;
    }
    size_t& here() {
        int dev = 0;
        cudaGetDevice(&dev);
        return by_device[dev & 63];
    }
};

// Opt a kernel into `smem` bytes of dynamic shared memory beyond the default 48 KB on the
// current device; `allowed` (a static per kernel at the caller) keeps it to one call per
// new maximum a device, made before any CUDA-graph capture of that size (a refused raise
// is not recorded: the next call asks again, and the launch reports the error)
template <typename F>
void allow_smem(F kernel, size_t smem, SmemLimits& allowed) {
    size_t& a = allowed.here();
    if (smem > a && raise_smem(kernel, smem) == cudaSuccess) a = smem;
}

size_t fused_smem(int M, int n, int RB, int warps) {
    const int ng = n >> 5;
    return ((size_t)M * ng * (M > 1 ? 12 : 36) + 2 * (size_t)M * ng + (size_t)warps * RB * M) * 4;
}

// x [M, n] -> ws: int8 q (8 words a group), then scales and −510·Σq (M·n/32 each)
struct Quantized { uint32_t* q = nullptr; float* gs = nullptr; int* gb = nullptr; };
Quantized quantize(const void* x, int dtype, int M, int n, uint32_t* ws, cudaStream_t st,
                   const __half* rs = nullptr) {
    const int ng = n >> 5, chunks = M * (n >> 3);
    float* gs = reinterpret_cast<float*>(ws + (size_t)M * ng * 8);
    int* gb = reinterpret_cast<int*>(gs + (size_t)M * ng);
    quantize_x<<<(chunks + 255) / 256, 256, 0, st>>>(x, dtype, M, n, ws, gs, gb, rs);
    return {ws, gs, gb};
}

template <int M>
int launch_rows_fused(const uint32_t* words, const __half* scales, const void* x, int dtype,
                      uint32_t* ws, bool pdl, Out out, int rows, int nw, int n, int ppb,
                      int rb, int wpr, int rgb, int blocks_per_sm, float factor,
                      cudaStream_t st) {
    const Quantized qx = ws ? quantize(x, dtype, M, n, ws, st) : Quantized{};
    const int warps = wpr * rgb;
    const size_t smem = fused_smem(M, n, rb, warps);
    const int sms = sm_count();
    const int nrb = (rows + rb - 1) / rb;
#define TQ_RB(R) case R: { \
        static SmemLimits allowed; \
        allow_smem(rows_fused<M, R>, smem, allowed); \
        int bps = blocks_per_sm; \
        if (bps <= 0) bps = occupancy(rows_fused<M, R>, warps * 32, smem); \
        const int grid = max(1, min((nrb + rgb - 1) / rgb, sms * max(1, bps))); \
        return launch(rows_fused<M, R>, grid, warps * 32, smem, st, (ws || TQ_PDL_IN) && pdl, \
                      words, scales, x, \
                      dtype, qx.q, qx.gs, qx.gb, out, rows, nw, n, ppb, wpr, factor); }
    switch (rb) { TQ_RB(1) TQ_RB(2) TQ_RB(4) TQ_RB(8) default: return -1; }
#undef TQ_RB
}

size_t mma_smem(int M, int n, int warps) {
    const int ng = n >> 5;
    return ((size_t)M * ng * 12 + 2 * (size_t)M * ng + (size_t)warps * TL * 32 * 4) * 4;
}

template <int M>
int launch_rows_mma(const uint32_t* words, const __half* scales, const void* x, int dtype,
                    Out out, int rows, int nw, int n, int ppb, int warps, float factor,
                    cudaStream_t st) {
    const size_t smem = mma_smem(M, n, warps);
    static SmemLimits allowed;
    allow_smem(rows_mma<M>, smem, allowed);
    const int bps = occupancy(rows_mma<M>, warps * 32, smem);
    const int grid = max(1, min((rows + 16 * TL - 1) / (16 * TL), sm_count() * max(1, bps)));
    rows_mma<M><<<grid, warps * 32, smem, st>>>(words, scales, x, dtype, out, rows, nw, n, ppb,
                                                factor);
    return (int)cudaGetLastError();
}

size_t tc_smem(int M, int warps) {
    return (size_t)warps * ((M + 1) / 2) * tc_tl(M) * 32 * 4 * sizeof(float);
}

template <int M>
int launch_rows_tc(const uint32_t* words, const __half* scales, const void* x, int dtype,
                   Out out, uint32_t* ws, bool pdl, int rows, int nw, int n, int ppb,
                   int warps, float factor, cudaStream_t st) {
    const Quantized qx = quantize(x, dtype, M, n, ws, st);
    const size_t smem = tc_smem(M, warps);
    static SmemLimits allowed;
    allow_smem(rows_tc<M>, smem, allowed);
    const int bps = occupancy(rows_tc<M>, warps * 32, smem);
    const int rt = 16 * tc_tl(M);
    const int grid = max(1, min((rows + rt - 1) / rt, sm_count() * max(1, bps)));
    return launch(rows_tc<M>, grid, warps * 32, smem, st, pdl, words, scales, qx.q, qx.gs, qx.gb,
                  out, rows, nw, n, ppb, factor);
}

// the dynamic shared memory cols_kernel<M> is allowed (raised as launches and the
// occupancy query need more). A function's static, not a variable template: nvcc's host
// compiler gave `template <int M> size_t cols_allowed` GNU-unique binding, which the
// dynamic linker makes one variable for every library of this source in the process, so
// one (k, L, code) library's raise stopped another's (tests/test_kernel_symbols.py)
template <int M>
SmemLimits& cols_allowed() {
    static SmemLimits allowed;
    return allowed;
}

// blocks of cols_kernel<M> an SM holds at `per` rows a block; the kernel's shared
// memory limit raised first (a kernel not allowed that much counts none)
template <int M>
int cols_occupancy(int per) {
    const size_t smem = cols_smem(M, per);
    allow_smem(cols_kernel<M>, smem, cols_allowed<M>());
    return occupancy(cols_kernel<M>, COLS_WARPS * 32, smem);
}

// the splits' partial sums part [splits][count] -> out, in split order (none: the
// kernel wrote out itself)
int add_splits(const float* part, Out out, int splits, int count, cudaStream_t st, bool pdl) {
    if (splits <= 1) return (int)cudaGetLastError();
    return launch(sum_splits, (count + 31) / 32, 32 * SUM_WARPS, 0, st, pdl, part, out, splits,
                  count);
}

template <int M>
int launch_cols(const uint32_t* words, const void* x, int dtype, const __half* rs, float* part,
                Out out, int nrows, int nw, int n_out, int ppb, int per, bool pdl,
                float factor, cudaStream_t st) {
    const size_t smem = cols_smem(M, per);
    allow_smem(cols_kernel<M>, smem, cols_allowed<M>());
    const int splits = (nrows + per - 1) / per;
    dim3 grid((n_out / 32 + 31) / 32, splits);
    const int rc = launch(cols_kernel<M>, grid, COLS_WARPS * 32, smem, st, TQ_PDL_IN && pdl,
                          words, x, dtype, rs, splits == 1 ? out : Out{part, 0}, nrows, nw,
                          n_out, ppb, per, factor);
    return rc ? rc : add_splits(part, out, splits, M * n_out, st, pdl);
}

template <int M>
int launch_cols_tc(const uint32_t* words, const void* x, int dtype, const __half* rs,
                   uint32_t* ws, bool pdl, float* part, Out out, int nrows, int nw,
                   int n_out, int ppb, int per, int warps, float factor, cudaStream_t st) {
    if constexpr (!COLS_TC) {
        return (int)cudaErrorNotSupported;  // trellis_cuda.cols_tc_serves never asks
    } else {
        const Quantized qx = quantize(x, dtype, M, nrows, ws, st, rs);
        const int splits = (nrows + per - 1) / per;
        const size_t smem = (size_t)warps * 2 * 32 * 4 * sizeof(float);
        const int rc = launch(cols_tc<M>, dim3(n_out / 32, splits), warps * 32, smem, st, pdl,
                              words, qx.q, qx.gs, qx.gb, splits == 1 ? out : Out{part, 0}, nrows,
                              nw, n_out, ppb, per, factor);
        return rc ? rc : add_splits(part, out, splits, M * n_out, st, pdl);
    }
}

}  // namespace

extern "C" {

// rows: x [M, n] (dtype 0: float32, 1: bfloat16, 2: float16), quantized by every
// block, or first by quantize_x into `ws` (10·M·n/32 words) where ws is not null
// (the rows kernel then launched with programmatic dependent launch where `pdl`)
int tq_gemv_rows_fused(const void* words, const void* scales, const void* x, int dtype,
                       void* out, int odt, void* ws, int pdl, int M, int rows, int nw, int n, int T,
                       int rb, int wpr, int rgb, int blocks_per_sm, float factor,
                       void* stream) {
    const uint32_t* w = (const uint32_t*)words;
    const __half* s = (const __half*)scales;
    const int ppb = T / 32;
    cudaStream_t st = (cudaStream_t)stream;
#define TQ_M(X) case X: return launch_rows_fused<X>(w, s, x, dtype, (uint32_t*)ws, pdl != 0, \
        Out{out, odt}, rows, nw, n, ppb, rb, wpr, rgb, blocks_per_sm, factor, st);
    switch (M) { TQ_M(1) TQ_M(2) TQ_M(3) TQ_M(4) TQ_M(5) TQ_M(6) TQ_M(7) TQ_M(8) }
#undef TQ_M
    return -1;
}

size_t tq_gemv_fused_smem(int M, int n, int rb, int warps) { return fused_smem(M, n, rb, warps); }

// rows on the tensor cores (M ≤ 8), x as tq_gemv_rows_fused
int tq_gemv_rows_mma(const void* words, const void* scales, const void* x, int dtype,
                     void* out, int odt, int M, int rows, int nw, int n, int T, int warps, float factor,
                     void* stream) {
    const uint32_t* w = (const uint32_t*)words;
    const __half* s = (const __half*)scales;
    cudaStream_t st = (cudaStream_t)stream;
#define TQ_M(X) case X: return launch_rows_mma<X>(w, s, x, dtype, Out{out, odt}, rows, nw, n, T / 32, \
        warps, factor, st);
    switch (M) { TQ_M(1) TQ_M(2) TQ_M(3) TQ_M(4) TQ_M(5) TQ_M(6) TQ_M(7) TQ_M(8) }
#undef TQ_M
    return -1;
}

size_t tq_gemv_mma_smem(int M, int n, int warps) { return mma_smem(M, n, warps); }

// rows on the tensor cores, x quantized first into `ws` (10·M·n/32 words; the rows
// kernel launched with programmatic dependent launch where `pdl`); whole rounds of
// 4 periods (n/32 and T/32 multiples of 4)
int tq_gemv_rows_tc(const void* words, const void* scales, const void* x, int dtype,
                    void* out, int odt, void* ws, int pdl, int M, int rows, int nw, int n, int T,
                    int warps, float factor, void* stream) {
    const uint32_t* w = (const uint32_t*)words;
    const __half* s = (const __half*)scales;
    uint32_t* q = (uint32_t*)ws;
    const int ppb = T / 32;
    cudaStream_t st = (cudaStream_t)stream;
    if ((n >> 5) % 4 || ppb % 4 || warps < 1 || warps > 8) return -2;
#define TQ_M(X) case X: return launch_rows_tc<X>(w, s, x, dtype, Out{out, odt}, q, pdl != 0, rows, nw, \
        n, ppb, warps, factor, st);
    switch (M) { TQ_M(1) TQ_M(2) TQ_M(3) TQ_M(4) TQ_M(5) TQ_M(6) TQ_M(7) TQ_M(8) }
#undef TQ_M
    return -2;
}

// cols: x [M, nrows] (dtype as tq_gemv_rows_fused), rs the stored rows' fp16 scales;
// `per` input rows a block (a multiple of 32), part [splits, M, n_out] when
// nrows > per (their sum launched with programmatic dependent launch where `pdl`)
int tq_gemv_cols(const void* words, const void* x, int dtype, const void* rs, float* part,
                 void* out, int odt, int pdl, int M, int nrows, int nw, int n_out, int T,
                 int per, float factor, void* stream) {
    const uint32_t* w = (const uint32_t*)words;
    const __half* r = (const __half*)rs;
    const int ppb = T / 32;
    cudaStream_t st = (cudaStream_t)stream;
    if (per % 32) return -1;
#define TQ_M(X) case X: return launch_cols<X>(w, x, dtype, r, part, Out{out, odt}, nrows, nw, \
        n_out, ppb, per, pdl != 0, factor, st);
    switch (M) { TQ_M(1) TQ_M(2) TQ_M(3) TQ_M(4) TQ_M(5) TQ_M(6) TQ_M(7) TQ_M(8) }
#undef TQ_M
    return -1;
}

// cols on the tensor cores: as tq_gemv_cols, x·rs quantized first into `ws`
// (10·M·nrows/32 words; cols_tc launched with programmatic dependent launch where
// `pdl`); nrows and n_out multiples of 32, `per` a multiple of 32
int tq_gemv_cols_tc(const void* words, const void* x, int dtype, const void* rs, void* ws,
                    int pdl, float* part, void* out, int odt, int M, int nrows, int nw, int n_out, int T,
                    int per, int warps, float factor, void* stream) {
    const uint32_t* w = (const uint32_t*)words;
    const __half* r = (const __half*)rs;
    uint32_t* q = (uint32_t*)ws;
    cudaStream_t st = (cudaStream_t)stream;
    if (per % 32 || nrows % 32 || n_out % 32 || warps < 1 || warps > 8) return -2;
#define TQ_M(X) case X: return launch_cols_tc<X>(w, x, dtype, r, q, pdl != 0, part, \
        Out{out, odt}, nrows, nw, n_out, T / 32, per, warps, factor, st);
    switch (M) { TQ_M(1) TQ_M(2) TQ_M(3) TQ_M(4) TQ_M(5) TQ_M(6) TQ_M(7) TQ_M(8) }
#undef TQ_M
    return -2;
}

size_t tq_gemv_cols_smem(int M, int per) { return cols_smem(M, per); }

// blocks of the cols kernel at M an SM holds with `per` rows a block
int tq_gemv_cols_occupancy(int M, int per) {
#define TQ_M(X) case X: return cols_occupancy<X>(per);
    switch (M) { TQ_M(1) TQ_M(2) TQ_M(3) TQ_M(4) TQ_M(5) TQ_M(6) TQ_M(7) TQ_M(8) }
#undef TQ_M
    return -1;
}

// raise_smem on the cols kernel at M (its cudaError)
int tq_gemv_cols_raise(int M, size_t smem) {
#define TQ_M(X) case X: return (int)raise_smem(cols_kernel<X>, smem);
    switch (M) { TQ_M(1) TQ_M(2) TQ_M(3) TQ_M(4) TQ_M(5) TQ_M(6) TQ_M(7) TQ_M(8) }
#undef TQ_M
    return -1;
}

// the cols kernel at M as compiled and as allowed now: out = registers a thread, threads a
// block at most, static and allowed dynamic shared memory, local memory a thread (bytes)
int tq_gemv_cols_attrs(int M, int* out) {
    cudaFuncAttributes a{};
    cudaError_t e = cudaErrorInvalidValue;
#define TQ_M(X) case X: e = cudaFuncGetAttributes(&a, cols_kernel<X>); break;
    switch (M) { TQ_M(1) TQ_M(2) TQ_M(3) TQ_M(4) TQ_M(5) TQ_M(6) TQ_M(7) TQ_M(8) }
#undef TQ_M
    if (e != cudaSuccess) return (int)(cudaGetLastError(), e);
    const int v[5] = {a.numRegs, a.maxThreadsPerBlock, (int)a.sharedSizeBytes,
                      a.maxDynamicSharedSizeBytes, (int)a.localSizeBytes};
    for (int i = 0; i < 5; ++i) out[i] = v[i];
    return 0;
}

}  // extern "C"
