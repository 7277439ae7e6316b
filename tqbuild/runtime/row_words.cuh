// Word loads shared by the decode kernels (runtime/trellis_gemv.cu, runtime/pair_gemv.cu):
// `run_words`, n words in the widest loads their alignment allows; `period_words`, a period's k
// words; `start_row_words`, the rows kernels' first two periods of
// the RB rows a lane decodes next: rows r0 … r0 + RB − 1 (past the last row: the last row
// again), period p0 into slot wa and p0 + S into slot wb where they exist. LOAD(row, p, ppb,
// w): period p's k words of a stored row and the next period's first (each kernel's
// `load_words`). Also compiled for the host by the SIMT emulator (tests/simt; `min`: quant8.cuh).
#pragma once
#include <cstdint>

// the byte alignment period_words<K> needs of the words
template <int K>
__host__ __device__ constexpr int words_align() { return (K == 4 || K == 2) ? 4 * K : 4; }

// N words from `a` into w[0, N) in loads of `vec` bytes where N allows them (16: N a multiple
// of 4, 8: N even; `a` that aligned), else N 4-byte loads
template <int N, int W>
__device__ __forceinline__ void run_words(const uint32_t* a, int vec, uint32_t (&w)[W]) {
    static_assert(N <= W, "room for the run");
    if (N % 4 == 0 && vec == 16) {
#pragma unroll
        for (int j = 0; j < N / 4; ++j) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(a) + j);
            w[4 * j] = v.x; w[4 * j + 1] = v.y; w[4 * j + 2] = v.z; w[4 * j + 3] = v.w;
        }
    } else if (N % 2 == 0 && vec >= 8) {
#pragma unroll
        for (int j = 0; j < N / 2; ++j) {
            const uint2 v = __ldg(reinterpret_cast<const uint2*>(a) + j);
            w[2 * j] = v.x; w[2 * j + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int j = 0; j < N; ++j) w[j] = __ldg(a + j);
    }
}

// A period's K words from `a`: one 16-byte load at K = 4, one 8-byte load at K = 2 (the
// period then starts 4K-byte aligned: a stored row of n_periods·K words keeps the words'
// own alignment, which the entry points check), else K 4-byte loads; w[K] is the caller's.
template <int K>
__device__ __forceinline__ void period_words(const uint32_t* a, uint32_t (&w)[K + 1]) {
    run_words<K>(a, words_align<K>(), w);
}

template <int RB, int W, void (*LOAD)(const uint32_t*, int, int, uint32_t (&)[W])>
__device__ __forceinline__ void start_row_words(const uint32_t* words, int r0, int rows, int nw,
                                                int p0, int S, int ng, int ppb,
                                                const uint32_t* (&wrow)[RB],
                                                uint32_t (&wa)[RB][W], uint32_t (&wb)[RB][W]) {
#pragma unroll
    for (int r = 0; r < RB; ++r) {
        wrow[r] = words + (size_t)min(r0 + r, rows - 1) * nw;
        if (p0 < ng) LOAD(wrow[r], p0, ppb, wa[r]);
        if (p0 + S < ng) LOAD(wrow[r], p0 + S, ppb, wb[r]);
    }
}
