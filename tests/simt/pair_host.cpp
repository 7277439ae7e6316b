// Runs runtime/pair_gemv.cu's kernels in the SIMT emulator (tests/test_pair_gemv_host.py);
// built with -DTQ_K=k -DTQ_L=L. usage: pair_host IN OUT — IN: int32 axis, M, rows (axis 1:
// output rows; axis 0: stored rows = inputs), n (axis 1: inputs; axis 0: outputs), T, rb,
// wpr, blocks, then words [rows, n·k/32] u32, scales [rows] f16 bits (u16), the table
// [512] u32 and x [M, inputs] float32; OUT: float32 [M, outputs] (× the table's unit).
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "simt_host.h"

alignas(16) float smem[227 * 1024 / 4];  // the kernels' dynamic shared memory

#include "pair_gemv.cu"

template <int M, int RB, int WPR>
static void rows(const uint32_t* w, const uint16_t* s, const uint32_t* t, const float* x,
                 float* out, int nrows, int n, int T, int blocks) {
  simt::launch(blocks, 1, NT, [&] {
    pair_rows<M, RB, WPR>(w, s, t, x, 0, out, nrows, n, T / 32, 1.0f, blocks);
  });
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* f = fopen(argv[1], "rb");
  if (!f) return 2;
  const auto h = simt::read<int32_t>(f, 8);
  const int axis = h[0], M = h[1], nrows = h[2], n = h[3], T = h[4], rb = h[5], wpr = h[6],
            blocks = h[7];
  const int n_in = axis == 1 ? n : nrows, n_out = axis == 1 ? nrows : n;
  const auto w = simt::read<uint32_t>(f, (size_t)nrows * n * TQ_K / 32);
  const auto s = simt::read<uint16_t>(f, nrows);
  const auto tab = simt::read<uint32_t>(f, 512);
  const auto x = simt::read<float>(f, (size_t)M * n_in);
  fclose(f);
  std::vector<float> out((size_t)M * n_out);
  if (axis == 1) {
    if (M == 1 && rb == 2 && wpr == 1) rows<1, 2, 1>(w.data(), s.data(), tab.data(), x.data(), out.data(), nrows, n, T, blocks);
    else if (M == 1 && rb == 2 && wpr == 2) rows<1, 2, 2>(w.data(), s.data(), tab.data(), x.data(), out.data(), nrows, n, T, blocks);
    else if (M == 3 && rb == 1 && wpr == 1) rows<3, 1, 1>(w.data(), s.data(), tab.data(), x.data(), out.data(), nrows, n, T, blocks);
    else if (M == 2 && rb == 2 && wpr == 1) rows<2, 2, 1>(w.data(), s.data(), tab.data(), x.data(), out.data(), nrows, n, T, blocks);
    else return 3;
  } else {
    std::vector<int8_t> q(n_in);
    std::vector<float> gs(n_in / 32), part((size_t)blocks * 2048);
    for (int m = 0; m < M; ++m) {
      simt::launch((n_in + NT - 1) / NT, 1, NT, [&] {
        pair_quantize(x.data() + (size_t)m * n_in, 0, s.data(), n_in, q.data(), gs.data());
      });
      simt::launch(blocks, 1, NT, [&] {
        pair_cols(w.data(), tab.data(), q.data(), gs.data(), part.data(), n_in, n_out / 32,
                  T / 32, blocks);
      });
      const int tiles = (n_out / 32 + 31) / 32;
      simt::launch((tiles * 1024 + NT - 1) / NT, 1, NT, [&] {
        pair_cols_sum(part.data(), out.data() + (size_t)m * n_out, n_in, n_out / 32, T / 32,
                      1.0f, blocks);
      });
    }
  }
  FILE* g = fopen(argv[2], "wb");
  if (!g || fwrite(out.data(), 4, out.size(), g) != out.size()) return 2;
  fclose(g);
  return 0;
}
