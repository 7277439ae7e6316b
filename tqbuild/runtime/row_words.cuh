// The rows kernels' (runtime/trellis_gemv.cu, runtime/pair_gemv.cu) first two periods of
// the RB rows a lane decodes next: rows r0 … r0 + RB − 1 (past the last row: the last row
// again), period p0 into slot wa and p0 + S into slot wb where they exist. LOAD(row, p, ppb,
// w): period p's k words of a stored row and the next period's first (each kernel's
// `load_words`). Also compiled for the host by the SIMT emulator (tests/simt; `min`: quant8.cuh).
#pragma once
#include <cstdint>

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
