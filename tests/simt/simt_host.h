// A small SIMT emulator: runs a CUDA kernel's source on the host so that its logic is
// tested on machines without a GPU. One std::thread a GPU thread, blocks one after
// another (so static storage — `TQ_SHARED`, or the harness's array behind an
// `extern __shared__` — is the block's shared memory). Supplies what the kernels
// written for it use (runtime/affine_gemv.cu, kernels/viterbi_cuda.cu): CUDA's
// declaration keywords, threadIdx / blockIdx / gridDim, __syncthreads, __shfl_down_sync / __shfl_sync /
// __shfl_xor_sync,
// mma.sync m16n8k16 (bf16 / fp16 → float32, PTX ISA fragment layout), packed fma
// (rounded once), PRMT, float32 intrinsics rounded as written (build with
// -ffp-contract=off), vector types, 16-byte loads. Subnormal and overflowing
// halves are out of scope; device asm stays behind #ifdef __CUDACC__ in the kernels.
// Bulk (TMA) copies shared → global run as late as a GPU may run them (below).
#pragma once
#include <array>
#include <cstdio>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <stdexcept>
#include <memory>
#include <thread>
#include <vector>

#define __host__
#define __device__
#define __global__
#define __shared__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define TQ_DEV inline
#define TQ_GLOBAL
#define TQ_BOUNDS(...)
#define TQ_SHARED static

struct uint4 {
  uint32_t x, y, z, w;
};
struct uint2 {
  uint32_t x, y;
};
struct float4 {
  float x, y, z, w;
};
inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }
struct int2 {
  int x, y;
};
inline int2 make_int2(int x, int y) { return {x, y}; }
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct simt_dim3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local simt_dim3 threadIdx, blockIdx, gridDim;

namespace simt {
struct Block {
  explicit Block(int threads) : bar(threads), mma(threads / 32), shfl(threads / 32) {
    for (int w = 0; w < threads / 32; ++w) warp_bars.emplace_back(new std::barrier<>(32));
  }
  std::barrier<> bar;
  std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
  std::vector<std::array<uint32_t, 32 * 6>> mma;  // a warp's lanes' A (4) and B (2) registers
  std::vector<std::array<uint32_t, 32>> shfl;  // a warp's lanes' shuffled values
};
inline Block* block = nullptr;

// run `body` as every thread of blocks (bx, by) of the grid, one block at a time
inline void launch(unsigned gx, unsigned gy, int threads, const std::function<void()>& body) {
  for (unsigned by = 0; by < gy; ++by)
    for (unsigned bx = 0; bx < gx; ++bx) {
      Block b(threads);
      block = &b;
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] {
          threadIdx.x = t;
          blockIdx.x = bx;
          blockIdx.y = by;
          gridDim.x = gx;
          gridDim.y = gy;
          body();
        });
      for (auto& t : ts) t.join();
      block = nullptr;
    }
}

inline float bf16_float(uint32_t h) {
  const uint32_t u = (h & 0xFFFFu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float f16_float(uint32_t h) {
  const uint16_t b = h & 0xFFFFu;
  _Float16 v;
  std::memcpy(&v, &b, 2);
  return (float)v;
}
// round r to bf16 (8 significant bits, nearest even) in one step
inline uint16_t bf16_round(double r) {
  if (r == 0) return std::signbit(r) ? 0x8000 : 0;
  int e;
  const double m = std::frexp(r, &e);
  const float f = (float)std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16);
}
inline uint16_t f16_round(double r) {
  const _Float16 v = (_Float16)r;
  uint16_t b;
  std::memcpy(&b, &v, 2);
  return b;
}
template <int DT>
inline float half_float(uint32_t h) { return DT == 0 ? bf16_float(h) : f16_float(h); }
template <int DT>
inline uint16_t half_round(double r) { return DT == 0 ? bf16_round(r) : f16_round(r); }
}  // namespace simt

inline void sync_block() { simt::block->bar.arrive_and_wait(); }
inline void __syncthreads() { sync_block(); }
// programmatic dependent launch: one launch at a time here, nothing to wait for
inline void pdl_trigger() {}
inline void pdl_wait() {}

template <typename T>
inline T __ldg(const T* p) {
  if ((uintptr_t)p % sizeof(T)) {  // the device faults on a misaligned vector load
    std::fprintf(stderr, "__ldg: %zu-byte load from misaligned %p\n", sizeof(T), (const void*)p);
    std::abort();
  }
  return *p;
}

// a warp's lanes exchange 4-byte values: each gets lane src's (its own where src ≥ 32)
template <typename T>
inline T warp_exchange(T v, int src) {
  static_assert(sizeof(T) == 4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  auto& ex = simt::block->shfl[warp];
  std::memcpy(&ex[lane], &v, 4);
  simt::block->warp_bars[warp]->arrive_and_wait();
  T r = v;
  if (src < 32) std::memcpy(&r, &ex[src], 4);
  simt::block->warp_bars[warp]->arrive_and_wait();
  return r;
}
template <typename T>
inline T __shfl_down_sync(unsigned, T v, int delta) {
  return warp_exchange(v, (int)(threadIdx.x & 31) + delta);
}
template <typename T>
inline T __shfl_sync(unsigned, T v, int src) { return warp_exchange(v, src & 31); }
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int o) {
  return warp_exchange(v, (int)(threadIdx.x & 31) ^ o);
}

inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float __int_as_float(int32_t i) { return __uint_as_float((uint32_t)i); }
inline int32_t __float_as_int(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline uint4 ld128(const void* p) {
  uint4 v;
  std::memcpy(&v, p, 16);
  return v;
}
inline uint2 ld64(const void* p) {
  uint2 v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t ld16(const uint16_t* p) { return *p; }

// PTX prmt (default mode): byte i of the result is byte sel[4i+2:4i] of {b, a}, or its
// sign replicated where sel bit 4i+3 is set
inline uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  const uint64_t v = ((uint64_t)b << 32) | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t s = (sel >> (4 * i)) & 0xF;
    uint32_t byte = (v >> (8 * (s & 7))) & 0xFF;
    if (s & 8) byte = (byte & 0x80) ? 0xFF : 0;
    r |= byte << (8 * i);
  }
  return r;
}

template <int DT>
inline uint32_t fma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d = 0;
  for (int h = 0; h < 2; ++h) {
    const int s = 16 * h;
    const double r = (double)simt::half_float<DT>(a >> s) * simt::half_float<DT>(b >> s) +
                     simt::half_float<DT>(c >> s);
    d |= (uint32_t)simt::half_round<DT>(r) << s;
  }
  return d;
}

template <int DT>
inline uint16_t to_bits(float v) { return simt::half_round<DT>(v); }

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: groupID g = lane / 4, c = lane % 4;
// A reg r holds (row g + 8·(r & 1), k 2c + 8·(r >> 1) + {0, 1}); B reg r holds
// (k 2c + 8r + {0, 1}, column g); D reg r holds (row g + 8·(r >> 1), column 2c + (r & 1))
template <int DT>
inline void mma16816(float* acc, const uint32_t* a, const uint32_t* b) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  auto& ex = simt::block->mma[warp];
  for (int i = 0; i < 4; ++i) ex[lane * 6 + i] = a[i];
  ex[lane * 6 + 4] = b[0];
  ex[lane * 6 + 5] = b[1];
  simt::block->warp_bars[warp]->arrive_and_wait();
  const int g = lane >> 2, c = lane & 3;
  for (int r = 0; r < 4; ++r) {
    const int row = g + 8 * (r >> 1), n = 2 * c + (r & 1);
    double s = 0;
    for (int k = 0; k < 16; ++k) {
      const int half = 16 * (k & 1), q = (k & 7) / 2, hi = k >= 8;
      const uint32_t av = ex[((row & 7) * 4 + q) * 6 + (row >= 8) + 2 * hi];
      const uint32_t bv = ex[(n * 4 + q) * 6 + 4 + hi];
      s += (double)simt::half_float<DT>(av >> half) * simt::half_float<DT>(bv >> half);
    }
    acc[r] += (float)s;
  }
  simt::block->warp_bars[warp]->arrive_and_wait();
}

// cp.async.bulk shared → global, in bulk groups, as late as a GPU may do it: a thread's
// copy reads its source only when the thread waits for the copy's reads (or for all),
// and writes its destination only when it waits for all — so a kernel that writes a
// source again before waiting, or reads a destination before waiting, reads wrong here
namespace simt {
struct BulkCopy {
  void* dst;
  const void* src;
  std::vector<unsigned char> data;  // the source, once read
};
inline thread_local std::deque<BulkCopy> bulk_unread, bulk_unwritten;
inline void bulk_copy(void* dst, const void* src, int bytes) {
  bulk_unread.push_back({dst, src, std::vector<unsigned char>((size_t)bytes)});
}
// cp.async.bulk.wait_group.read pending: all but the `pending` most recent copies have read
inline void bulk_wait_read(int pending) {
  while ((int)bulk_unread.size() > pending) {
    auto& c = bulk_unread.front();
    std::memcpy(c.data.data(), c.src, c.data.size());
    bulk_unwritten.push_back(std::move(c));
    bulk_unread.pop_front();
  }
}
// cp.async.bulk.wait_group 0: every copy has read and written
inline void bulk_wait_all() {
  bulk_wait_read(0);
  for (auto& c : bulk_unwritten) std::memcpy(c.dst, c.data.data(), c.data.size());
  bulk_unwritten.clear();
}

// a harness's input: n values of T from f (throws on a short file)
template <typename T>
inline std::vector<T> read(FILE* f, size_t n) {
  std::vector<T> v(n);
  if (fread(v.data(), sizeof(T), n, f) != n) throw std::runtime_error("short input");
  return v;
}
}  // namespace simt
