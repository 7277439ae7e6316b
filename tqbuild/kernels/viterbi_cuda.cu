// Tail-biting Viterbi for QTIP's bitshift trellis, one CUDA block per T-block.
//
// One launch does the rolled pass, its backtrack to the overlap state, the pinned
// pass, its backtrack and writes the states — at L = 16, k ≥ 2 four (`split_backtrack`):
// each pass, then its backtrack in a kernel of its own, a warp a sequence. Every cost is
// formed with the same float32 operations as kernels/viterbi.py (code − x,
// squared, + best predecessor cost; each rounded on its own, no FMA), ties go to
// the smallest predecessor c and the smallest final state, so the states equal
// the torch path's bit for bit.
//
// Layout: J = 2^(L−k) predecessor classes j; the predecessors of the states
// whose top L−k bits are j' are j' + c·J. Each thread computes min_c
// cost_{t−1}[j + c·J] for the classes it owns — its costs never leave
// registers; only the J best costs go through shared memory, once per step.
// Strided ownership (j = tid + i·NT) at L = 12 and L = 16, k = 1; at L = 16,
// k ≥ 2 a thread owns groups of C consecutive classes, whose C·C states share
// their C predecessor costs; the codes of a thread's first groups are computed
// once — some kept in registers (`reg_code_groups`), then as many as fit in shared
// memory — and read back, the rest every step (computed codes cost ~5 instructions,
// a shared-memory one a quarter LDS.128, a register one nothing). At k = 4 two
// neighbour threads share a group, each taking half its rows (`split_rows`); a class's
// min and argmin are a tournament; the new costs' 16-byte stores go in a rotated order
// so that a warp's stores hit distinct banks.
// Backpointers (c, one byte per class and step) go to global memory — or, where
// `keeps_history` (L = 16, k ≥ 2), each step's class minima (at k = 2 every other
// step's: `hist_stride`), copied out by one bulk copy a step, from which the backtrack
// forms its argmin (the forward pass then takes no argmin) — only for the steps a
// backtrack reads (the rolled pass's first half takes no argmin).
// The backtrack runs in rounds of D steps: the block (or the backtrack kernel's warp)
// reads the scratch of every path D steps deep at once, then follows the chosen one (D
// dependent global reads become one).
//
// The kernel also builds for the host under tests/simt (a SIMT emulator), where its
// states are checked against the torch path without a GPU.

#include <cstdint>
#include <type_traits>
#ifdef __CUDACC__
#include <cuda_runtime.h>
#endif

#define INF __int_as_float(0x7f800000)

template <int MODE>
struct Codes;

// MODE 0: the float32 code table (2^L entries) in global memory, read through
// the read-only cache (at L = 12 the compiler keeps each thread's codes in
// registers); MODE 1: 1MAD, MODE 2: MUL1 computed in registers (mad_code).
template <>
struct Codes<0> {
  const float* __restrict__ table;
  __device__ __forceinline__ float operator()(uint32_t s) const { return __ldg(table + s); }
};
template <>
struct Codes<1> {
  __device__ __forceinline__ float operator()(uint32_t s) const;
};

// 1MAD's value from the LCG output x without a table: 2^23 + the byte sum t as
// float bits in one VABSDIFF4 with accumulate, a = t − 510 exactly (minus
// 2^23 + 510), then a / D as fma(a, Rhi, a·Rlo) with Rhi + Rlo ≈ 1/D (Rhi =
// f32(1/D), Rlo = f32(1/D − Rhi)). Checked with exact rational arithmetic for
// all 1021 byte sums (bench/viterbi_cuda-notes.md), so the value equals
// code_bytesum's bit for bit (1MAD and MUL1 differ in the hash).
__device__ __forceinline__ uint32_t bytesum_plus(uint32_t x, uint32_t c) {
#ifdef __CUDACC__
  uint32_t d;
  asm("vabsdiff4.u32.u32.u32.add %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(0u), "r"(c));
  return d;
#else
  return c + (x & 0xFF) + ((x >> 8) & 0xFF) + ((x >> 16) & 0xFF) + (x >> 24);
#endif
}
__device__ __forceinline__ float mad_code(uint32_t x) {
  const float a = __fadd_rn(__uint_as_float(bytesum_plus(x, 0x4B000000u)), -8389118.f);
  const float Rhi = __int_as_float(0x3bddb447u), Rlo = __int_as_float(0xaf7486beu);
  return __fmaf_rn(a, Rhi, __fmul_rn(a, Rlo));
}

// keep the running minimum m (first c on ties) and its c; costs are >= 0 or +inf,
// so their bit patterns order as unsigned integers (one DPX min on Hopper)
__device__ __forceinline__ void take_min(float v, int c, float& m, int& arg) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  bool keep;
  m = __uint_as_float(__vibmin_u32(__float_as_uint(m), __float_as_uint(v), &keep));
  arg = keep ? arg : c;
#else
  if (v < m) { m = v; arg = c; }
#endif
}

// (code − x)², each operation rounded on its own (the torch path's; no contraction):
// a state's cost is this + its predecessor's best, added by __fadd_rn
__device__ __forceinline__ float sq_err(float code, float x) {
  const float d = __fsub_rn(code, x);
  return __fmul_rn(d, d);
}

// one 16-byte global store (left to itself, nvcc split the history's float4 stores
// into four at k = 2: 13.5 instead of 23 M weights/s on the H200)
__device__ __forceinline__ void store16(float* p, float4 f) {
#ifdef __CUDACC__
  asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(f.x), "f"(f.y), "f"(f.z),
               "f"(f.w));
#else
  *reinterpret_cast<float4*>(p) = f;
#endif
}

// one 16-byte shared-memory store (at a lane-dependent chunk, nvcc split it into four)
__device__ __forceinline__ void sts16(float* p, float4 f) {
#ifdef __CUDACC__
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"((uint32_t)__cvta_generic_to_shared(p)),
               "f"(f.x), "f"(f.y), "f"(f.z), "f"(f.w) : "memory");
#else
  *reinterpret_cast<float4*>(p) = f;
#endif
}

// Bulk history (`hist_bulk`): a step's J class minima leave shared memory by one bulk
// (TMA) copy issued by thread 0 — no per-thread global stores. The async proxy reads what
// the threads wrote after each fences its writes (`bulk_fence_smem`) and the step
// barrier; thread 0 waits for the copy's reads (`bulk_wait_read`) before the barrier after
// which the buffer is written again, and for its writes (`bulk_wait_all`) before the
// backtrack. The host emulator reads and writes a copy as late as a GPU may.
__device__ __forceinline__ void bulk_fence_smem() {
#ifdef __CUDACC__
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
__device__ __forceinline__ void bulk_store(float* dst, const float* src, int bytes) {
#ifdef __CUDACC__
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst),
               "r"((uint32_t)__cvta_generic_to_shared(src)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
#else
  simt::bulk_copy(dst, src, bytes);
#endif
}
template <int PENDING>  // the most recent copies that may still be reading
__device__ __forceinline__ void bulk_wait_read() {
#ifdef __CUDACC__
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(PENDING) : "memory");
#else
  simt::bulk_wait_read(PENDING);
#endif
}
// orders the thread's global accesses of the generic proxy with the async proxy's
__device__ __forceinline__ void bulk_fence_global() {
#ifdef __CUDACC__
  asm volatile("fence.proxy.async.global;" ::: "memory");
#endif
}
__device__ __forceinline__ void bulk_wait_all() {
#ifdef __CUDACC__
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#else
  simt::bulk_wait_all();
#endif
  bulk_fence_global();
}

// the smallest of n costs (>= 0 or +inf: ordered as unsigned integers), two more a
// DPX three-way min on Hopper
template <int N>
__device__ __forceinline__ float min_of(const float* v) {
  uint32_t m = __float_as_uint(v[0]);
  int i = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  for (; i + 1 < N; i += 2) m = __vimin3_u32(m, __float_as_uint(v[i]), __float_as_uint(v[i + 1]));
#endif
  for (; i < N; ++i) m = m < __float_as_uint(v[i]) ? m : __float_as_uint(v[i]);
  return __uint_as_float(m);
}

// TQ_VIT_TREE: a class's min (and argmin) as a tournament — log2 C dependent steps, not
// C − 1 — with the same operations; the left (lower c) side wins ties at every level,
// so the result is the first minimum, as the linear scan's
#ifndef TQ_VIT_TREE  // 0 off
#define TQ_VIT_TREE 1
#endif
template <int N>
__device__ __forceinline__ float min_arg_tree(const float* v, int& arg) {
  float m[N];
  int a[N];
#pragma unroll
  for (int i = 0; i < N; ++i) { m[i] = v[i]; a[i] = i; }
#pragma unroll
  for (int w = 1; w < N; w <<= 1)
#pragma unroll
    for (int i = 0; i + w < N; i += 2 * w) take_min(m[i + w], a[i + w], m[i], a[i]);
  arg = a[0];
  return m[0];
}
template <int N>
__device__ __forceinline__ float min_tree(const float* v) {
  if constexpr (N <= 3) {
    return min_of<N>(v);
  } else {
    constexpr int H = (N + 2) / 3;  // triples, then the minimum of their minima
    float m[H];
#pragma unroll
    for (int i = 0; i < H; ++i) {
      const float* t = v + 3 * i;
      m[i] = 3 * i + 3 <= N ? min_of<3>(t) : 3 * i + 2 == N ? min_of<2>(t) : t[0];
    }
    return min_tree<H>(m);
  }
}

__device__ __forceinline__ float Codes<1>::operator()(uint32_t s) const {
  return mad_code(s * 34038481u + 76625530u);
}
template <>
struct Codes<2> {
  __device__ __forceinline__ float operator()(uint32_t s) const { return mad_code(s * 0x83DCD12Du); }
};

// two best-cost buffers when they fit (one barrier a step), else one buffer and
// the new costs staged in registers (two barriers a step)
__host__ __device__ constexpr bool double_buffered(int L, int K) {
  return 2 * (1 << (L - K)) * 4 <= 160 * 1024;
}

constexpr int MAX_T = 1024;            // longest block the shared-memory plan reserves for
constexpr int SMEM_BYTES = 227 * 1024;  // an H100/H200 block's shared-memory limit

// L = 16, k ≥ 2: a thread owns groups of C classes (see the header)
__host__ __device__ constexpr bool grouped(int L, int K) { return L == 16 && K >= 2; }

// TQ_VIT_REG: at L = 16, k = 2 and 3, 512 threads a block, each keeping the C·C codes
// of some of its groups in registers (k = 2: 4 groups, 64 of 128 registers; k = 3: 1
// group, 64). TQ_VIT_HIST: the grouped layout keeps each step's class minima instead
// of backpointers (below): 1 stored by each thread, 2 by one bulk copy a step
// (`bulk_store`). Each 1 (or 2) on for every k, 0 off; by default (−1) what measured
// fastest (L = 16 mul1, 65536 sequences): registers at k = 2, 3 (H200,
// bench/results/viterbi_cuda-cuda-s10rv*.json), the minima by bulk copies at every k (H100,
// -s12v*.json, -s13v*.json: with the backtrack kernel, k = 4 30.9; k = 3 27.7 → 33.6 with
// three buffers; k = 2 25.0 → 28.5 keeping every other step's, `hist_stride`).
#ifndef TQ_VIT_REG
#define TQ_VIT_REG -1
#endif
#ifndef TQ_VIT_HIST
#define TQ_VIT_HIST -1
#endif
__host__ __device__ constexpr bool regs_on(int K) { return TQ_VIT_REG < 0 ? K <= 3 : TQ_VIT_REG > 0; }
__host__ __device__ constexpr bool hist_on(int K) { return TQ_VIT_HIST != 0; }
// how the minima leave: by one bulk copy a step (else each thread stores its own)
__host__ __device__ constexpr bool hist_bulk(int K) { return TQ_VIT_HIST < 0 || TQ_VIT_HIST == 2; }

// TQ_VIT_SPLIT: at k = 4, two neighbour threads share a group, each its C/2 rows bb ≡ h
// (mod 2): 512 threads a block, 16 warps an SM instead of 8 (H100, L = 16 mul1: 21.9 ->
// 24.1 M weights/s with TQ_VIT_SWZ; bench/results/viterbi_cuda-cuda-s11bv*.json). 0 off.
#ifndef TQ_VIT_SPLIT
#define TQ_VIT_SPLIT 1
#endif
// TQ_VIT_SWZ: the best costs' 16-byte shared-memory stores in a rotated order (k = 3, 4:
// a group's NCH > 1 stores a thread, otherwise 2- to 8-way bank conflicts). 0 off.
#ifndef TQ_VIT_SWZ
#define TQ_VIT_SWZ 1
#endif

// threads a block (one block a sequence): every state's work in one block
__host__ __device__ constexpr int block_threads(int L, int K) {
  return L == 12 ? 256 : K == 1 || (K == 2 && !regs_on(2)) ? 1024 : K <= 3 || TQ_VIT_SPLIT ? 512 : 256;
}

// grouped layout: threads sharing a group (each its C/S rows bb ≡ h mod S)
__host__ __device__ constexpr int split_rows(int L, int K) {
  return grouped(L, K) && K == 4 && TQ_VIT_SPLIT ? 2 : 1;
}

// grouped layout: the rows (classes) of a group one thread takes, and the groups it takes
__host__ __device__ constexpr int thread_rows(int L, int K) { return (1 << K) / split_rows(L, K); }
__host__ __device__ constexpr int thread_groups(int L, int K, int NT) {
  return (1 << (L - K)) / (1 << K) * split_rows(L, K) / NT;
}

// grouped layout: how many of a thread's groups keep their codes in registers
__host__ __device__ constexpr int reg_code_groups(int L, int K) {
  return !grouped(L, K) || !regs_on(K) ? 0 : K == 2 ? 4 : K == 3 ? 1 : 0;
}

// TQ_VIT_HIST: the grouped layout keeps no backpointers; each step's J class minima
// go to global memory instead, and the backtrack forms the one argmin a step it needs
// from them (the same float32 operations and tie rule), so the forward pass takes a
// class's minimum without its argument (4× the global writes)
__host__ __device__ constexpr bool keeps_history(int L, int K) {
  return grouped(L, K) && hist_on(K);
}

// TQ_VIT_BT: at L = 16, k ≥ 2 each pass's backtrack runs in a kernel of its own, a warp
// a sequence (`viterbi_backtrack_kernel`): the forward kernel's block — one an SM — no
// longer idles through the backtrack's rounds of dependent global reads, and many
// sequences' reads overlap. 0: the fused kernel's in-block backtrack.
#ifndef TQ_VIT_BT
#define TQ_VIT_BT 1
#endif
__host__ __device__ constexpr bool split_backtrack(int L, int K) { return grouped(L, K) && TQ_VIT_BT; }
// TQ_VIT_HSTEP: where the minima leave by bulk copies (and the backtrack has its own
// kernel), only every HS-th step's row is kept (HS = 1 … 4, at most 2 at k ≥ 3): the
// backtrack forms the C minima of a missing row it needs again from the last kept row (C
// lanes a path, C^m costs each m rows back) — 1/HS of the global writes. 1: every row.
// (4 at k = 2 measured slower: H100 bare 17.9 vs 28.2 M weights/s, -s14v1 vs -s14v0.)
#ifndef TQ_VIT_HSTEP  // −1: 2 at k = 2, else 1
#define TQ_VIT_HSTEP -1
#endif
__host__ __device__ constexpr int hist_stride(int L, int K) {
  return !(keeps_history(L, K) && hist_bulk(K) && split_backtrack(L, K)) ? 1
         : TQ_VIT_HSTEP < 0 ? (K == 2 ? 2 : 1) : K >= 3 && TQ_VIT_HSTEP > 2 ? 2 : TQ_VIT_HSTEP;
}
static_assert(TQ_VIT_HSTEP <= 4, "history stride");

// global scratch a sequence: T steps of J backpointer bytes, or ⌈T / HS⌉ rows of J float32
// minima (row r of step r at r / HS)
__host__ __device__ constexpr int64_t scratch_bytes(int L, int K, int T) {
  return keeps_history(L, K) ? (int64_t)((T + hist_stride(L, K) - 1) / hist_stride(L, K)) * (1 << (L - K)) * 4
                             : (int64_t)T * (1 << (L - K));
}
// global scratch a launch asks for a sequence: the steps' and, with the backtrack kernel,
// two int32 links (the pass's final state, pass 0's overlap class) after all B sequences'
__host__ __device__ constexpr int64_t launch_scratch_bytes(int L, int K, int T) {
  return scratch_bytes(L, K, T) + (split_backtrack(L, K) ? 8 : 0);
}

// TQ_VIT_BUF3: where the minima leave by bulk copies, three best-cost buffers, so that a
// step's copy may read its row while the next two steps run (0 off, 1 on; −1: at k = 3)
#ifndef TQ_VIT_BUF3
#define TQ_VIT_BUF3 -1
#endif
// best-cost buffers in shared memory
__host__ __device__ constexpr int cost_buffers(int L, int K) {
  return !double_buffered(L, K) ? 1 : (TQ_VIT_BUF3 < 0 ? K == 3 : TQ_VIT_BUF3 > 0) && keeps_history(L, K) && hist_bulk(K) ? 3 : 2;
}

// shared memory besides the cached codes: best costs, x and states of xst steps, the
// reduction's (cost, state) pairs
__host__ __device__ constexpr int smem_fixed(int L, int K, int NT, int xst) {
  return 4 * cost_buffers(L, K) * (1 << (L - K)) + 8 * xst + 8 * (NT / 32);
}

// grouped layout: how many of a thread's other groups keep their C·C codes in shared
// memory (read as float4, conflict-free) instead of computing them every step —
// as many as fit beside the best costs, x and the states of a T ≤ MAX_T block
__host__ __device__ constexpr int smem_code_groups(int L, int K, int NT) {
  if (!grouped(L, K)) return 0;
  const int G = thread_groups(L, K, NT) - reg_code_groups(L, K);
  const int base = smem_fixed(L, K, NT, MAX_T);
  const int per = 4 * (1 << K) * thread_rows(L, K) * NT;  // a thread's rows of a group
  int g = 0;
  while (g < G && base + (g + 1) * per <= SMEM_BYTES) ++g;
  return g;
}

// grouped layout: of the first group left to compute, how many rows bb (the C codes of
// one class) are kept in shared memory too, in what space the whole groups leave
#ifndef TQ_VIT_ROWS  // the most rows cached; 0: none (k = 2 23.2 -> 21.7, k = 4 22.1 -> 16.8 M weights/s)
#define TQ_VIT_ROWS 64
#endif
__host__ __device__ constexpr int smem_code_rows(int L, int K, int NT) {
  if (!grouped(L, K) || !TQ_VIT_ROWS) return 0;
  const int C = 1 << K, RW = thread_rows(L, K);
  const int g = smem_code_groups(L, K, NT);
  if (thread_groups(L, K, NT) - reg_code_groups(L, K) == g) return 0;  // none left to compute
  const int used = smem_fixed(L, K, NT, MAX_T) + g * 4 * C * RW * NT;
  const int rows = (SMEM_BYTES - used) / (4 * C * NT);
  const int cap = RW - 1 < TQ_VIT_ROWS ? RW - 1 : TQ_VIT_ROWS;
  return rows < cap ? rows : cap;
}

// shared memory the kernel asks for: the above and the cached codes (x and states
// reserved for MAX_T steps where codes are cached)
__host__ __device__ constexpr int64_t smem_bytes(int L, int K, int NT, int T) {
  const int cached = smem_code_groups(L, K, NT) * thread_rows(L, K) + smem_code_rows(L, K, NT);
  return smem_fixed(L, K, NT, cached > 0 ? MAX_T : T) + (int64_t)cached * 4 * (1 << K) * NT;
}

// backtrack rounds: the most steps D whose (C^D − 1)/(C − 1) path candidates (C^e at
// depth e < D) the block's threads can take at once
__host__ __device__ constexpr int lookahead_steps(int K, int NT) {
  int d = 1, n = 1, tot = 1;
  while (tot + n * (1 << K) <= NT) { n <<= K; tot += n; ++d; }
  return d;
}

// where class j's best cost (and backpointer) is stored: a group's rows h + S·r at
// j0·C + h·RW + r, so a thread's RW rows are consecutive
template <int L, int K>
__device__ __forceinline__ int class_pos(int j) {
  constexpr int C = 1 << K, S = split_rows(L, K), RW = thread_rows(L, K);
  if constexpr (S == 1) return j;
  else return (j & ~(C - 1)) + (j % S) * RW + (j & (C - 1)) / S;
}

// the best cost of class j's C states j + c·J at x = xv over the costs `prev` of step
// t − 1 (at class_pos), and its c (the first on ties)
template <int L, int K, int MODE>
__device__ __forceinline__ float class_best(const Codes<MODE>& code, int j, float xv,
                                            const float* prev, int& arg) {
  constexpr int C = 1 << K, J = 1 << (L - K);
  float mv = 0.f;
  arg = 0;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const uint32_t s = j + c * J;
    const float v = __fadd_rn(sq_err(code(s), xv), prev[class_pos<L, K>(s >> K)]);
    if (c == 0 || v < mv) { mv = v; arg = c; }
  }
  return mv;
}

// where a history's row r (a kept one: step r's class minima) starts, in floats
template <int L, int K>
__host__ __device__ constexpr int64_t hist_offset(int r) {
  return (int64_t)(r / hist_stride(L, K)) * (1 << (L - K));
}
template <int L, int K>
__device__ __forceinline__ const float* hist_row(const uint8_t* scratch, int r) {
  return reinterpret_cast<const float*>(scratch) + hist_offset<L, K>(r);
}

// the argmin c of step t (x = xv) for class j from a sequence's scratch: its best
// predecessor is j + c·J
template <int L, int K, int MODE>
__device__ __forceinline__ int step_arg(const Codes<MODE>& code, const uint8_t* scratch, int t,
                                        int j, float xv) {
  constexpr int J = 1 << (L - K);
  if constexpr (keeps_history(L, K)) {  // formed again from step t − 1's minima
    int arg;
    class_best<L, K, MODE>(code, j, xv, hist_row<L, K>(scratch, t - 1), arg);
    return arg;
  } else {
    return (int)scratch[(int64_t)t * J + class_pos<L, K>(j)];
  }
}

// with a strided history, the minimum of class q at step t (x of step u: x_at(u)), where
// row t − m is the last kept row at or before t (m < M: formed again from it, C^m costs)
template <int M, int L, int K, int MODE, typename XAt>
__device__ __forceinline__ float row_min(const Codes<MODE>& code, const uint8_t* scratch, int t,
                                         int q, int m, const XAt& x_at) {
  constexpr int C = 1 << K, J = 1 << (L - K);
  if constexpr (M > 1) {
    if (m > 0) {
      float mv = 0.f;
      const float xv = x_at(t);
#pragma unroll  // (the C^m reads independent: all in flight at once)
      for (int c = 0; c < C; ++c) {
        const uint32_t s = q + c * J;
        const float v = __fadd_rn(sq_err(code(s), xv), row_min<M - 1, L, K>(code, scratch, t - 1, s >> K, m - 1, x_at));
        if (c == 0 || v < mv) mv = v;
      }
      return mv;
    }
  }
  return hist_row<L, K>(scratch, t)[class_pos<L, K>(q)];
}

// ... and the cost of state s at step t where row t − 1 was not kept (the last kept row
// m + 1 steps back)
template <int L, int K, int MODE, typename XAt>
__device__ __forceinline__ float state_cost(const Codes<MODE>& code, const uint8_t* scratch, int t,
                                            uint32_t s, int m, const XAt& x_at) {
  return __fadd_rn(sq_err(code(s), x_at(t)),
                   row_min<hist_stride(L, K), L, K>(code, scratch, t - 1, s >> K, m, x_at));
}

// PASS: −1 both passes and their backtracks (one launch); 0 or 1 that forward pass alone,
// its final state to links[2b] (pass 1's pinned class from links[2b + 1])
template <int L, int K, int NT, int MODE, int PASS>
__global__ void __launch_bounds__(NT)
viterbi_tailbiting_kernel(const float* __restrict__ x, const float* __restrict__ table, int T,
                          uint8_t* __restrict__ bp_all, int64_t* __restrict__ states_out,
                          int32_t* __restrict__ links) {
  constexpr int C = 1 << K;
  constexpr int J = 1 << (L - K);
  constexpr int G = J / NT;  // classes per thread
  static_assert(J % NT == 0, "NT must divide J");
  constexpr bool DOUBLE = double_buffered(L, K);
  constexpr int NG = J / C;  // groups of C classes
  constexpr bool GROUPED = grouped(L, K);
  // S threads share a group (S > 1: thread h of them owns its RW rows bb = h + S·r)
  constexpr int S = split_rows(L, K), RW = thread_rows(L, K), NTS = NT / S;
  static_assert(!GROUPED || (DOUBLE && NG % NTS == 0), "grouped layout");
  constexpr bool SWZ = TQ_VIT_SWZ && GROUPED;
  extern __shared__ float smem[];
  constexpr int NBUF = cost_buffers(L, K);
  float* best = smem;                        // [NBUF][J]
  float* xs = best + NBUF * J;               // [T]
  int* st = reinterpret_cast<int*>(xs + T);  // [T] states
  float* red_v = reinterpret_cast<float*>(st + T);  // [NT/32]
  int* red_s = reinterpret_cast<int*>(red_v + NT / 32);  // [NT/32]
  // a thread's groups gi: GREG with codes in registers, then GSM in shared memory (float4
  // q of group gi at [((gi − GREG)·C·RW/4 + q)·NT + tid]), then the rest computed
  constexpr int GREG = reg_code_groups(L, K);
  constexpr int GSM = smem_code_groups(L, K, NT);
  constexpr int ROWS = smem_code_rows(L, K, NT);  // and ROWS rows of group GREG + GSM
  constexpr int D = lookahead_steps(K, NT);
  constexpr int NB = ((1 << (K * D)) - 1) / (C - 1);  // threads a backtrack round
  static_assert(NB <= NT && NB <= J, "backtrack round");
  float4* csm = reinterpret_cast<float4*>(best + NBUF * J + 2 * MAX_T + NT / 16);

  const int tid = threadIdx.x;
  // h: which row set of its group (neighbour lanes share a group), lt: the thread's index
  // among those of its row set
  const int h = S == 1 ? 0 : tid % S, lt = S == 1 ? tid : tid / S;
  const int64_t b = blockIdx.x;
  const float* xrow = x + b * T;
  constexpr bool HIST = keeps_history(L, K);
  constexpr bool BULK = HIST && hist_bulk(K);
  constexpr int HS = hist_stride(L, K);
  uint8_t* bp = bp_all + b * scratch_bytes(L, K, T);
  float* hist = reinterpret_cast<float*>(bp);  // HIST: step r's minima at row r / HS
  for (int i = tid; i < T; i += NT) xs[i] = xrow[i];
  auto pos = [](int j) { return class_pos<L, K>(j); };
  Codes<MODE> code;
  if constexpr (MODE == 0) code.table = table;
  // the first state (class j0·C + h + S·r) of this thread's row r of group j0; the row's
  // C states are it + c·J
  auto row_state = [&](int j0, int r) { return (uint32_t)(j0 * C + h + S * r); };
  float creg[GREG > 0 ? GREG : 1][C * RW];  // [gi][r·C + c]
#pragma unroll
  for (int gi = 0; gi < GREG; ++gi)
#pragma unroll
    for (int i = 0; i < C * RW; ++i)
      creg[gi][i] = code(row_state(lt + gi * NTS, i / C) + (i % C) * J);
#pragma unroll 1
  for (int gi = 0; gi < GSM + (ROWS > 0); ++gi)
#pragma unroll 1
    for (int q = 0; q < (gi < GSM ? C * RW / 4 : ROWS * C / 4); ++q) {
      const uint32_t j = row_state(lt + (GREG + gi) * NTS, q * 4 / C), c0 = (q * 4) % C;
      csm[(gi * (C * RW / 4) + q) * NT + tid] =
          make_float4(code(j + c0 * J), code(j + (c0 + 1) * J), code(j + (c0 + 2) * J),
                      code(j + (c0 + 3) * J));
    }
  __syncthreads();

  int overlap = PASS == 1 ? links[2 * b + 1] : -1;
  for (int pass = PASS < 0 ? 0 : PASS; pass < (PASS < 0 ? 2 : PASS + 1); ++pass) {
    const int shift = pass == 0 ? T / 2 : 0;  // pass 0 runs on x rolled right by T/2
    // scratch rows the backtrack reads: pass 0 stops at T/2, so its first half is not kept
    const int keep_from = pass == 0 ? T / 2 : 0;
    // the history rows kept: every HS-th from keep_from
    auto kept = [&](int r) { return r >= keep_from && (HS == 1 || (r - keep_from) % HS == 0); };
    float* cur = best;
    float* nxt = DOUBLE ? best + J : best;
    float* spare = best + 2 * J;  // NBUF = 3: the buffer whose copy may still be reading
    // x of step t (1 … T; T: the final costs), on the rolled x in pass 0
    auto x_at = [&](int t) {
      int i = t - 1 - shift;
      i += i < 0 ? T : 0;
      return xs[i];
    };
    // the argmin c of step t for class j: its best predecessor is j + c·J
    auto arg_at = [&](int t, int j) { return step_arg<L, K, MODE>(code, bp, t, j, x_at(t)); };
    // pass 1's copies rewrite the rows pass 0's backtrack read (after the barriers since)
    if constexpr (BULK) if (tid == 0 && pass == 1) bulk_fence_global();
    // best_0: 0 (cost0 = d + 0 exactly) or +inf outside the pinned class
    for (int j = tid; j < J; j += NT) {
      cur[pos(j)] = (overlap < 0 || j == overlap) ? 0.f : INF;
      if constexpr (HIST) if (keep_from == 0) hist[pos(j)] = cur[pos(j)];
    }
    __syncthreads();
    float m[DOUBLE ? 1 : G];  // a step's new costs staged in registers (single buffer)
    (void)m;
    // one step; KEEP: its argmins (or minima) go to the scratch
    auto step = [&](int t, auto keep) {
      constexpr bool KEEP = decltype(keep)::value;
      const float xv = x_at(t);
      if constexpr (GROUPED) {
        // thread owns groups j0 of C classes j = j0·C + bb (its rows bb = h + S·r); all
        // C·C states s = j + c·J of a group share the C predecessor costs of classes
        // j0 + c·J/C; codes_of(r, cv) gives the C codes of row r's states
        auto group = [&](const int j0, auto&& codes_of) {
          float pb[C];
          const int p0 = pos(j0);  // pos(j0 + c·NG) = p0 + c·NG (NG is a multiple of C)
#pragma unroll
          for (int c = 0; c < C; ++c) pb[c] = cur[p0 + c * NG];
          uint32_t packed[(RW + 3) / 4];
          float mvs[RW];
#pragma unroll
          for (int w = 0; w < (RW + 3) / 4; ++w) packed[w] = 0;
#pragma unroll
          for (int r = 0; r < RW; ++r) {
            float cv[C];
            codes_of(r, cv);
            float v[C];
#pragma unroll
            for (int c = 0; c < C; ++c) v[c] = __fadd_rn(sq_err(cv[c], xv), pb[c]);
            if constexpr ((HIST || !KEEP) && TQ_VIT_TREE) {
              mvs[r] = min_tree<C>(v);
            } else if constexpr (HIST || !KEEP) {
              mvs[r] = min_of<C>(v);
            } else if constexpr (TQ_VIT_TREE) {
              int arg;
              mvs[r] = min_arg_tree<C>(v, arg);
              packed[r / 4] |= (uint32_t)arg << (8 * (r % 4));
            } else {
              float mv = v[0];
              int arg = 0;
#pragma unroll
              for (int c = 1; c < C; ++c) take_min(v[c], c, mv, arg);
              mvs[r] = mv;
              packed[r / 4] |= (uint32_t)arg << (8 * (r % 4));
            }
          }
          // RW consecutive costs: 16-byte stores, NCH of them (under TQ_VIT_SWZ the c-th
          // store writes chunk (c + rot) mod NCH: the warp's 16-byte stores, NCH·16 bytes
          // apart, then fall on 8 distinct bank quads of every 8 lanes — conflict-free)
          constexpr int NCH = RW / 4;
          float4 ch[NCH];
#pragma unroll
          for (int q = 0; q < NCH; ++q) {
            ch[q] = make_float4(mvs[4 * q], mvs[4 * q + 1], mvs[4 * q + 2], mvs[4 * q + 3]);
            if constexpr (HIST && KEEP && !BULK) store16(hist + (int64_t)t * J + j0 * C + h * RW + 4 * q, ch[q]);
          }
          constexpr bool ROT = SWZ && NCH > 1;
          // a thread's chunks start NCH·tid chunks into the warp's (lanes own consecutive
          // RW-runs), so the lane alone sets the rotation
          const int rot = ROT ? (tid / (8 / NCH)) % NCH : 0;
#pragma unroll
          for (int bit = 1; bit < NCH; bit <<= 1)  // rotate the chunks by rot
            if (rot & bit) {
              float4 r[NCH];
#pragma unroll
              for (int q = 0; q < NCH; ++q) r[q] = ch[(q + bit) % NCH];
#pragma unroll
              for (int q = 0; q < NCH; ++q) ch[q] = r[q];
            }
#pragma unroll
          for (int q = 0; q < NCH; ++q) {
            float* dst = nxt + j0 * C + h * RW + 4 * ((q + rot) % NCH);
            if constexpr (ROT) sts16(dst, ch[q]);
            else *reinterpret_cast<float4*>(dst) = ch[q];
          }
          if constexpr (HIST || !KEEP) return;
          uint8_t* dst = bp + (int64_t)t * J + j0 * C + h * RW;
          static_assert(RW == 4 || RW == 8 || RW == 16, "grouped layout: k = 2, 3, 4");
          if constexpr (RW == 4) *reinterpret_cast<uint32_t*>(dst) = packed[0];
          else if constexpr (RW == 8) *reinterpret_cast<uint2*>(dst) = make_uint2(packed[0], packed[1]);
          else *reinterpret_cast<uint4*>(dst) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        };
#pragma unroll
        for (int gi = 0; gi < GREG; ++gi)
          group(lt + gi * NTS, [&](int r, float* cv) {
#pragma unroll
            for (int c = 0; c < C; ++c) cv[c] = creg[gi][r * C + c];
          });
        // the C codes of row r of group gi, kept in shared memory
        auto smem_row = [&](int gi, int r, float* cv) {
#pragma unroll
          for (int q = 0; q < C / 4; ++q) {
            const float4 f = csm[((gi - GREG) * (C * RW / 4) + r * (C / 4) + q) * NT + tid];
            cv[4 * q] = f.x; cv[4 * q + 1] = f.y; cv[4 * q + 2] = f.z; cv[4 * q + 3] = f.w;
          }
        };
        auto computed_row = [&](int j0, int r, float* cv) {
#pragma unroll
          for (int c = 0; c < C; ++c) cv[c] = code(row_state(j0, r) + c * J);
        };
#pragma unroll 1
        for (int gi = GREG; gi < GREG + GSM; ++gi)
          group(lt + gi * NTS, [&](int r, float* cv) { smem_row(gi, r, cv); });
        constexpr int G0 = GREG + GSM;  // the first group computed, its first ROWS rows cached
        if constexpr (ROWS > 0)
          group(lt + G0 * NTS, [&](int r, float* cv) {
            if (r < ROWS) smem_row(G0, r, cv);
            else computed_row(lt + G0 * NTS, r, cv);
          });
#pragma unroll 1
        for (int gi = G0 + (ROWS > 0); gi < thread_groups(L, K, NT); ++gi)
          group(lt + gi * NTS, [&](int r, float* cv) { computed_row(lt + gi * NTS, r, cv); });
      } else {
#pragma unroll
        for (int i = 0; i < G; ++i) {
          const int j = tid + i * NT;
          int arg;
          const float mv = class_best<L, K, MODE>(code, j, xv, cur, arg);
          if constexpr (DOUBLE) nxt[j] = mv;
          else m[i] = mv;
          if constexpr (KEEP) bp[(int64_t)t * J + j] = (uint8_t)arg;
        }
      }
      // BULK: nxt to hist row t (where kept), once the block has written it
      [[maybe_unused]] const bool copy = HS == 1 || kept(t);
      if constexpr (BULK && KEEP) {
        if (copy) bulk_fence_smem();
        // the copy that read the buffer step t + 1 writes is done: step t − 1's (cur),
        // with three buffers step t − 2's (spare; step t − 1's, if kept, may go on)
        if (tid == 0) {
          if (NBUF == 3 && kept(t - 1)) bulk_wait_read<1>();
          else bulk_wait_read<0>();
        }
      }
      __syncthreads();
      if constexpr (BULK && KEEP) if (tid == 0 && copy) bulk_store(hist + hist_offset<L, K>(t), nxt, 4 * J);
      if constexpr (NBUF == 3) {
        float* tmp = cur; cur = nxt; nxt = spare; spare = tmp;
      } else if constexpr (DOUBLE) {
        float* tmp = cur; cur = nxt; nxt = tmp;
      } else {
#pragma unroll
        for (int i = 0; i < G; ++i) cur[tid + i * NT] = m[i];
        __syncthreads();
      }
    };
    for (int t = 1; t < keep_from; ++t) step(t, std::false_type{});
    for (int t = keep_from > 1 ? keep_from : 1; t < T; ++t) step(t, std::true_type{});
    if constexpr (BULK) if (tid == 0) bulk_wait_all();  // (the barriers below order it)
    float* bestf = cur;
    // final costs at t = T−1; the smallest (cost, state), pinned states only
    {
      const float xv = x_at(T);
      float bv = INF;
      int bs = 0x7fffffff;
      for (int s = tid; s < (1 << L); s += NT) {
        if (overlap >= 0 && (s & (J - 1)) != overlap) continue;
        const float v = __fadd_rn(sq_err(code((uint32_t)s), xv), bestf[pos(s >> K)]);
        if (v < bv || (v == bv && s < bs)) { bv = v; bs = s; }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_down_sync(0xffffffffu, bv, o);
        const int os = __shfl_down_sync(0xffffffffu, bs, o);
        if (ov < bv || (ov == bv && os < bs)) { bv = ov; bs = os; }
      }
      if ((tid & 31) == 0) { red_v[tid >> 5] = bv; red_s[tid >> 5] = bs; }
      __syncthreads();
      if (tid == 0) {
        for (int w = 1; w < NT / 32; ++w)
          if (red_v[w] < bv || (red_v[w] == bv && red_s[w] < bs)) { bv = red_v[w]; bs = red_s[w]; }
        st[T - 1] = bs;
        if constexpr (PASS >= 0) links[2 * b] = bs;
      }
      if constexpr (PASS >= 0) return;  // the backtrack kernel takes it from here
      __syncthreads();
      // backtrack (the rolled pass only as far as the state aligned with x[0]) in rounds
      // of up to D steps: thread p < NB takes depth e < D and path i (the e argmins
      // before it, base C), and forms the argmin at step t0 − e of the class that path
      // reaches — all a round's scratch reads in flight at once; thread 0 then follows
      // the chosen path
      int* amin = reinterpret_cast<int*>(best);  // [NB]; the costs are not needed now
      const int stop = pass == 0 ? T / 2 : 0;
      for (int t0 = T - 1; t0 > stop; t0 -= D) {
        const int d = t0 - stop < D ? t0 - stop : D;
        if (tid < NB) {
          int e = 0, base = 0, n = 1;
          while (tid >= base + n) { base += n; n *= C; ++e; }
          if (e < d) {
            int s = st[t0];
            for (int q = n / C, i = tid - base; q > 0; i %= q, q /= C) s = (s >> K) + (i / q) * J;
            amin[tid] = arg_at(t0 - e, s >> K);
          }
        }
        __syncthreads();
        if (tid == 0) {
          int s = st[t0];
          for (int e = 0, base = 0, i = 0; e < d; base = base * C + 1, ++e) {
            const int a = amin[base + i];
            s = (s >> K) + a * J;
            st[t0 - e - 1] = s;
            i = i * C + a;
          }
        }
        __syncthreads();
      }
      if (pass == 0) overlap = st[T / 2] >> K;
      __syncthreads();
    }
  }
  int64_t* orow = states_out + b * T;
  for (int i = tid; i < T; i += NT) orow[i] = st[i];
}

// One pass's backtrack (`split_backtrack`), a warp a sequence, in rounds of d steps as
// the fused kernel's: a lane takes depth e < d and one of the C^e paths the argmins before
// it may take and forms that path's argmin at step t0 − e — or, where row t0 − e − 1 of a
// strided history was not kept, C lanes a path each one candidate's cost — so a round's
// scratch reads are all in flight at once; every lane then follows the chosen path (the
// argmins, or the costs, by shuffle). d: as many steps as 32 lanes take. From the pass's
// final state links[2b]; pass 0 (rolled x) stops at T/2 and leaves its class in
// links[2b + 1], pass 1 writes the states.
// TQ_VIT_BTW: sequences (warps) a backtrack block. 32 (the backtracks on few SMs, the rest
// left to another stream's forward blocks) measured slower than 4 on one stream and on two
// (H100, k = 2 −5 %, k = 3 on two streams −11 %: bench/results/viterbi_cuda-cuda-s16w*.json).
#ifndef TQ_VIT_BTW
#define TQ_VIT_BTW 4
#endif
constexpr int BT_WARPS = TQ_VIT_BTW;
static_assert(BT_WARPS >= 1 && BT_WARPS <= 32, "backtrack block");
template <int L, int K, int MODE>
__global__ void __launch_bounds__(32 * BT_WARPS)
viterbi_backtrack_kernel(const float* __restrict__ x, const float* __restrict__ table, int T,
                         int B, int pass, const uint8_t* __restrict__ bp_all,
                         int32_t* __restrict__ links, int64_t* __restrict__ states_out) {
  constexpr int C = 1 << K, J = 1 << (L - K), HS = hist_stride(L, K);
  const int lane = threadIdx.x & 31;
  const int64_t b = (int64_t)blockIdx.x * BT_WARPS + threadIdx.x / 32;
  if (b >= B) return;  // (the whole warp)
  const float* xrow = x + b * T;
  const int shift = pass == 0 ? T / 2 : 0;
  auto x_at = [&](int t) {
    int i = t - 1 - shift;
    i += i < 0 ? T : 0;
    return __ldg(xrow + i);
  };
  const uint8_t* bp = bp_all + b * scratch_bytes(L, K, T);
  Codes<MODE> code;
  if constexpr (MODE == 0) code.table = table;
  const int stop = pass == 0 ? T / 2 : 0;  // = the pass's first kept row
  // lanes a path at step t: 1, or C where row t − 1 was not kept (then row t − 2 was)
  auto width = [&](int t) { return HS == 1 || (t - 1 - stop) % HS == 0 ? 1 : C; };
  int s = links[2 * b];
  int64_t* orow = states_out + b * T;
  if (pass == 1 && lane == 0) orow[T - 1] = s;
  for (int t0 = T - 1; t0 > stop;) {
    int d = 0;
    for (int lanes = 0, n = 1; d < t0 - stop && lanes + n * width(t0 - d) <= 32; n *= C, ++d)
      lanes += n * width(t0 - d);
    int a = 0;  // this lane's argmin, or (as bits) its candidate's cost
    {
      int e = 0, base = 0, n = 1;
      while (e < d && lane >= base + n * width(t0 - e)) { base += n * width(t0 - e); n *= C; ++e; }
      if (e < d) {
        const int t = t0 - e, w = width(t), i = (lane - base) / w;
        int sp = s;
        for (int q = n / C, r = i; q > 0; r %= q, q /= C) sp = (sp >> K) + (r / q) * J;
        if (w == 1) a = step_arg<L, K, MODE>(code, bp, t, sp >> K, x_at(t));
        else a = __float_as_int(state_cost<L, K>(code, bp, t, (uint32_t)((sp >> K) + (lane - base) % w * J),
                                                 (t - 1 - stop) % HS, x_at));
      }
    }
    for (int e = 0, base = 0, n = 1, i = 0; e < d; ++e) {
      const int w = width(t0 - e);
      int ae = 0;
      if (w == 1) {
        ae = __shfl_sync(0xffffffffu, a, base + i);
      } else {  // the first of the C candidates' smallest cost
        float mv = 0.f;
        for (int c = 0; c < C; ++c) {
          const float v = __int_as_float(__shfl_sync(0xffffffffu, a, base + i * C + c));
          if (c == 0 || v < mv) { mv = v; ae = c; }
        }
      }
      s = (s >> K) + ae * J;
      if (pass == 1 && lane == 0) orow[t0 - e - 1] = s;
      base += n * w;
      n *= C;
      i = i * C + ae;
    }
    t0 -= d;
  }
  if (pass == 0 && lane == 0) links[2 * b + 1] = s >> K;
}

#ifdef __CUDACC__
// the pass kernel (PASS) allowed the dynamic shared memory a block of T steps asks for
template <int L, int K, int NT, int MODE, int PASS>
static cudaError_t allow_smem(int T, size_t& smem) {
  smem = (size_t)smem_bytes(L, K, NT, T);
  return cudaFuncSetAttribute(viterbi_tailbiting_kernel<L, K, NT, MODE, PASS>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

// one pass (PASS 0, 1) and its backtrack kernel, or both fused (PASS −1)
template <int L, int K, int NT, int MODE, int PASS>
static int launch_pass(const float* x, const float* table, int B, int T, uint8_t* bp,
                       int64_t* states, int32_t* links, cudaStream_t stream) {
  size_t smem;
  cudaError_t e = allow_smem<L, K, NT, MODE, PASS>(T, smem);
  if (e != cudaSuccess) return (int)e;
  viterbi_tailbiting_kernel<L, K, NT, MODE, PASS><<<B, NT, smem, stream>>>(x, table, T, bp, states,
                                                                           links);
  if constexpr (PASS >= 0)
    viterbi_backtrack_kernel<L, K, MODE><<<(B + BT_WARPS - 1) / BT_WARPS, 32 * BT_WARPS, 0, stream>>>(
        x, table, T, B, PASS, bp, links, states);
  return (int)cudaGetLastError();
}

template <int L, int K, int NT, int MODE>
static int launch_one(const float* x, const float* table, int B, int T, uint8_t* bp,
                      int64_t* states, cudaStream_t stream) {
  static_assert(smem_bytes(L, K, NT, MAX_T) <= SMEM_BYTES, "shared-memory plan");
  if (smem_code_groups(L, K, NT) + smem_code_rows(L, K, NT) > 0 && T > MAX_T) return -2;
  if constexpr (split_backtrack(L, K)) {
    int32_t* links = reinterpret_cast<int32_t*>(bp + (int64_t)B * scratch_bytes(L, K, T));
    const int rc = launch_pass<L, K, NT, MODE, 0>(x, table, B, T, bp, states, links, stream);
    return rc ? rc : launch_pass<L, K, NT, MODE, 1>(x, table, B, T, bp, states, links, stream);
  } else {
    return launch_pass<L, K, NT, MODE, -1>(x, table, B, T, bp, states, nullptr, stream);
  }
}

// FN<L, k, threads, mode>(args…) for the kernel of (L, k, mode) — mode 1: 1MAD, mode 2:
// MUL1 computed in registers; mode 0: any code from its table
#define CASE(L_, K_, FN, ...)                                                        \
  if (L == L_ && k == K_)                                                            \
    return mode == 1   ? FN<L_, K_, block_threads(L_, K_), 1>(__VA_ARGS__)            \
           : mode == 2 ? FN<L_, K_, block_threads(L_, K_), 2>(__VA_ARGS__)            \
                       : FN<L_, K_, block_threads(L_, K_), 0>(__VA_ARGS__);
#define ALL_CASES(FN, ...)                                                                 \
  CASE(12, 1, FN, __VA_ARGS__) CASE(12, 2, FN, __VA_ARGS__) CASE(12, 3, FN, __VA_ARGS__)   \
  CASE(12, 4, FN, __VA_ARGS__) CASE(16, 1, FN, __VA_ARGS__) CASE(16, 2, FN, __VA_ARGS__)   \
  CASE(16, 3, FN, __VA_ARGS__) CASE(16, 4, FN, __VA_ARGS__)

// global scratch bytes a sequence (the caller's `bp` holds B of them)
extern "C" int64_t tq_viterbi_scratch_bytes(int L, int k, int T) {
  return launch_scratch_bytes(L, k, T);
}

extern "C" int tq_viterbi_tailbiting(const float* x, const float* table, int B, int T, int L,
                                     int k, int mode, uint8_t* bp, int64_t* states,
                                     void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  ALL_CASES(launch_one, x, table, B, T, bp, states, s)
  return -1;
}
#endif
