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
// Words: staged. A warp's work is a run of chunks — a tile group (16·TR rows) × TC_CP
// periods — and it copies each chunk's words into its own shared-memory buffer by
// cp.async (each row's TC_CP·k words in 16-byte pieces, coalesced, and the one word after
// them: the next period's first, the block's first after a block's last period), one
// chunk ahead of the one it decodes (two buffers a warp). Lanes then read their two
// words a row from shared memory: a staged row takes TC_RS ≡ 4 (mod 8) words, so the
// eight rows of a warp's load sit 4 banks apart and the load meets each bank once.
// (Session 26's form read them from global memory lane by lane — 16 rows × 12 bytes a
// warp's load — and ran at a quarter of its issue rate.)
//
// Work: a block owns an even split of the tile groups; its chunks are split evenly
// over its warps (every lane of a warp on the same unit: the MMA needs the warp
// converged). A warp writes a tile group it walked whole; a group shared by warps gets
// their sums from shared memory (two slots a warp: its first group and its last), added
// in warp order.
#pragma once

namespace {

constexpr int TC_CP = K == 4 ? 4 : 8;  // periods a chunk (TC_CP·k words: whole 16-byte pieces)
constexpr int TC_P16 = TC_CP * K / 4;   // a staged row's 16-byte pieces (then one 4-byte word)
constexpr int TC_RS = (TC_CP * K + 1 + 3) / 8 * 8 + 4;  // words a staged row: ≥ TC_CP·k + 1, ≡ 4 mod 8
static_assert(TC_CP * K % 4 == 0 && TC_RS % 8 == 4 && TC_RS >= TC_CP * K + 1, "staged rows");

// shared memory of a launch, in bytes: below the table the warps' staging buffers (two
// chunks of 16·TR rows each) and the tokens' scales; after the table x as fp16, then the
// warps' partial sums
TQ_DEV __host__ constexpr int tc_stage_bytes(int nth, int tr) { return nth / 32 * 2 * 16 * tr * TC_RS * 4; }
TQ_DEV __host__ constexpr int tc_low_bytes(int M, int nth, int tr) {
    return tc_stage_bytes(nth, tr) + ((M + 1) * (nth / 32) + M) * 4;
}

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
TQ_DEV void cp_async16(void* dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_addr(dst)), "l"(src)
                 : "memory");
}
TQ_DEV void cp_async4(void* dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(shared_addr(dst)), "l"(src)
                 : "memory");
}
TQ_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
TQ_DEV void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
#else
TQ_DEV void mma_f16(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    const uint32_t b[2] = {b0, b1};
    mma16816<1>(acc, a, b);
}
TQ_DEV uint32_t half2_bits(float lo, float hi) {
    return (uint32_t)simt::f16_round(lo) | (uint32_t)simt::f16_round(hi) << 16;
}
TQ_DEV uint4 lds128(const uint32_t* p) { return ld128(p); }
TQ_DEV void cp_async16(void* dst, const void* src) { simt::async_copy(dst, src, 16); }
TQ_DEV void cp_async4(void* dst, const void* src) { simt::async_copy(dst, src, 4); }
TQ_DEV void cp_async_commit() { simt::async_commit(); }
template <int N>
TQ_DEV void cp_async_wait() { simt::async_wait(N); }
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
// its x fragment shared by TR tiles' MMAs. n a multiple of 32·TC_CP, blocks of T ≥ 32·TC_CP
// weights (ppb ≥ TC_CP: a chunk lies in one block), words 16-byte aligned.
template <int M, int NTH, int TR>
TQ_GLOBAL void TQ_BOUNDS(NTH) pair_rows_tc(const uint32_t* __restrict__ words,
                                           const uint16_t* __restrict__ scales,
                                           const uint32_t* __restrict__ table, const void* x,
                                           int dt, Out out, int rows, int n, int ppb,
                                           float factor, int nblocks) {
    TQ_DYN_SMEM;
    constexpr int NW = NTH / 32, RT = 16 * TR, SLOT = RT * M;  // SLOT: floats a part
    constexpr int BUF = RT * TC_RS;                             // words a staged chunk
    static_assert(NW >= M, "a warp a token's max");
    static_assert(tc_low_bytes(M, NTH, TR) <= TAB_OFF, "the staging below the table");
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, c = lane & 3;
    const int ng = n >> 5, nw = ng * K, ts = tc_token_words(n), cpr = ng / TC_CP;
    uint32_t* stage = reinterpret_cast<uint32_t*>(smem) + warp * 2 * BUF;  // [2][RT][TC_RS]
    float* wmax = reinterpret_cast<float*>(smem + tc_stage_bytes(NTH, TR));  // [M + 1][NW]
    float* xinv = wmax + (M + 1) * NW;                                        // [M]
    uint32_t* xh = reinterpret_cast<uint32_t*>(smem + XQ_OFF);  // [M][ts]
    float* red = reinterpret_cast<float*>(xh + M * ts);        // [NW][2][RT][M]
    const int tiles = (rows + RT - 1) / RT, b = blockIdx.x;
    const int t0 = (int)((int64_t)tiles * b / nblocks), t1 = (int)((int64_t)tiles * (b + 1) / nblocks);
    const int C = (t1 - t0) * cpr;  // the block's chunks: tile group t0 + cc / cpr, periods
    const int ca = (int)((int64_t)C * warp / NW), cb = (int)((int64_t)C * (warp + 1) / NW);
    const int wi = (8 * K * c) >> 5, sh = (8 * K * c) & 31;
    // the lane's staging copies: copy q = lane + 32·i of a chunk is piece pc of staged row
    // r — a 16-byte piece at word 4·pc, or (pc == TC_P16) the word after the chunk
    constexpr int NCP = RT * (TC_P16 + 1), CPL = (NCP + 31) / 32;
    int c_row[CPL], c_dst[CPL], c_src[CPL];  // c_src −1: the word after the chunk
#pragma unroll
    for (int i = 0; i < CPL; ++i) {
        const int q = lane + 32 * i, r = q / (TC_P16 + 1), pc = q - r * (TC_P16 + 1);
        c_row[i] = q < NCP ? r : -1;
        c_dst[i] = r * TC_RS + (pc < TC_P16 ? 4 * pc : TC_CP * K);
        c_src[i] = pc < TC_P16 ? 4 * pc : -1;
    }
    // chunk (tile group j, periods p0 …) into buffer s: its rows' TC_CP·k words, then the
    // next period's first word (the block's first at a block's end); rows past the last
    // are the last row again. Every lane commits a group, empty (j < 0) or not.
    auto stage_chunk = [&](int j, int p0, int s) {
        if (j >= 0) {
            const int nxt = K * (((p0 + TC_CP) & (ppb - 1)) == 0 ? p0 + TC_CP - ppb : p0 + TC_CP);
            uint32_t* dst = stage + s * BUF;
#pragma unroll
            for (int i = 0; i < CPL; ++i) {
                if (c_row[i] < 0) continue;
                const uint32_t* src = words + (size_t)min(RT * j + c_row[i], rows - 1) * nw;
                if (c_src[i] >= 0) cp_async16(dst + c_dst[i], src + K * p0 + c_src[i]);
                else cp_async4(dst + c_dst[i], src + nxt);
            }
        }
        cp_async_commit();
    };
    // a position in the warp's chunks: tile group j, chunk c8 of its rows
    struct Pos {
        int j, c8;
    };
    auto advance = [&](Pos& q) {
        if (++q.c8 == cpr) { q.c8 = 0; ++q.j; }
    };
    const Pos start{t0 + ca / cpr, ca % cpr};
    Pos ld = start;  // the next chunk to stage
    stage_chunk(ca < cb ? ld.j : -1, ld.c8 * TC_CP, 0);
    advance(ld);
    stage_chunk(ca + 1 < cb ? ld.j : -1, ld.c8 * TC_CP, 1);
    advance(ld);
    load_table<NTH>(table, smem);
    pdl_wait();  // x: the kernel before this one's (under PDL; the words on their way)
    pdl_trigger();
    tc_inputs<M, NTH>(x, dt, n, xh, ts, wmax, xinv);
    __syncthreads();
    const uint32_t tb = shared_addr(smem + TAB_OFF);
    if (tb != TAB) {  // the layout's premise (dynamic shared memory at 0x400) does not hold
        cp_async_wait<0>();
        for (int i = blockIdx.x * NTH + threadIdx.x; i < M * rows; i += nblocks * NTH)
            put(out, i, __int_as_float(0x7FC00000));
        return;
    }
    const uint32_t lane4 = tb | (4u * lane);
    const uint32_t* xg = xh + min(g8, M - 1) * ts + 4 * c;  // this lane's token's words
    const int first = t0 + ca / cpr;  // the warp's first tile group
    float acc[TR][4];
#pragma unroll
    for (int i = 0; i < TR; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    auto write = [&](int row, int m, float v) {
        if (row < rows && m < M) put(out, (size_t)m * rows + row, v * xinv[m] * half_of(scales, row) * factor);
    };
    Pos dc = start;  // the chunk decoded
    for (int cc = ca; cc < cb; ++cc) {
        cp_async_wait<1>();  // this chunk's copies landed (the next may be on its way)
        __syncwarp();        // … every lane's
        const int sel = (cc - ca) & 1, j = dc.j, c8 = dc.c8, p0 = c8 * TC_CP;
        // period p0 + dp meets group G0 − dp (a chunk lies in one block: ppb ≥ TC_CP); the
        // lane's words of row g8 at pa[K·dp] and pa[K·dp + 1] — at a block's last period
        // the next word is the staged one after the chunk, which holds the block's first
        const int pb0 = p0 & (ppb - 1);
        const uint32_t* xc = xg + (p0 - 2 * pb0 + ppb - 1) * 16;
        const uint32_t* pa = stage + sel * BUF + g8 * TC_RS + wi;
#pragma unroll
        for (int dp = 0; dp < TC_CP; ++dp) {
            const uint4 xb = lds128(xc - 16 * dp);
            uint32_t ea[TR][4], eb[TR][4];
#pragma unroll
            for (int i = 0; i < TR; ++i) {
                const uint32_t* ra = pa + 16 * i * TC_RS + K * dp;
                tc_entries(ra[0], ra[1], sh, lane4, ea[i]);
                tc_entries(ra[8 * TC_RS], ra[8 * TC_RS + 1], sh, lane4, eb[i]);
            }
#pragma unroll
            for (int i = 0; i < TR; ++i) {
                const uint32_t a0[4] = {ea[i][0], eb[i][0], ea[i][1], eb[i][1]};
                const uint32_t a1[4] = {ea[i][2], eb[i][2], ea[i][3], eb[i][3]};
                mma_f16(acc[i], a0, xb.x, xb.y);
                mma_f16(acc[i], a1, xb.z, xb.w);
            }
        }
        __syncwarp();  // every lane is done with the buffer before it takes chunk cc + 2
        stage_chunk(cc + 2 < cb ? ld.j : -1, ld.c8 * TC_CP, sel);
        advance(ld);
        if (c8 == cpr - 1 || cc == cb - 1) {  // the end of this warp's part of tile group j
            const bool whole = c8 == cpr - 1 && (j != first || start.c8 == 0);
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
        }
        advance(dc);
    }
    cp_async_wait<0>();
    __syncthreads();
    // tile groups shared by warps: their parts added in warp order
    for (int i = threadIdx.x; i < (t1 - t0) * SLOT; i += NTH) {
        const int jj = i / SLOT, e = i - jj * SLOT;
        const int lo = jj * cpr, hi = lo + cpr;
        float v = 0.f;
        bool shared = false;
        for (int w = 0; w < NW; ++w) {
            const int wa = (int)((int64_t)C * w / NW), wb = (int)((int64_t)C * (w + 1) / NW);
            if (wa >= hi || wb <= lo || (wa <= lo && wb >= hi)) continue;
            shared = true;
            v += red[(w * 2 + (wa / cpr == jj ? 0 : 1)) * SLOT + e];
        }
        if (shared) write(RT * (t0 + jj) + e / M, e % M, v);
    }
}
