// Runs kernels/pair_viterbi.cu's kernels in the SIMT emulator (tests/test_pair_viterbi_host.py).
// usage: pair_viterbi_host IN OUT — IN: int32 B, T, k, then x [B, T] float32 and the
// table's value pairs [512, 2] float32; OUT: int64 step states [B, T/2].
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "simt_host.h"

alignas(16) float smem[227 * 1024 / 4];  // the kernels' dynamic shared memory

#include "pair_viterbi.cu"

template <int K>
static void run(const float* x, const float* e, int B, int T, int64_t* steps) {
  const int P = T / 2, J = S >> K;
  std::vector<float> hist((size_t)B * P * J, -7.f);  // garbage where nothing is written
  std::vector<int32_t> fin(B), ov(B);
  simt::launch(B, 1, NT, [&] { pair_viterbi_pass<K, 0>(x, e, T, nullptr, hist.data(), fin.data()); });
  simt::launch((B + BW - 1) / BW, 1, 32 * BW, [&] {
    pair_viterbi_back<K, 0>(x, e, hist.data(), T, B, fin.data(), ov.data(), nullptr);
  });
  simt::launch(B, 1, NT, [&] { pair_viterbi_pass<K, 1>(x, e, T, ov.data(), hist.data(), fin.data()); });
  simt::launch((B + BW - 1) / BW, 1, 32 * BW, [&] {
    pair_viterbi_back<K, 1>(x, e, hist.data(), T, B, fin.data(), ov.data(), steps);
  });
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* f = fopen(argv[1], "rb");
  if (!f) return 2;
  const auto h = simt::read<int32_t>(f, 3);
  const int B = h[0], T = h[1], k = h[2];
  const auto x = simt::read<float>(f, (size_t)B * T);
  const auto e = simt::read<float>(f, 1024);
  fclose(f);
  std::vector<int64_t> steps((size_t)B * (T / 2));
  if (k == 2) run<4>(x.data(), e.data(), B, T, steps.data());
  else if (k == 3) run<6>(x.data(), e.data(), B, T, steps.data());
  else if (k == 4) run<8>(x.data(), e.data(), B, T, steps.data());
  else return 3;
  FILE* g = fopen(argv[2], "wb");
  if (!g || fwrite(steps.data(), 8, steps.size(), g) != steps.size()) return 2;
  fclose(g);
  return 0;
}
