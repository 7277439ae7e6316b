// pair_rows_tc: the pair code's rows (axis 1) on the tensor cores, M = 1..8 tokens with
// one decode for all of them. Included by runtime/pair_gemv.cu (its helpers: window,
// load_table, group_of, Out, put, half_of, lds_abs); also compiled for the host by the SIMT
// emulator (tests/simt/pair_host.cpp).
//
// One mma.m16n8k16 (f16 in, f32 accumulated) takes 16 rows × 16 weights of a period × 8
// columns, the columns being tokens (those ≥ M repeat token M − 1 and are not written).
// A register of the A fragment is one table entry — the step's two weights as two fp16
// halves (the int16 pair rounded to fp16: the caller's table), so a looked-up entry goes
// into the MMA as it is: no byte split, no per-group conversion. Lane (g, c) = (lane / 4,
// lane % 4) decodes steps 4c … 4c + 3 of the period for rows g and g + 8 of the tile: a
// 34-bit window at most of two words, shifted once (its offset 8k·c depends on the lane),
// then four windows at constant offsets. Step v's pair meets inputs 30 − 2v and 31 − 2v of
// the period's group (pair_gemv.cu's layout), one fp16 word of x; the lane's four steps'
// x words are 16 bytes (one LDS.128, in the order the MMAs take them).
//
// x is not quantized to int8 here: each token is scaled by a power of two (its max |x|
// lands in [2^14, 2^15)) and rounded to fp16 once, in shared memory after the table
// (16 words a group, tokens padded so a warp's loads hit every bank once); the outputs
// are multiplied back. So this kernel's outputs are the dot products of fp16-rounded
// weights and inputs in float32 (tests/test_pair_gemv_host.py's `tc_reference`), not the
// int8 kernels' numbers.
//
// Work: a block owns an even split of the 16-row tiles; its (tile, period) units are split
// evenly over its warps (every lane of a warp on the same unit: the MMA needs the warp
// converged). A warp writes a tile it walked whole; a tile shared by warps gets their sums
// from shared memory (two slots a warp: its first tile and its last), added in warp order.
// Two units' words in flight a lane.
#pragma once

namespace {

constexpr int TC_RED_OFF = 0;  // the warps' partial sums: [warp][2][16·TR rows][M tokens]

#ifdef __CUDACC__
TQ_DEV void mma_f16(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
TQ_DEV uint32_t half2_bits(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
}
TQ_DEV uint4 lds128(const uint32_t* p) { return *reinterpret_cast<const uint4*>(p); }
#else
TQ_DEV void mma_f16(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    const uint32_t b[2] = {b0, b1};
    mma16816<1>(acc, a, b);
}
TQ_DEV uint32_t half2_bits(float lo, float hi) {
    return (uint32_t)simt::f16_round(lo) | (uint32_t)simt::f16_round(hi) << 16;
}
TQ_DEV uint4 lds128(const uint32_t* p) { return ld128(p); }
#endif

// words a token's fp16 x takes: 16 a group, padded to 16 mod 32 (a warp's LDS.128 of 8
// tokens × 4 lanes then meets each bank once a quarter-warp)
TQ_DEV __host__ constexpr int tc_token_words(int n) {
    return (n / 32) * 16 + (((n / 32) & 1) ? 0 : 16);
}

// x [M, n] into shared memory as fp16 (a group's 16 words in reverse order: word 15 − i
// holds inputs 2i, 2i + 1), token m times 2^(14 − E_m) (E_m: the exponent of
// its max |x|; 1 where the max is 0, inf or NaN), xinv[m] = the inverse
template <int M, int NTH>
TQ_DEV void tc_inputs(const void* x, int dt, int n, uint32_t* xh, int ts, float* wmax,
                      float* xinv) {
    constexpr int NW = NTH / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, chunks = n >> 3;
    float a[M];
#pragma unroll
    for (int m = 0; m < M; ++m) a[m] = 0.f;
    for (int c = threadIdx.x; c < chunks; c += NTH) {
#pragma unroll
        for (int m = 0; m < M; ++m) {
            float v[8];
            load8(x, dt, (size_t)m * n + 8 * c, v);
#pragma unroll
            for (int b = 0; b < 8; ++b) a[m] = fmaxf(a[m], fabsf(v[b]));
        }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
        for (int o = 16; o; o >>= 1) a[m] = fmaxf(a[m], __shfl_xor_sync(0xFFFFFFFFu, a[m], o));
        if (lane == 0) wmax[m * NW + warp] = a[m];
    }
    __syncthreads();
    if (warp < M) {
        float v = lane < NW ? wmax[warp * NW + lane] : 0.f;
        for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
        const int e = (int)((__float_as_uint(v) >> 23) & 0xFF);  // biased exponent of the max
        const int s = (v > 0.f && e < 255) ? max(-126, min(126, 14 - (e - 127))) : 0;
        if (lane == 0) {
            wmax[M * NW + warp] = __uint_as_float((uint32_t)(127 + s) << 23);
            xinv[warp] = __uint_as_float((uint32_t)(127 - s) << 23);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < M * chunks; c += NTH) {
        const int m = c / chunks, i = c - m * chunks;
        const float s = wmax[M * NW + m];
        float v[8];
        load8(x, dt, (size_t)m * n + 8 * i, v);
        uint4 h;
        h.w = half2_bits(__fmul_rn(v[0], s), __fmul_rn(v[1], s));
        h.z = half2_bits(__fmul_rn(v[2], s), __fmul_rn(v[3], s));
        h.y = half2_bits(__fmul_rn(v[4], s), __fmul_rn(v[5], s));
        h.x = half2_bits(__fmul_rn(v[6], s), __fmul_rn(v[7], s));
        *reinterpret_cast<uint4*>(xh + m * ts + (i >> 2) * 16 + 12 - 4 * (i & 3)) = h;
    }
}

// the four entries of steps 4c … 4c + 3 from a lane's two words (sh = 8k·c mod 32)
TQ_DEV void tc_entries(uint32_t lo, uint32_t hi, int sh, uint32_t lane4, uint32_t (&e)[4]) {
    const uint32_t w0 = __funnelshift_r(lo, hi, sh), w1 = hi >> sh;
    const uint32_t w[2] = {w0, w1};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int b = 2 * K * j;
        const uint32_t win = b == 0 ? w[0] : (b + L <= 32 ? w[0] >> b : __funnelshift_r(w[0], w[1], b));
        e[j] = lds_abs(((win * HMUL) & AMASK) | lane4);
    }
}

}  // namespace

// x [M, n] (dtype 0 f32, 1 bf16, 2 f16) -> out [M, rows] (· row scale · factor, in out's
// dtype); table: the 512 entries as fp16 pairs. A unit is TR tiles (16·TR rows) × a period:
// its x fragment, counters and checks shared by TR tiles' MMAs.
template <int M, int NTH, int TR>
TQ_GLOBAL void TQ_BOUNDS(NTH) pair_rows_tc(const uint32_t* __restrict__ words,
                                           const uint16_t* __restrict__ scales,
                                           const uint32_t* __restrict__ table, const void* x,
                                           int dt, Out out, int rows, int n, int ppb,
                                           float factor, int nblocks) {
    TQ_DYN_SMEM;
    constexpr int NW = NTH / 32, RT = 16 * TR, SLOT = RT * M;  // SLOT: floats a part
    static_assert(NW >= M, "a warp a token's max");
    static_assert((NW * 2 * SLOT + (M + 2) * NW) * 4 <= TAB_OFF, "the parts below the table");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, c = lane & 3;
    const int ng = n >> 5, nw = ng * K, ts = tc_token_words(n);
    float* red = reinterpret_cast<float*>(smem + TC_RED_OFF);  // [NW][2][RT][M]
    float* wmax = red + NW * 2 * SLOT;                         // [M + 1][NW]
    float* xinv = wmax + (M + 1) * NW;                         // [M]
    uint32_t* xh = reinterpret_cast<uint32_t*>(smem + XQ_OFF);  // [M][ts]
    const int tiles = (rows + RT - 1) / RT, b = blockIdx.x;
    const int t0 = (int)((int64_t)tiles * b / nblocks), t1 = (int)((int64_t)tiles * (b + 1) / nblocks);
    const int U = (t1 - t0) * ng;
    const int ua = (int)((int64_t)U * warp / NW), ub = (int)((int64_t)U * (warp + 1) / NW);
    const int wi = (8 * K * c) >> 5, sh = (8 * K * c) & 31;
    // the units' words, two in flight: slot s holds rows g8 and g8 + 8 of each of its TR
    // tiles, the lane's two words of the period (bits 8k·c … of its k words and the next
    // period's first — the block's first at the block's end: `wrap` words back)
    uint32_t la[2][TR], ha[2][TR], lb[2][TR], hb[2][TR];
    const uint32_t wrap = wi + 1 == K ? (uint32_t)(K * ppb) : 0u;
    int lj = t0 + ua / ng, lp = ua - (lj - t0) * ng, lu = ua;  // the next unit to load
    uint32_t loff = (uint32_t)(K * lp + wi);                    // its lo word in a row
    const uint32_t *ra[TR], *rb[TR];  // its rows (the last row for those past the end)
    auto rows_of = [&]() {
#pragma unroll
        for (int i = 0; i < TR; ++i) {
            ra[i] = words + (size_t)min(RT * lj + 16 * i + g8, rows - 1) * nw;
            rb[i] = words + (size_t)min(RT * lj + 16 * i + g8 + 8, rows - 1) * nw;
        }
    };
    rows_of();
    auto load_unit = [&](int s) {
        if (lu < ub) {
            const uint32_t hoff = loff + 1u - ((lp & (ppb - 1)) == ppb - 1 ? wrap : 0u);
#pragma unroll
            for (int i = 0; i < TR; ++i) {
                la[s][i] = __ldg(ra[i] + loff);
                ha[s][i] = __ldg(ra[i] + hoff);
                lb[s][i] = __ldg(rb[i] + loff);
                hb[s][i] = __ldg(rb[i] + hoff);
            }
        }
        ++lu;
        loff += K;
        if (++lp == ng) {
            lp = 0;
            loff = (uint32_t)wi;
            ++lj;
            if (lu < ub) rows_of();
        }
    };
    load_unit(0);
    load_unit(1);
    load_table<NTH>(table, smem);
    pdl_wait();  // x: the kernel before this one's (under PDL; the words on their way)
    pdl_trigger();
    tc_inputs<M, NTH>(x, dt, n, xh, ts, wmax, xinv);
    __syncthreads();
    const uint32_t tb = shared_addr(smem + TAB_OFF);
    if (tb != TAB) {  // the layout's premise (dynamic shared memory at 0x400) does not hold
        for (int i = blockIdx.x * NTH + threadIdx.x; i < M * rows; i += nblocks * NTH)
            put(out, i, __int_as_float(0x7FC00000));
        return;
    }
    const uint32_t lane4 = tb | (4u * lane);
    const uint32_t* xg = xh + min(g8, M - 1) * ts + 4 * c;  // this lane's token's words
    const int first = t0 + ua / ng;  // the warp's first tile group
    float acc[TR][4];
#pragma unroll
    for (int i = 0; i < TR; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    int j = first, p = ua - (first - t0) * ng, p_start = p;
    auto write = [&](int row, int m, float v) {
        if (row < rows && m < M) put(out, (size_t)m * rows + row, v * xinv[m] * half_of(scales, row) * factor);
    };
    auto unit = [&](int s, int u) {
        const uint4 xb = lds128(xg + group_of(p, ppb) * 16);
        uint32_t ea[TR][4], eb[TR][4];
#pragma unroll
        for (int i = 0; i < TR; ++i) {
            tc_entries(la[s][i], ha[s][i], sh, lane4, ea[i]);
            tc_entries(lb[s][i], hb[s][i], sh, lane4, eb[i]);
        }
        load_unit(s);
#pragma unroll
        for (int i = 0; i < TR; ++i) {
            const uint32_t a0[4] = {ea[i][0], eb[i][0], ea[i][1], eb[i][1]};
            const uint32_t a1[4] = {ea[i][2], eb[i][2], ea[i][3], eb[i][3]};
            mma_f16(acc[i], a0, xb.x, xb.y);
            mma_f16(acc[i], a1, xb.z, xb.w);
        }
        if (p == ng - 1 || u == ub - 1) {  // the end of this warp's part of tile group j
            const bool whole = p_start == 0 && p == ng - 1;
            float* r = red + (warp * 2 + (j == first ? 0 : 1)) * SLOT;  // a part's slot
#pragma unroll
            for (int i = 0; i < TR; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int row = 16 * i + g8 + 8 * (e >> 1), m = 2 * c + (e & 1);
                    if (whole) write(RT * j + row, m, acc[i][e]);  // walked whole: the outputs
                    else if (m < M) r[row * M + m] = acc[i][e];
                    acc[i][e] = 0.f;
                }
            p_start = 0;
        }
        if (++p == ng) { p = 0; ++j; }
    };
    for (int u = ua; u < ub; u += 2) {
        unit(0, u);
        if (u + 1 == ub) break;
        unit(1, u + 1);
    }
    __syncthreads();
    // tile groups shared by warps: their parts added in warp order
    for (int i = threadIdx.x; i < (t1 - t0) * SLOT; i += NTH) {
        const int jj = i / SLOT, e = i - jj * SLOT;
        const int lo = jj * ng, hi = lo + ng;
        float v = 0.f;
        bool shared = false;
        for (int w = 0; w < NW; ++w) {
            const int wa = (int)((int64_t)U * w / NW), wb = (int)((int64_t)U * (w + 1) / NW);
            if (wa >= hi || wb <= lo || (wa <= lo && wb >= hi)) continue;
            shared = true;
            v += red[(w * 2 + (wa / ng == jj ? 0 : 1)) * SLOT + e];
        }
        if (shared) write(RT * (t0 + jj) + e / M, e % M, v);
    }
}
