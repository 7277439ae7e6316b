// Decode matmul of MLX affine weights on the tensor cores (sm_80+), M ≤ 8 rows of x:
// y[m, n] = Σ_k x[m, k] · (q[n, k]·scale[n, k / gs] + bias[n, k / gs]).
//
// A block takes 16 weight rows and a split of the inputs; its W warps stride over the
// split's chunks (16 words of a row: 128 inputs at 4 bits, 256 at 2). In a warp, lane
// group g = lane / 4 owns rows g and g + 8, lane c = lane % 4 of the group words
// 4c … 4c + 3 of each (one 16-byte load a row). mma.m16n8k16: the weights are A, x is
// B (column n = row n of x, zero at n ≥ M), float32 sums.
//
// A sum over k is order-free, so each lane gives the mma the inputs its own words hold
// (the same k for A and B: the slot → k map depends on c alone). A word's fields
// e_0 … e_{P−1} (P = 32 / bits, field j at bit j·bits) form the 32-bit pairs
// (e_j, e_{j+P/2}), j < P/2: one mask-and-or of the word shifted by j·bits with the
// magic 0x4300 (bf16: 128 + q) or 0x6400 (fp16: 1024 + q). mma u of a word takes pairs
// 2u (k-slots 2c, 2c+1) and 2u + 1 (slots 2c+8, 2c+9); x's pairs are formed to match
// (PRMT of two 32-bit words of x). At 8 bits in bf16 (7 mantissa bits) the magic
// holds q's low 7 bits and its top bit selects −magic or 0 as the addend. Values:
// (magic + q) − magic exactly, then
// q·scale + bias in one packed FMA, rounded once to x's dtype (the unpacking path
// rounds the float32 value: the two differ only where that double rounding does).
//
// The same source builds for the host under tests/simt (a SIMT emulator supplying
// the ops below), so the kernel is tested on machines without a GPU.

#include <cstdint>

#ifdef __CUDACC__
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define TQ_DEV __device__ __forceinline__
#define TQ_GLOBAL __global__
#define TQ_BOUNDS(n, minb) __launch_bounds__(n, minb)
#define TQ_SHARED __shared__

TQ_DEV uint4 ld128(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
TQ_DEV uint2 ld64(const void* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
TQ_DEV uint32_t ld16(const uint16_t* p) { return __ldg(p); }
TQ_DEV uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) { return __byte_perm(a, b, sel); }
TQ_DEV void sync_block() { __syncthreads(); }
#include "pdl_launch.cuh"  // pdl_trigger, pdl_wait, launch


// d = a·b + c on two bf16 (DT 0) or fp16 (DT 1) halves, rounded once
template <int DT>
TQ_DEV uint32_t fma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  if constexpr (DT == 0) asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  else asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

#include "mma16816.cuh"  // mma16816<DT>

// float32 -> the bits of x's dtype, round to nearest even (as torch's .to())
template <int DT>
TQ_DEV uint16_t to_bits(float v) {
  if constexpr (DT == 0) return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  else return __half_as_ushort(__float2half_rn(v));
}
#endif

#ifndef TQ_AFF_WARPS
#define TQ_AFF_WARPS 8
#endif
#ifndef TQ_AFF_DEPTH
#define TQ_AFF_DEPTH 4
#endif
#ifndef TQ_AFF_MINB
#define TQ_AFF_MINB 0  // blocks an SM the launch bounds ask for (0: none, no register cap)
#endif
// launches of at least TQ_AFF_WIDE_TILES row tiles: 2 chunks a warp, 4 blocks an SM (64
// registers) — one wave of up to 528 tiles on 132 SMs, a shorter decode after the last
// load (H100, bench/results/affine_gemv-cuda-s19f-variants.json, µs at M = 1: 6144 × 4096
// 11.07 → 9.13, 4096² 7.85 → 7.50, 14336 × 4096 18.43 → 17.54, 4096 × 14336 18.59 → 18.09;
// but 1024 × 4096, 64 tiles, 4.64 → 5.34: fewer tiles keep the deeper launch)
#ifndef TQ_AFF_WIDE_TILES
#define TQ_AFF_WIDE_TILES 128
#endif
#ifndef TQ_AFF_DEPTH_WIDE
#define TQ_AFF_DEPTH_WIDE 2
#endif
#ifndef TQ_AFF_MINB_WIDE
#define TQ_AFF_MINB_WIDE 4
#endif
#ifndef TQ_AFF_PDL
#define TQ_AFF_PDL 0  // programmatic dependent launch: weights loaded before x is waited for
#endif
constexpr int AFF_WARPS = TQ_AFF_WARPS;  // warps a block
constexpr int AFF_DEPTH = TQ_AFF_DEPTH;  // chunks a warp loads before decoding them
constexpr int AFF_MINB = TQ_AFF_MINB;
constexpr int AFF_DEPTH_WIDE = TQ_AFF_DEPTH_WIDE, AFF_MINB_WIDE = TQ_AFF_MINB_WIDE;

__host__ __device__ constexpr int aff_chunk(int bits) { return 16 * (32 / bits); }

// the launch's shape and the kernel's derived arguments, for the CUDA launcher and
// tests/simt alike: 16-row tiles × input splits; log2 of the group; chunks a split;
// float32 partial sums when split; a field's mask in both halves (8 bits in bf16: its
// low 7 bits, see field_pair); the wide launch (TQ_AFF_WIDE_TILES)
struct AffLaunch {
  int tiles, splits, gs_log2, per_split, f32_out;
  uint32_t mask2;
  bool wide;
};
inline AffLaunch aff_launch(int bits, int dt, int N, int K, int gs, int splits) {
  int gs_log2 = 0;
  while ((1 << gs_log2) < gs) ++gs_log2;
  const int chunks = K / aff_chunk(bits);
  const int tiles = (N + 15) / 16;
  return {tiles, splits, gs_log2, (chunks + splits - 1) / splits, splits > 1,
          ((1u << (bits == 8 && dt == 0 ? 7 : bits)) - 1) * 0x00010001u,
          tiles >= TQ_AFF_WIDE_TILES};
}

// the pair (e_j, e_{j+P/2}) of fields at bit sh and sh + 16 of word w, as two exact
// values of x's dtype
template <int BITS, int DT>
TQ_DEV uint32_t field_pair(uint32_t w, int sh, uint32_t mask2) {
  constexpr uint32_t MAGIC2 = (DT == 0 ? 0x4300u : 0x6400u) * 0x00010001u;
  constexpr uint32_t ONE2 = (DT == 0 ? 0x3F80u : 0x3C00u) * 0x00010001u;
  constexpr uint32_t NEG2 = MAGIC2 | 0x80008000u;  // −magic
  if constexpr (BITS == 8 && DT == 0) {  // mask2 = 0x007F007F: the low 7 bits
    const uint32_t f = w >> sh;
    const uint32_t top = (f >> 7) & 0x00010001u;  // bit 7 of each field
    return fma2<DT>((f & mask2) | MAGIC2, ONE2, NEG2 - top * 0xC300u);  // −128 or 0
  } else {
    return fma2<DT>(((w >> sh) & mask2) | MAGIC2, ONE2, NEG2);
  }
}

template <int BITS, int DT, int W, int U, int MINB>
TQ_GLOBAL void TQ_BOUNDS(32 * W, MINB)
affine_mma(const uint16_t* __restrict__ x, const uint32_t* __restrict__ words,
           const uint16_t* __restrict__ scales, const uint16_t* __restrict__ biases,
           void* __restrict__ out, int M, int N, int K, int gs_log2, int per_split,
           int f32_out, uint32_t mask2) {
  // mask2: a field's mask in both halves, ((1 << BITS) − 1)·0x10001 — an argument, so
  // the LOP3 reads it from the constant bank (as an immediate beside the magic's,
  // ptxas rematerialised it before every use)
  constexpr int P = 32 / BITS, CK = aff_chunk(BITS);  // fields a word, inputs a chunk
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int ra = blockIdx.x * 16 + g, rb = ra + 8;
  const int NW = K / P, G = K >> gs_log2;
  const int lo = blockIdx.y * per_split;
  const int hi = lo + per_split < K / CK ? lo + per_split : K / CK;
  // rows past N read row N − 1 with zero scale and bias (values 0, never stored); x
  // columns n ≥ M read row M − 1 (their outputs are never stored either)
  const uint32_t* wa_row = words + (int64_t)(ra < N ? ra : N - 1) * NW + 4 * c;
  const uint32_t* wb_row = words + (int64_t)(rb < N ? rb : N - 1) * NW + 4 * c;
  const uint16_t* sa_row = scales + (int64_t)(ra < N ? ra : N - 1) * G;
  const uint16_t* sb_row = scales + (int64_t)(rb < N ? rb : N - 1) * G;
  const uint16_t* ba_row = biases + (int64_t)(ra < N ? ra : N - 1) * G;
  const uint16_t* bb_row = biases + (int64_t)(rb < N ? rb : N - 1) * G;
  const uint32_t mask_a = ra < N ? 0xFFFFFFFFu : 0u, mask_b = rb < N ? 0xFFFFFFFFu : 0u;
  const uint16_t* xr = x + (int64_t)(g < M ? g : M - 1) * K + 4 * c * P;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};

  for (int ch0 = lo + warp; ch0 < hi; ch0 += U * W) {
    // U chunks in flight: this lane's words of rows g and g + 8 and their groups' scales
    // and biases (scale | bias << 16), all loaded before any is decoded; a chunk past
    // the split rereads the first with zero scales and biases (values 0: no branch, so
    // the x loads below may be hoisted too)
    uint4 A[U], B[U];
    uint32_t SBa[U], SBb[U];
#pragma unroll
    for (int d = 0; d < U; ++d) {
      const bool in = ch0 + d * W < hi;
      const int ch = in ? ch0 + d * W : ch0;
      A[d] = ld128(wa_row + ch * 16);
      B[d] = ld128(wb_row + ch * 16);
      const int gi = (ch * CK + 4 * c * P) >> gs_log2;  // this lane's 4 words: one group
      SBa[d] = (ld16(sa_row + gi) | ld16(ba_row + gi) << 16) & (in ? mask_a : 0u);
      SBb[d] = (ld16(sb_row + gi) | ld16(bb_row + gi) << 16) & (in ? mask_b : 0u);
    }
    // the first chunk's scales depend (through a zero ptxas cannot see: mask2 >> 30)
    // on every chunk's words and scales, so all are loaded before the first decode
    // (ptxas otherwise sinks each chunk's loads next to their use, serialising the
    // chunks' latencies)
    uint32_t all = 0;
#pragma unroll
    for (int d = 1; d < U; ++d) all |= SBa[d] | SBb[d] | A[d].x | B[d].x;
    SBa[0] |= all & (mask2 >> 30);
    if (TQ_AFF_PDL && ch0 == lo + warp) {
      pdl_wait();  // x: the kernel before this one's
      pdl_trigger();  // after the wait: a kernel launched early may rely on every kernel
                      // before this one having finished (inductor's do)
    }
#pragma unroll
    for (int d = 0; d < U; ++d) {
      const int k0 = (ch0 + d * W < hi ? ch0 + d * W : ch0) * CK;  // the chunk's first input
      const uint32_t sa = prmt(SBa[d], 0, 0x1010), ba = prmt(SBa[d], 0, 0x3232);  // splats
      const uint32_t sb = prmt(SBb[d], 0, 0x1010), bb = prmt(SBb[d], 0, 0x3232);
      const uint32_t wa[4] = {A[d].x, A[d].y, A[d].z, A[d].w};
      const uint32_t wb[4] = {B[d].x, B[d].y, B[d].z, B[d].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t X[P / 2];  // x[g, k0 + 4c·P + i·P …]: P inputs, pairs (x_2v, x_2v+1)
#pragma unroll
        for (int v = 0; v < P / 8; ++v) {
          const uint4 q = ld128(xr + k0 + i * P + 8 * v);
          X[4 * v] = q.x; X[4 * v + 1] = q.y; X[4 * v + 2] = q.z; X[4 * v + 3] = q.w;
        }
        if constexpr (P == 4) {  // 8 bits: 4 inputs a word
          const uint2 q = ld64(xr + k0 + i * P);
          X[0] = q.x; X[1] = q.y;
        }
#pragma unroll
        for (int u = 0; u < P / 4; ++u) {
          uint32_t a[4], b[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // pair j = 2u + h: A regs h·2 (row g), h·2 + 1 (g + 8)
            const int sh = (2 * u + h) * BITS;
            const uint32_t qa = field_pair<BITS, DT>(wa[i], sh, mask2);
            const uint32_t qb = field_pair<BITS, DT>(wb[i], sh, mask2);
            a[2 * h] = fma2<DT>(qa, sa, ba);
            a[2 * h + 1] = fma2<DT>(qb, sb, bb);
          }
          b[0] = prmt(X[u], X[u + P / 4], 0x5410);  // (x_2u, x_2u+P/2)
          b[1] = prmt(X[u], X[u + P / 4], 0x7632);  // (x_2u+1, x_2u+1+P/2)
          mma16816<DT>(acc, a, b);
        }
      }
    }
  }

  // the W warps' partial sums, added in warp order by warp 0 (under PDL a warp without
  // chunks waits here: out is written only after the kernel before this one finished)
  if (TQ_AFF_PDL) pdl_wait();
  TQ_SHARED float red[W][4][32];
#pragma unroll
  for (int r = 0; r < 4; ++r) red[warp][r][lane] = acc[r];
  sync_block();
  if (warp != 0) return;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    float s = red[0][r][lane];
    for (int w = 1; w < W; ++w) s += red[w][r][lane];
    // acc r: row g (r < 2) or g + 8, column n = 2c + (r & 1)
    const int row = r < 2 ? ra : rb, n = 2 * c + (r & 1);
    if (row >= N || n >= M) continue;
    if (f32_out)
      static_cast<float*>(out)[((int64_t)blockIdx.y * M + n) * N + row] = s;
    else
      static_cast<uint16_t*>(out)[(int64_t)n * N + row] = to_bits<DT>(s);
  }
}

#ifdef __CUDACC__
template <int BITS, int DT>
static int launch_affine(const void* x, const void* words, const void* scales, const void* biases,
                  void* out, int M, int N, int K, int gs, int splits, cudaStream_t stream) {
  const AffLaunch a = aff_launch(BITS, DT, N, K, gs, splits);
  auto kern = a.wide ? affine_mma<BITS, DT, AFF_WARPS, AFF_DEPTH_WIDE, AFF_MINB_WIDE>
                    : affine_mma<BITS, DT, AFF_WARPS, AFF_DEPTH, AFF_MINB>;
  return launch(kern, dim3(a.tiles, a.splits),
                dim3(32 * AFF_WARPS), 0, stream, TQ_AFF_PDL, x, words, scales, biases, out, M, N,
                K, a.gs_log2, a.per_split, a.f32_out, a.mask2);
}

// x [M, K] (dtype 0 bf16, 1 fp16), words [N, K·bits/32], scales and biases [N, K/gs]
// in x's dtype; out [M, N] in x's dtype, or with splits > 1 float32 [splits, M, N]
// partial sums. Needs M ≤ 8, bits 2, 4 or 8, K % aff_chunk(bits) == 0,
// gs a power of two, a multiple of 128 / bits, and 16-byte aligned x and words (the caller checks).
extern "C" int tq_affine_mma(const void* x, const void* words, const void* scales,
                             const void* biases, void* out, int M, int N, int K, int gs,
                             int bits, int dtype, int splits, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (bits == 4 && dtype == 0) return launch_affine<4, 0>(x, words, scales, biases, out, M, N, K, gs, splits, s);
  if (bits == 4 && dtype == 1) return launch_affine<4, 1>(x, words, scales, biases, out, M, N, K, gs, splits, s);
  if (bits == 2 && dtype == 0) return launch_affine<2, 0>(x, words, scales, biases, out, M, N, K, gs, splits, s);
  if (bits == 2 && dtype == 1) return launch_affine<2, 1>(x, words, scales, biases, out, M, N, K, gs, splits, s);
  if (bits == 8 && dtype == 0) return launch_affine<8, 0>(x, words, scales, biases, out, M, N, K, gs, splits, s);
  if (bits == 8 && dtype == 1) return launch_affine<8, 1>(x, words, scales, biases, out, M, N, K, gs, splits, s);
  return -1;
}
#endif
