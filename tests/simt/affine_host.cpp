// Runs runtime/affine_gemv.cu's kernel in the SIMT emulator (tests/test_affine_gemv_host.py).
// usage: affine_host IN OUT — IN: int32 bits, dtype, M, N, K, gs, splits, then x [M, K]
// u16, words [N, K·bits/32] u32, scales and biases [N, K/gs] u16; OUT: the kernel's
// output (u16 [M, N], or with splits > 1 float32 [splits, M, N]).
#include <cstdio>
#include <vector>

#include "simt_host.h"
#include "affine_gemv.cu"

template <int BITS, int DT>
static void run(const uint16_t* x, const uint32_t* w, const uint16_t* s, const uint16_t* b,
                void* out, int M, int N, int K, int gs, int splits) {
  const AffLaunch a = aff_launch(BITS, DT, N, K, gs, splits);
  simt::launch(a.tiles, a.splits, 32 * AFF_WARPS, [&] {
    if (a.wide)
      affine_mma<BITS, DT, AFF_WARPS, AFF_DEPTH_WIDE, AFF_MINB_WIDE>(
          x, w, s, b, out, M, N, K, a.gs_log2, a.per_split, a.f32_out, a.mask2);
    else
      affine_mma<BITS, DT, AFF_WARPS, AFF_DEPTH, AFF_MINB>(x, w, s, b, out, M, N, K, a.gs_log2,
                                                           a.per_split, a.f32_out, a.mask2);
  });
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* f = fopen(argv[1], "rb");
  if (!f) return 2;
  const auto h = simt::read<int32_t>(f, 7);
  const int bits = h[0], dt = h[1], M = h[2], N = h[3], K = h[4], gs = h[5], splits = h[6];
  const auto x = simt::read<uint16_t>(f, (size_t)M * K);
  const auto w = simt::read<uint32_t>(f, (size_t)N * K * bits / 32);
  const auto s = simt::read<uint16_t>(f, (size_t)N * (K / gs));
  const auto b = simt::read<uint16_t>(f, (size_t)N * (K / gs));
  fclose(f);
  const size_t n_out = (size_t)(splits > 1 ? splits : 1) * M * N;
  std::vector<uint8_t> out(n_out * (splits > 1 ? 4 : 2));
  void* o = out.data();
  if (bits == 4 && dt == 0) run<4, 0>(x.data(), w.data(), s.data(), b.data(), o, M, N, K, gs, splits);
  else if (bits == 4 && dt == 1) run<4, 1>(x.data(), w.data(), s.data(), b.data(), o, M, N, K, gs, splits);
  else if (bits == 2 && dt == 0) run<2, 0>(x.data(), w.data(), s.data(), b.data(), o, M, N, K, gs, splits);
  else if (bits == 2 && dt == 1) run<2, 1>(x.data(), w.data(), s.data(), b.data(), o, M, N, K, gs, splits);
  else if (bits == 8 && dt == 0) run<8, 0>(x.data(), w.data(), s.data(), b.data(), o, M, N, K, gs, splits);
  else if (bits == 8 && dt == 1) run<8, 1>(x.data(), w.data(), s.data(), b.data(), o, M, N, K, gs, splits);
  else return 3;
  FILE* g = fopen(argv[2], "wb");
  if (!g || fwrite(out.data(), 1, out.size(), g) != out.size()) return 2;
  fclose(g);
  return 0;
}
