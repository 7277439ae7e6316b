// Tail-biting Viterbi for QTIP's bitshift trellis, one CUDA block per T-block.
//
// The whole call is one launch: the rolled pass, its backtrack to the overlap
// state, the pinned pass, its backtrack, the states written out. Every cost is
// formed with the same float32 operations as kernels/viterbi.py (code − x,
// squared, + best predecessor cost; each rounded on its own, no FMA), ties go to
// the smallest predecessor c and the smallest final state, so the states equal
// the torch path's bit for bit.
//
// Layout: J = 2^(L−k) predecessor classes j; the predecessors of the states
// whose top L−k bits are j' are j' + c·J. Thread tid owns classes j = tid + i·NT
// and for each computes min_c cost_{t−1}[j + c·J] — its costs never leave
// registers; only the J best costs go through shared memory, once per step.
// Backpointers (c, one byte per class and step) go to global memory.

#include <cstdint>
#include <cuda_runtime.h>

#define INF __int_as_float(0x7f800000)

template <int MODE>
struct Codes;

// MODE 0: the float32 code table (2^L entries) in global memory, read through
// the read-only cache; MODE 1: 1MAD computed — the byte sum of the LCG output
// indexes a 1021-entry table of its exact float32 values in shared memory.
template <>
struct Codes<0> {
  const float* __restrict__ table;
  __device__ __forceinline__ float operator()(uint32_t s) const { return __ldg(table + s); }
};
template <>
struct Codes<1> {
  const float* vals;  // shared memory
  __device__ __forceinline__ float operator()(uint32_t s) const {
    uint32_t x = s * 34038481u + 76625530u;
    return vals[__vsadu4(x, 0u)];
  }
};

template <int L, int K, int NT, int MODE>
__global__ void __launch_bounds__(NT)
viterbi_tailbiting_kernel(const float* __restrict__ x, const float* __restrict__ table,
                          const float* __restrict__ mad_vals, int T,
                          uint8_t* __restrict__ bp_all, int64_t* __restrict__ states_out) {
  constexpr int C = 1 << K;
  constexpr int J = 1 << (L - K);
  constexpr int G = J / NT;  // classes per thread
  static_assert(J % NT == 0, "NT must divide J");
  // two best-cost buffers when they fit (one barrier a step), else one buffer
  // and the new costs staged in registers (two barriers a step)
  constexpr bool DOUBLE = 2 * J * 4 <= 160 * 1024;
  extern __shared__ float smem[];
  float* best = smem;                        // [J] (x2 when DOUBLE)
  float* xs = best + (DOUBLE ? 2 * J : J);   // [T]
  float* vals = xs + T;                      // [1024] (MODE 1)
  int* st = reinterpret_cast<int*>(vals + 1024);  // [T] states
  float* red_v = reinterpret_cast<float*>(st + T);  // [NT/32]
  int* red_s = reinterpret_cast<int*>(red_v + NT / 32);  // [NT/32]

  const int tid = threadIdx.x;
  const int64_t b = blockIdx.x;
  const float* xrow = x + b * T;
  uint8_t* bp = bp_all + b * (int64_t)T * J;
  for (int i = tid; i < T; i += NT) xs[i] = xrow[i];
  if (MODE == 1)
    for (int i = tid; i < 1021; i += NT) vals[i] = mad_vals[i];
  Codes<MODE> code;
  if constexpr (MODE == 0) code.table = table;
  else code.vals = vals;
  __syncthreads();

  int overlap = -1;
  for (int pass = 0; pass < 2; ++pass) {
    const int shift = pass == 0 ? T / 2 : 0;  // pass 0 runs on x rolled right by T/2
    float* cur = best;
    float* nxt = DOUBLE ? best + J : best;
    // best_0: 0 (cost0 = d + 0 exactly) or +inf outside the pinned class
    for (int j = tid; j < J; j += NT) cur[j] = (overlap < 0 || j == overlap) ? 0.f : INF;
    __syncthreads();
    for (int t = 1; t < T; ++t) {
      int ti = t - 1 - shift;
      ti += ti < 0 ? T : 0;
      const float xv = xs[ti];
      float m[DOUBLE ? 1 : G];
#pragma unroll
      for (int i = 0; i < G; ++i) {
        const int j = tid + i * NT;
        float mv = 0.f;
        int arg = 0;
#pragma unroll
        for (int c = 0; c < C; ++c) {
          const uint32_t s = j + c * J;
          const float d = __fsub_rn(code(s), xv);
          const float v = __fadd_rn(__fmul_rn(d, d), cur[s >> K]);
          if (c == 0 || v < mv) { mv = v; arg = c; }
        }
        if constexpr (DOUBLE) nxt[j] = mv;
        else m[i] = mv;
        bp[(int64_t)t * J + j] = (uint8_t)arg;
      }
      __syncthreads();
      if constexpr (DOUBLE) {
        float* tmp = cur; cur = nxt; nxt = tmp;
      } else {
#pragma unroll
        for (int i = 0; i < G; ++i) cur[tid + i * NT] = m[i];
        __syncthreads();
      }
    }
    float* bestf = cur;
    // final costs at t = T−1; the smallest (cost, state), pinned states only
    {
      int ti = T - 1 - shift;
      ti += ti < 0 ? T : 0;
      const float xv = xs[ti];
      float bv = INF;
      int bs = 0x7fffffff;
      for (int s = tid; s < (1 << L); s += NT) {
        if (overlap >= 0 && (s & (J - 1)) != overlap) continue;
        const float d = __fsub_rn(code((uint32_t)s), xv);
        const float v = __fadd_rn(__fmul_rn(d, d), bestf[s >> K]);
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
        // backtrack (the rolled pass only as far as the state aligned with x[0])
        int s = bs;
        st[T - 1] = s;
        const int stop = pass == 0 ? T / 2 : 0;
        for (int t = T - 1; t > stop; --t) {
          const int j = s >> K;
          s = j + (int)bp[(int64_t)t * J + j] * J;
          st[t - 1] = s;
        }
        if (pass == 0) red_s[0] = st[T / 2] >> K;
      }
      __syncthreads();
      if (pass == 0) overlap = red_s[0];
      __syncthreads();
    }
  }
  int64_t* orow = states_out + b * T;
  for (int i = tid; i < T; i += NT) orow[i] = st[i];
}

template <int L, int K, int NT, int MODE>
static int launch_one(const float* x, const float* table, const float* mad_vals, int B, int T,
                      uint8_t* bp, int64_t* states, cudaStream_t stream) {
  constexpr int J = 1 << (L - K);
  constexpr bool DOUBLE = 2 * J * 4 <= 160 * 1024;
  size_t smem = sizeof(float) * ((DOUBLE ? 2 * J : J) + T + 1024) + sizeof(int) * T +
                8 * (NT / 32);
  auto kern = viterbi_tailbiting_kernel<L, K, NT, MODE>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem);
  if (e != cudaSuccess) return (int)e;
  kern<<<B, NT, smem, stream>>>(x, table, mad_vals, T, bp, states);
  return (int)cudaGetLastError();
}

#define CASE(L_, K_, NT_)                                                                   \
  if (L == L_ && k == K_)                                                                   \
    return mode == 1 ? launch_one<L_, K_, NT_, 1>(x, table, mad_vals, B, T, bp, states, s)  \
                     : launch_one<L_, K_, NT_, 0>(x, table, mad_vals, B, T, bp, states, s);

extern "C" int tq_viterbi_tailbiting(const float* x, const float* table, const float* mad_vals,
                                     int B, int T, int L, int k, int mode, uint8_t* bp,
                                     int64_t* states, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  CASE(12, 1, 256) CASE(12, 2, 256) CASE(12, 3, 256) CASE(12, 4, 256)
  CASE(16, 1, 1024) CASE(16, 2, 1024) CASE(16, 3, 1024) CASE(16, 4, 1024)
  return -1;
}
