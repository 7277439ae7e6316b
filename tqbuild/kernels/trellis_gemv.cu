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
// `rows` (axis 1): a block owns RB output rows; its warps' lanes take periods;
// each thread decodes a period of RB rows, every splat it loads serving RB
// weights; lanes and warps are summed in shared memory (fixed order).
// `cols` (axis 0, stored transposed: stored row i = input i): a warp's lanes take
// 32 consecutive periods of output columns; warps split the 32-weight period
// into S = 32/VPT sub-periods (VPT accumulators per input row M) and the input
// rows into units of U rows; splits of the rows go to partial sums added by a
// second kernel in split order (deterministic, no atomics).
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#ifndef TQ_K
#error "define TQ_K, TQ_L and TQ_CODE"
#endif

namespace {

constexpr int K = TQ_K;
constexpr int L = TQ_L;
constexpr uint32_t MASK = L >= 32 ? 0xFFFFFFFFu : ((1u << L) - 1u);
constexpr int U = 8;  // cols: input rows per unit

__device__ __forceinline__ uint32_t code_hash(uint32_t s) {
#if TQ_CODE == 0
    return s * 34038481u + 76625530u;
#else
    return s * 0x83DCD12Du;
#endif
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

// the k words of period p of a stored row and the next period's first word
__device__ __forceinline__ void load_words(const uint32_t* row, int p, int ppb,
                                           uint32_t (&w)[K + 1]) {
    const uint32_t* a = row + K * p;
    if constexpr (K == 4) {
        uint4 t = __ldg(reinterpret_cast<const uint4*>(a));
        w[0] = t.x; w[1] = t.y; w[2] = t.z; w[3] = t.w;
    } else if constexpr (K == 2) {
        uint2 t = __ldg(reinterpret_cast<const uint2*>(a));
        w[0] = t.x; w[1] = t.y;
    } else {
#pragma unroll
        for (int j = 0; j < K; ++j) w[j] = __ldg(a + j);
    }
    const int last = (p & (ppb - 1)) == ppb - 1;
    w[K] = __ldg(a + (last ? K * (1 - ppb) : K));
}

__device__ __forceinline__ int comp(const int4& s, int i) {
    return i == 0 ? s.x : i == 1 ? s.y : i == 2 ? s.z : s.w;
}

template <typename T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }

// One warp per group of 32 inputs of one input row m (blockIdx.y):
// q = rint(v · (127 / max|v|)) with v = x (· the stored row's scale for cols),
// splat = q in all four bytes, gs = max|v| / 127, gb = −510 · Σq.
template <typename T>
__global__ void quant_kernel(const T* __restrict__ x, const __half* __restrict__ rs, int n,
                             int* __restrict__ splat, float* __restrict__ gs,
                             int* __restrict__ gb) {
    const int groups = n >> 5;
    const int g = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31, m = blockIdx.y;
    if (g >= groups) return;
    const int i = g * 32 + lane;
    float v = to_float(x[(size_t)m * n + i]);
    if (rs != nullptr) v = __fmul_rn(v, __half2float(rs[i]));
    float a = fabsf(v);
    const bool bad = __any_sync(0xFFFFFFFFu, isnan(v));
#pragma unroll
    for (int o = 16; o; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
    int q = 0;
    if (a > 0.f && !bad && !isinf(a)) {
        q = (int)rintf(__fmul_rn(v, __fdiv_rn(127.f, a)));
        q = max(-127, min(127, q));
    }
    splat[(size_t)m * n + i] = (int)((uint32_t)(q & 0xFF) * 0x01010101u);
    int sq = q;
#pragma unroll
    for (int o = 16; o; o >>= 1) sq += __shfl_xor_sync(0xFFFFFFFFu, sq, o);
    if (lane == 0) {
        gs[m * groups + g] = bad ? __int_as_float(0x7FC00000) : __fdiv_rn(a, 127.f);
        gb[m * groups + g] = -510 * sq;
    }
}

template <int M, int RB>
__global__ void __launch_bounds__(512) rows_kernel(
    const uint32_t* __restrict__ words, const __half* __restrict__ scales,
    const int4* __restrict__ splat, const float* __restrict__ gs, const int* __restrict__ gb,
    float* __restrict__ out, int rows, int nw, int n, int ppb, float factor) {
    const int ng = n >> 5, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5, r0 = blockIdx.x * RB;
    const uint32_t* wrow[RB];
#pragma unroll
    for (int r = 0; r < RB; ++r) wrow[r] = words + (size_t)min(r0 + r, rows - 1) * nw;
    float facc[RB][M];
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) facc[r][m] = 0.f;

    for (int p = warp * 32 + lane; p < ng; p += nwarps * 32) {
        uint32_t w[RB][K + 1];
#pragma unroll
        for (int r = 0; r < RB; ++r) load_words(wrow[r], p, ppb, w[r]);
        const int pb = p & (ppb - 1);
        const int g = (p - pb) + (ppb - 1 - pb);  // col0 / 32
        int acc[RB][M];
#pragma unroll
        for (int m = 0; m < M; ++m) {
            const int b = __ldg(gb + m * ng + g);
#pragma unroll
            for (int r = 0; r < RB; ++r) acc[r][m] = b;
        }
#pragma unroll
        for (int a = 0; a < 8; ++a) {  // weights 4a .. 4a+3 meet inputs 31−4a .. 28−4a
            int4 s[M];
#pragma unroll
            for (int m = 0; m < M; ++m) s[m] = __ldg(splat + (size_t)m * (n >> 2) + g * 8 + 7 - a);
#pragma unroll
            for (int b = 0; b < 4; ++b) {
#pragma unroll
                for (int r = 0; r < RB; ++r) {
                    const uint32_t h = code_hash(state(w[r], 4 * a + b));
#pragma unroll
                    for (int m = 0; m < M; ++m) acc[r][m] = dp4a_us(h, comp(s[m], 3 - b), acc[r][m]);
                }
            }
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
            const float sc = __ldg(gs + m * ng + g);
#pragma unroll
            for (int r = 0; r < RB; ++r) facc[r][m] = fmaf(sc, (float)acc[r][m], facc[r][m]);
        }
    }
    __shared__ float red[16][RB * M];
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
        for (int m = 0; m < M; ++m) {
            float v = facc[r][m];
#pragma unroll
            for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
            if (lane == 0) red[warp][r * M + m] = v;
        }
    __syncthreads();
    const int t = threadIdx.x;
    if (t < RB * M) {
        const int r = t / M, m = t % M;
        float v = 0.f;
        for (int i = 0; i < nwarps; ++i) v += red[i][t];
        if (r0 + r < rows) out[(size_t)m * rows + r0 + r] = v * __half2float(scales[r0 + r]) * factor;
    }
}

// one warp's share of a cols block: sub-period SUB of its lane's period, the
// units rg, rg + RG, … of the split's rows; per-thread sums -> shared memory
template <int M, int VPT, int SUB>
__device__ __forceinline__ void cols_body(const uint32_t* __restrict__ words,
                                          const int* __restrict__ splat,
                                          const float* __restrict__ gs,
                                          const int* __restrict__ gb, float* red, int nrows,
                                          int nw, int p, int ppb, int row0, int row1, int rg,
                                          int RG) {
    const int ngr = nrows >> 5;
    float facc[VPT][M];
#pragma unroll
    for (int v = 0; v < VPT; ++v)
#pragma unroll
        for (int m = 0; m < M; ++m) facc[v][m] = 0.f;
    for (int u0 = row0 + rg * U; u0 < row1; u0 += RG * U) {
        const int g = u0 >> 5;
        int acc[VPT][M];
#pragma unroll
        for (int m = 0; m < M; ++m) {
            const int b = (u0 & 31) == 0 ? __ldg(gb + m * ngr + g) : 0;
#pragma unroll
            for (int v = 0; v < VPT; ++v) acc[v][m] = b;
        }
        const uint32_t* row = words + (size_t)u0 * nw;
#pragma unroll
        for (int q4 = 0; q4 < U / 4; ++q4) {
            int4 s[M];
#pragma unroll
            for (int m = 0; m < M; ++m)
                s[m] = __ldg(reinterpret_cast<const int4*>(splat + (size_t)m * nrows + u0) + q4);
#pragma unroll
            for (int i = 0; i < 4; ++i, row += nw) {
                uint32_t w[K + 1];
                load_words(row, p, ppb, w);
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
            const float sc = __ldg(gs + m * ngr + g);
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

constexpr int vpt_for(int M) { return M == 1 ? 32 : M == 2 ? 16 : M <= 4 ? 8 : 4; }
constexpr int COLS_WARPS = 8;

template <int M>
__global__ void __launch_bounds__(COLS_WARPS * 32) cols_kernel(
    const uint32_t* __restrict__ words, const int* __restrict__ splat,
    const float* __restrict__ gs, const int* __restrict__ gb, float* __restrict__ dst,
    int nrows, int nw, int n_out, int ppb, int rows_per_split, float factor) {
    constexpr int VPT = vpt_for(M), S = 32 / VPT, RG = COLS_WARPS / S;
    extern __shared__ float red[];  // [RG][32][M][32]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int sub = warp % S, rg = warp / S;
    const int ngo = n_out >> 5;
    const int p_raw = blockIdx.x * 32 + lane;
    const int p = min(p_raw, ngo - 1);
    const int row0 = blockIdx.y * rows_per_split;
    const int row1 = min(nrows, row0 + rows_per_split);
#define TQ_SUB(X) case X: if constexpr (X < S) cols_body<M, VPT, X>(words, splat, gs, gb, red, \
        nrows, nw, p, ppb, row0, row1, rg, RG); break;
    switch (sub) { TQ_SUB(0) TQ_SUB(1) TQ_SUB(2) TQ_SUB(3) TQ_SUB(4) TQ_SUB(5) TQ_SUB(6) TQ_SUB(7) }
#undef TQ_SUB
    __syncthreads();
    // sum the RG row groups in order; thread t: (weight v, input row m, lane) pairs
    float* out = dst + (size_t)blockIdx.y * M * n_out;
    for (int e = threadIdx.x; e < 32 * M * 32; e += COLS_WARPS * 32) {
        const int ln = e & 31, vm = e >> 5, v = vm / M, m = vm % M;
        float s = 0.f;
        for (int j = 0; j < RG; ++j) s += red[(size_t)j * 32 * M * 32 + e];
        const int pp = blockIdx.x * 32 + ln;
        if (pp < ngo) {
            const int pb = pp & (ppb - 1);
            const int col0 = (pp - pb) * 32 + (ppb - 1 - pb) * 32 + 31;
            out[(size_t)m * n_out + col0 - v] = s * factor;
        }
    }
    (void)p_raw;
}

__global__ void sum_splits(const float* __restrict__ part, float* __restrict__ out, int splits,
                           int count) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float s = 0.f;
    for (int j = 0; j < splits; ++j) s += part[(size_t)j * count + i];
    out[i] = s;
}

template <int M>
int launch_rows(const uint32_t* words, const __half* scales, const int* splat, const float* gs,
                const int* gb, float* out, int rows, int nw, int n, int ppb, int rb, int warps,
                float factor, cudaStream_t st) {
    const int4* sp = reinterpret_cast<const int4*>(splat);
    dim3 block(warps * 32);
#define TQ_RB(R) case R: rows_kernel<M, R><<<(rows + R - 1) / R, block, 0, st>>>( \
        words, scales, sp, gs, gb, out, rows, nw, n, ppb, factor); break;
    switch (rb) { TQ_RB(1) TQ_RB(2) TQ_RB(4) TQ_RB(8) default: return -1; }
#undef TQ_RB
    return (int)cudaGetLastError();
}

template <int M>
int launch_cols(const uint32_t* words, const int* splat, const float* gs, const int* gb,
                float* part, float* out, int nrows, int nw, int n_out, int ppb, int splits,
                float factor, cudaStream_t st) {
    constexpr int VPT = vpt_for(M), S = 32 / VPT, RG = COLS_WARPS / S;
    const size_t smem = (size_t)RG * 32 * M * 32 * sizeof(float);
    static bool attr = false;
    if (!attr) {
        cudaFuncSetAttribute(cols_kernel<M>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem);
        attr = true;
    }
    int per = (nrows + splits - 1) / splits;
    per = (per + U - 1) / U * U;
    splits = (nrows + per - 1) / per;
    dim3 grid((n_out / 32 + 31) / 32, splits);
    cols_kernel<M><<<grid, COLS_WARPS * 32, smem, st>>>(words, splat, gs, gb,
                                                         splits == 1 ? out : part, nrows, nw,
                                                         n_out, ppb, per, factor);
    if (splits > 1) {
        const int count = M * n_out;
        sum_splits<<<(count + 255) / 256, 256, 0, st>>>(part, out, splits, count);
    }
    return (int)cudaGetLastError();
}

}  // namespace

extern "C" {

// x [M, n] (dtype 0: float32, 1: bfloat16, 2: float16), rs: optional fp16 [n]
int tq_gemv_quant(const void* x, int dtype, const void* rs, int M, int n, int* splat, float* gs,
                  int* gb, void* stream) {
    cudaStream_t st = (cudaStream_t)stream;
    dim3 grid((n / 32 * 32 + 255) / 256, M);
    const __half* r = (const __half*)rs;
    if (dtype == 0) quant_kernel<float><<<grid, 256, 0, st>>>((const float*)x, r, n, splat, gs, gb);
    else if (dtype == 1)
        quant_kernel<__nv_bfloat16><<<grid, 256, 0, st>>>((const __nv_bfloat16*)x, r, n, splat, gs, gb);
    else quant_kernel<__half><<<grid, 256, 0, st>>>((const __half*)x, r, n, splat, gs, gb);
    return (int)cudaGetLastError();
}

int tq_gemv_rows(const void* words, const void* scales, const int* splat, const float* gs,
                 const int* gb, float* out, int M, int rows, int nw, int n, int T, int rb,
                 int warps, float factor, void* stream) {
    const uint32_t* w = (const uint32_t*)words;
    const __half* s = (const __half*)scales;
    const int ppb = T / 32;
    cudaStream_t st = (cudaStream_t)stream;
#define TQ_M(X) case X: return launch_rows<X>(w, s, splat, gs, gb, out, rows, nw, n, ppb, rb, \
        warps, factor, st);
    switch (M) { TQ_M(1) TQ_M(2) TQ_M(3) TQ_M(4) TQ_M(5) TQ_M(6) TQ_M(7) TQ_M(8) }
#undef TQ_M
    return -1;
}

int tq_gemv_cols(const void* words, const int* splat, const float* gs, const int* gb,
                 float* part, float* out, int M, int nrows, int nw, int n_out, int T, int splits,
                 float factor, void* stream) {
    const uint32_t* w = (const uint32_t*)words;
    const int ppb = T / 32;
    cudaStream_t st = (cudaStream_t)stream;
#define TQ_M(X) case X: return launch_cols<X>(w, splat, gs, gb, part, out, nrows, nw, n_out, ppb, \
        splits, factor, st);
    switch (M) { TQ_M(1) TQ_M(2) TQ_M(3) TQ_M(4) TQ_M(5) TQ_M(6) TQ_M(7) TQ_M(8) }
#undef TQ_M
    return -1;
}

}  // extern "C"
