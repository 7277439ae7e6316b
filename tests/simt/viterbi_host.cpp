// Runs kernels/viterbi_cuda.cu's kernel in the SIMT emulator (tests/test_viterbi_host.py).
// usage: viterbi_host IN OUT — IN: int32 B, T, L, k, mode, then x [B, T] float32 and the
// code table [2^L] float32; OUT: int64 states [B, T].
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "simt_host.h"

alignas(16) float smem[227 * 1024 / 4];  // the kernel's `extern __shared__` (one block at a time)

#include "viterbi_cuda.cu"

// as the .cu's launch_pass: one pass's kernel and its backtrack kernel (PASS 0, 1), or
// the fused kernel (PASS −1)
template <int L, int K, int MODE, int PASS>
static void run_pass(const float* x, const float* table, int B, int T, uint8_t* bp,
                     int64_t* states, int32_t* links) {
  constexpr int NT = block_threads(L, K);
  simt::launch(B, 1, NT, [&] {
    viterbi_tailbiting_kernel<L, K, NT, MODE, PASS>(x, table, T, bp, states, links);
  });
  if constexpr (PASS >= 0)
    simt::launch((B + BT_WARPS - 1) / BT_WARPS, 1, 32 * BT_WARPS, [&] {
      viterbi_backtrack_kernel<L, K, MODE>(x, table, T, B, PASS, bp, links, states);
    });
}

template <int L, int K, int MODE>
static void run(const float* x, const float* table, int B, int T, int64_t* states) {
  // garbage scratch (large costs)
  std::vector<uint8_t> bp((size_t)B * launch_scratch_bytes(L, K, T), 0x7f);
  if constexpr (split_backtrack(L, K)) {
    int32_t* links = reinterpret_cast<int32_t*>(bp.data() + (size_t)B * scratch_bytes(L, K, T));
    run_pass<L, K, MODE, 0>(x, table, B, T, bp.data(), states, links);
    run_pass<L, K, MODE, 1>(x, table, B, T, bp.data(), states, links);
  } else {
    run_pass<L, K, MODE, -1>(x, table, B, T, bp.data(), states, nullptr);
  }
}

template <int L, int K>
static void run_mode(int mode, const float* x, const float* table, int B, int T, int64_t* st) {
  if (mode == 1) run<L, K, 1>(x, table, B, T, st);
  else if (mode == 2) run<L, K, 2>(x, table, B, T, st);
  else run<L, K, 0>(x, table, B, T, st);
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* f = fopen(argv[1], "rb");
  if (!f) return 2;
  int32_t h[5];
  if (fread(h, 4, 5, f) != 5) return 2;
  const int B = h[0], T = h[1], L = h[2], k = h[3], mode = h[4];
  std::vector<float> x((size_t)B * T), table((size_t)1 << L);
  if (fread(x.data(), 4, x.size(), f) != x.size() ||
      fread(table.data(), 4, table.size(), f) != table.size())
    return 2;
  fclose(f);
  std::vector<int64_t> st((size_t)B * T);
  const float *xp = x.data(), *tp = table.data();
  int64_t* sp = st.data();
  if (L == 12 && k == 2) run_mode<12, 2>(mode, xp, tp, B, T, sp);
  else if (L == 12 && k == 3) run_mode<12, 3>(mode, xp, tp, B, T, sp);
  else if (L == 16 && k == 2) run_mode<16, 2>(mode, xp, tp, B, T, sp);
  else if (L == 16 && k == 3) run_mode<16, 3>(mode, xp, tp, B, T, sp);
  else if (L == 16 && k == 4) run_mode<16, 4>(mode, xp, tp, B, T, sp);
  else return 3;
  FILE* g = fopen(argv[2], "wb");
  if (!g || fwrite(st.data(), 8, st.size(), g) != st.size()) return 2;
  fclose(g);
  return 0;
}
