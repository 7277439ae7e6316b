// Runs runtime/pair_gemv.cu's kernels in the SIMT emulator (tests/test_pair_gemv_host.py);
// built with -DTQ_K=k -DTQ_L=L. usage: pair_host IN OUT — IN: int32 axis, M, rows (axis 1:
// output rows; axis 0: stored rows = inputs), n (axis 1: inputs; axis 0: outputs), T, rb,
// wpr, blocks (axis 0: rb = warps walking a tile's inputs together, 1 or 2), nth (rows:
// threads a block), gsw (words a quantized group), odt (the output's dtype: 0 f32, 1 bf16,
// 2 f16), half (axis 0: the walk in packed fp16; axis 1: pair_rows_mma on x as bf16 (1), f16
// (2) or float32 (3), wpr its run of periods a lane), then words [rows, n·k/32] u32, scales [rows]
// f16 bits (u16), the table [512] u32 and x [M, inputs] float32; OUT: [M, outputs] of dtype
// odt (× the table's unit).
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "simt_host.h"

alignas(16) float smem[227 * 1024 / 4];  // the kernels' dynamic shared memory

#include "pair_gemv.cu"

template <int M, int RB, int WPR, int NTH>
static void rows(const uint32_t* w, const uint16_t* s, const uint32_t* t, const float* x,
                 Out out, int nrows, int n, int T, int gsw, int blocks) {
  simt::launch(blocks, 1, NTH, [&] {
    pair_rows<M, RB, WPR, NTH>(w, s, t, x, 0, out, nrows, n, T / 32, gsw, 1.0f, blocks);
  });
}

static int write(const char* path, const std::vector<float>& out, int odt) {
  FILE* g = fopen(path, "wb");
  const size_t size = odt ? 2 : 4, n = out.size();  // elements, each `size` bytes
  if (!g || fwrite(out.data(), size, n, g) != n) return 2;
  fclose(g);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* f = fopen(argv[1], "rb");
  if (!f) return 2;
  const auto h = simt::read<int32_t>(f, 12);
  const int axis = h[0], M = h[1], nrows = h[2], n = h[3], T = h[4], rb = h[5], wpr = h[6],
            blocks = h[7], nth = h[8], gsw = h[9], odt = h[10], half = h[11];
  const int n_in = axis == 1 ? n : nrows, n_out = axis == 1 ? nrows : n;
  const auto w = simt::read<uint32_t>(f, (size_t)nrows * n * TQ_K / 32);
  const auto s = simt::read<uint16_t>(f, nrows);
  const auto tab = simt::read<uint32_t>(f, 512);
  const auto x = simt::read<float>(f, (size_t)M * n_in);
  fclose(f);
  std::vector<float> out((size_t)M * n_out);  // room for float32; halves use its front
  const Out O{out.data(), odt};
  const size_t osize = odt ? 2 : 4;
  if (axis == 1 && half) {  // pair_rows_mma: x as bf16 (half 1), f16 (2) or float32 (3)
    std::vector<uint16_t> xh(x.size());
    for (size_t i = 0; i < x.size(); ++i) xh[i] = half == 2 ? simt::f16_round(x[i]) : simt::bf16_round(x[i]);
    const int dt = half == 3 ? 0 : half;
    const void* xp = half == 3 ? (const void*)x.data() : (const void*)xh.data();
    const RowsMmaKernel kern = rows_mma_kernel(dt, wpr);  // wpr: the run of periods a lane takes
    simt::launch(blocks, 1, MMA_NTH, [&] {
      kern(w.data(), s.data(), tab.data(), xp, dt, O, M, nrows, n, T / 32, 1.0f, blocks);
    });
    return write(argv[2], out, odt);
  }
  if (axis == 1) {
    const auto* W = w.data();
    const auto* S = s.data();
    const auto* Tb = tab.data();
#define TQ_PAIR_ROWS(m, r, p, t)                                                   \
    if (M == m && rb == r && wpr == p && nth == t)                                 \
      return rows<m, r, p, t>(W, S, Tb, x.data(), O, nrows, n, T, gsw, blocks), \
             write(argv[2], out, odt);
    TQ_PAIR_ROWS_INSTANCES
#undef TQ_PAIR_ROWS
    return 3;
  }
  // axis 0: rb = the warps of a walker (SUB); rows sharing a decode as tq_pair_cols takes them
  const int mc = cols_rows(M, half, n_in, n_out, blocks, sizeof(smem));
  std::vector<float> part((size_t)blocks * 2048 * mc);
  std::vector<int> tile_range(2 * blocks, -1);  // unwritten: a wrong range, not a lucky one
  for (int m0 = 0; m0 < M; m0 += mc) {
    const int m = M - m0 < mc ? M - m0 : mc;
    const ColsKernel kern = cols_kernel(rb, half, m);
    if (!kern) return 3;
    const float* xm = x.data() + (size_t)m0 * n_in;
    simt::launch(blocks, 1, rb * NT, [&] {
      kern(w.data(), s.data(), tab.data(), xm, 0, part.data(), tile_range.data(), n_in, n_out / 32,
           T / 32, gsw, blocks);
    });
    simt::launch(n_out / 32, m, 32 * SUM_W, [&] {
      const Out Om{reinterpret_cast<char*>(out.data()) + (size_t)m0 * n_out * osize, odt};
      pair_cols_sum(part.data(), reinterpret_cast<const int2*>(tile_range.data()), Om, T / 32,
                    1.0f);
    });
  }
  return write(argv[2], out, odt);
}
