// Tail-biting Viterbi of the pair trellis code (kernels/trellis_codes.py, V = 2) at
// L = 16, bit-identical to kernels/viterbi.py's torch path (`pair_tailbiting`). One
// library: nvcc -fmad=false. Also compiled for the host by the SIMT emulator
// (tests/simt/pair_viterbi_host.cpp): device asm stays behind __CUDACC__.
//
// A step shifts K = 2k bits: C = 2^K predecessors a class, J = 2^(16−K) classes. With
// cost_t[s] = best_{t−1}[s >> K] + dist_t[e(s)] (float32, one add; dist_t[e] = (t0 − x0)²
// + (t1 − x1)² of table entry e, each op rounded) and best_t[j] = min_c cost_t[j + c·J]
// (the smallest c on ties), a thread owns I classes j (same
// j >> K) times CC values of c: its CC best_{t−1} reads serve I classes, and threads
// sharing a class (R = C/CC of them, adjacent lanes) combine their minima by shuffles.
// No state's cost is stored: only best_t (shared memory, two buffers, and global for the
// backtrack, which recomputes a chosen class's C candidate costs to find its argmin — the
// forward keeps none but the last step's).
// dist_t is rebuilt every step into one of two shared tables, each entry 32 times (one
// a lane) at shared address 0x10000 or 0x20000, so a state's lookup is h & 0xFF80 | that
// base + 4·lane (h = s·0x83DCD12D, bits [7, 16) the entry: one IADD a state walks h
// along c) and never conflicts. One barrier a step.
//
// Launches a chunk of sequences: pass 0 over x rolled by P/2 steps (minima kept from step
// P/2 − 1 on), its backtrack (a warp a sequence) to the overlap s_{P/2} >> K; pass 1 with
// s_0's top bits and s_{P−1}'s low bits pinned to it, its backtrack to the step states.
#include <cstdint>
#ifdef __CUDACC__
#include <cuda_runtime.h>
#define TQ_DEV __device__ __forceinline__
#define TQ_GLOBAL __global__
#define TQ_BOUNDS(n) __launch_bounds__(n, 1)
#endif
#include "../runtime/smem_abs.cuh"

namespace {

constexpr int L = 16, S = 1 << L, NT = 1024;  // (the table index: 9 bits)
constexpr uint32_t HMUL = 0x83DCD12Du;          // L − Q = 7: the entry is bits [7, 16) of h
constexpr uint32_t DIST0 = 0x10000, DIST1 = 0x20000;  // the two dist tables' shared addresses
constexpr int DIST_OFF = 0x10000 - 0x400;       // dynamic shared offset of the first
constexpr uint32_t INF_BITS = 0x7F800000u;

TQ_DEV int pad(int j) { return j + (j >> 5); }  // best_t's index (a word every 32: no
                                                // two lanes of a warp on one bank)

#ifdef __CUDACC__
// min(m, v) of non-negative float bit patterns, keep = m <= v (the older, smaller c)
TQ_DEV uint32_t min_keep(uint32_t m, uint32_t v, bool& keep) {
    return (uint32_t)__vibmin_s32((int)m, (int)v, &keep);
}
TQ_DEV uint32_t shfl_xor_u(uint32_t v, int o) { return __shfl_xor_sync(0xFFFFFFFFu, v, o); }
TQ_DEV uint32_t warp_ballot(bool p) { return __ballot_sync(0xFFFFFFFFu, p); }
TQ_DEV int first_lane(uint32_t m) { return __ffs(m) - 1; }
#else
TQ_DEV uint32_t min_keep(uint32_t m, uint32_t v, bool& keep) {
    keep = (int32_t)m <= (int32_t)v;
    return keep ? m : v;
}
TQ_DEV uint32_t shfl_xor_u(uint32_t v, int o) {
    return warp_exchange(v, (int)(threadIdx.x & 31) ^ o);
}
TQ_DEV uint32_t warp_ballot(bool p) {
    uint32_t m = 0;
    for (int l = 0; l < 32; ++l) m |= (warp_exchange((uint32_t)p, l) & 1u) << l;
    return m;
}
TQ_DEV int first_lane(uint32_t m) { return __builtin_ctz(m); }
#endif

// per k: classes a thread (I) x predecessors a thread (CC)
template <int K> struct Tile;
template <> struct Tile<4> { static constexpr int I = 4, CC = 16; };
template <> struct Tile<6> { static constexpr int I = 4, CC = 16; };
template <> struct Tile<8> { static constexpr int I = 4, CC = 16; };

TQ_DEV float fsq(float a) {
#ifdef __CUDACC__
    return __fmul_rn(a, a);
#else
    return a * a;
#endif
}

// dist_t into the table at `tab` (generic pointer), each entry 32 times: thread τ
// writes half of entry τ / 2's copies (16 words)
TQ_DEV void build_dist(uint32_t* tab, float t0, float t1, float x0, float x1) {
#ifdef __CUDACC__
    const float d = __fadd_rn(fsq(__fsub_rn(t0, x0)), fsq(__fsub_rn(t1, x1)));
#else
    const float d = fsq(t0 - x0) + fsq(t1 - x1);
#endif
    const uint32_t b = __float_as_uint(d);
    uint4* dst = reinterpret_cast<uint4*>(tab + 32 * (threadIdx.x >> 1) + 16 * (threadIdx.x & 1));
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = make_uint4(b, b, b, b);
}

template <bool B> struct BoolC { static constexpr bool value = B; };

TQ_DEV float fadd(float a, float b) {
#ifdef __CUDACC__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

}  // namespace

// One pass over every sequence b = blockIdx.x of x [B, T]: PASS 0 over x rolled by P/2
// steps, free ends, args kept for steps ≥ P/2; PASS 1 pinned to overlap[b]. fin[b]: the
// last step's state. hist: [B][P][J] float32, each step's class minima (PASS 0 from step
// P/2 − 1 on; the last step's argmins stay in shared memory).
template <int K, int PASS>
TQ_GLOBAL void TQ_BOUNDS(NT) pair_viterbi_pass(const float* __restrict__ x,
                                               const float* __restrict__ entries, int T,
                                               const int32_t* __restrict__ overlap,
                                               float* __restrict__ hist,
                                               int32_t* __restrict__ fin) {
    constexpr int C = 1 << K, J = S >> K, I = Tile<K>::I, CC = Tile<K>::CC, R = C / CC;
    constexpr int JP = J + J / 32;  // a padded best_t buffer
    TQ_DYN_SMEM;
    float* best = reinterpret_cast<float*>(smem);             // [2][JP]
    float* xs = best + 2 * JP;                                // [T]
    uint8_t* last_arg = reinterpret_cast<uint8_t*>(xs + T);   // [J]: the last step's argmins
    auto dist = [&](int i) { return reinterpret_cast<uint32_t*>(smem + DIST_OFF + i * 0x10000); };
    const int tid = threadIdx.x, lane = tid & 31, b = blockIdx.x, P = T / 2;
    const int shift = PASS == 0 ? 2 * (P / 2) : 0;  // torch.roll of the steps by P/2
    for (int i = tid; i < T; i += NT) xs[(i + shift) % T] = x[(size_t)b * T + i];
    const float t0 = entries[2 * (tid >> 1)], t1 = entries[2 * (tid >> 1) + 1];
    const int ov = PASS == 1 ? overlap[b] : -1;
    // this thread's classes j = σ·C + ig·I + ii and predecessors c = r·CC + cc
    const int r = tid % R, ig = (tid / R) % (C / I), sg = tid / (R * (C / I));
    const int j0 = sg * C + ig * I, c0 = r * CC;
    const uint32_t lanebase = 4u * lane;
    const bool ok = shared_addr(dist(0)) == DIST0;  // the layout's premise (else no output)
    __syncthreads();
    build_dist(dist(0), t0, t1, xs[0], xs[1]);
    __syncthreads();
    float* hb = hist + (size_t)b * P * J;
    // one step: FIRST = step 0 (no predecessor costs; PASS 1 pins s_0 >> K to ov); TRACK =
    // the last step, whose argmins are kept (the backtrack recomputes the others'); the
    // others only take each class's minimum (IADD, LOP3, LDS, FADD, IMNMX a state)
    auto step = [&](int t, auto first, auto track) {
        constexpr bool FIRST = decltype(first)::value, TRACK = decltype(track)::value;
        const uint32_t lb = (t & 1 ? DIST1 : DIST0) | lanebase;
        const float* bp = best + (t & 1 ? 0 : JP);  // best_{t−1}
        float* bn = best + (t & 1 ? JP : 0);        // best_t
        uint32_t m[I];
        int a[I];
#pragma unroll
        for (int ii = 0; ii < I; ++ii) { m[ii] = INF_BITS; a[ii] = 0; }
        uint32_t h0 = (uint32_t)(j0 + c0 * J) * HMUL;
#pragma unroll 2
        for (int cc = 0; cc < CC; ++cc) {
            const int c = c0 + cc;
            const int pj = sg + c * (J / C);  // the predecessor class of every s = j + c·J
            float bv;
            if constexpr (FIRST)
                bv = PASS == 1 && pj != ov ? __uint_as_float(INF_BITS) : 0.f;
            else
                bv = bp[pad(pj)];
            uint32_t h = h0;
#pragma unroll
            for (int ii = 0; ii < I; ++ii) {
                const float d = __uint_as_float(lds_abs((h & 0xFF80u) | lb));
                const uint32_t v = __float_as_uint(fadd(bv, d));
                if constexpr (TRACK) {
                    bool keep;
                    m[ii] = min_keep(m[ii], v, keep);
                    a[ii] = keep ? a[ii] : c;
                } else {
                    m[ii] = min((int32_t)m[ii], (int32_t)v);  // costs ≥ 0: bits order as ints
                }
                h += HMUL;
            }
            h0 += (uint32_t)J * HMUL;
        }
#pragma unroll
        for (int o = 1; o < R; o <<= 1) {  // lanes r, r ^ o: the lower r holds smaller c
#pragma unroll
            for (int ii = 0; ii < I; ++ii) {
                const uint32_t mo = shfl_xor_u(m[ii], o);
                if constexpr (TRACK) {
                    const int ao = (int)shfl_xor_u((uint32_t)a[ii], o);
                    const bool mine = (r & o) ? (int32_t)m[ii] < (int32_t)mo
                                              : (int32_t)m[ii] <= (int32_t)mo;
                    m[ii] = mine ? m[ii] : mo;
                    a[ii] = mine ? a[ii] : ao;
                } else {
                    m[ii] = min((int32_t)m[ii], (int32_t)mo);
                }
            }
        }
        if (r == 0) {
#pragma unroll
            for (int ii = 0; ii < I; ++ii) bn[pad(j0 + ii)] = __uint_as_float(m[ii]);
            if constexpr (TRACK) {
#pragma unroll
                for (int ii = 0; ii < I; ++ii) last_arg[j0 + ii] = (uint8_t)a[ii];
            } else if (PASS == 1 || t >= P / 2 - 1) {  // the minima the backtrack reads
#pragma unroll
                for (int ii = 0; ii < I; ++ii) hb[(size_t)t * J + j0 + ii] = __uint_as_float(m[ii]);
            }
        }
        if (t + 1 < P) build_dist(dist((t + 1) & 1), t0, t1, xs[2 * t + 2], xs[2 * t + 3]);
        __syncthreads();
    };
    if (P == 1) {
        step(0, BoolC<true>{}, BoolC<true>{});
    } else {
        step(0, BoolC<true>{}, BoolC<false>{});
        for (int t = 1; t < P - 1; ++t) step(t, BoolC<false>{}, BoolC<false>{});
        step(P - 1, BoolC<false>{}, BoolC<true>{});
    }
    const float* bl = best + ((P - 1) & 1 ? JP : 0);  // best_{P−1}
    if constexpr (PASS == 1) {
        if (tid == 0) fin[b] = ok ? ov + (int)last_arg[ov] * J : -1;
        return;
    }
    // free end: the smallest state among the least costs, s = j + arg·J
    uint32_t bm = INF_BITS + 1;  // above every cost (inf included)
    int bs = 0x7FFFFFFF;
    for (int j = tid; j < J; j += NT) {
        const uint32_t v = __float_as_uint(bl[pad(j)]);
        const int s = j + (int)last_arg[j] * J;
        if ((int32_t)v < (int32_t)bm || (v == bm && s < bs)) { bm = v; bs = s; }
    }
    for (int o = 16; o; o >>= 1) {
        const uint32_t vo = shfl_xor_u(bm, o);
        const int so = (int)shfl_xor_u((uint32_t)bs, o);
        if ((int32_t)vo < (int32_t)bm || (vo == bm && so < bs)) { bm = vo; bs = so; }
    }
    __syncthreads();
    uint32_t* red = reinterpret_cast<uint32_t*>(xs);  // [32][2] (x is no longer needed)
    if (lane == 0) { red[2 * (tid >> 5)] = bm; red[2 * (tid >> 5) + 1] = (uint32_t)bs; }
    __syncthreads();
    if (tid == 0) {
        for (int w = 1; w < NT / 32; ++w) {
            const uint32_t vo = red[2 * w];
            const int so = (int)red[2 * w + 1];
            if ((int32_t)vo < (int32_t)bm || (vo == bm && so < bs)) { bm = vo; bs = so; }
        }
        fin[b] = ok ? bs : -1;
    }
}

// The walk back, a warp a sequence (BW a block): s_{t−1} = j + c·J with j = s_t >> K and c
// the first predecessor whose cost, recomputed with the forward's float32 operations
// (best_{t−2} of its class + dist_{t−1} of its entry; at step 0 the pinned start), equals
// best_{t−1}[j]. PASS 0: to step P/2, overlap[b] = s_{P/2} >> K; PASS 1 (reading overlap[b]
// for the pinned start): every step state
// into steps [B, P].
constexpr int BW = 4;
template <int K, int PASS>
TQ_GLOBAL void TQ_BOUNDS(32 * BW) pair_viterbi_back(const float* __restrict__ x,
                                                    const float* __restrict__ entries,
                                                    const float* __restrict__ hist, int T,
                                                    int B, const int32_t* __restrict__ fin,
                                                    int32_t* __restrict__ overlap,
                                                    int64_t* __restrict__ steps) {
    constexpr int C = 1 << K, J = S >> K, CL = C < 32 ? C : 32;  // candidates a lane pass
    const int lane = threadIdx.x & 31, b = blockIdx.x * BW + (threadIdx.x >> 5);
    if (b >= B) return;
    const int P = T / 2, shift = PASS == 0 ? 2 * (P / 2) : 0;
    const float* hb = hist + (size_t)b * P * J;
    const float* xb = x + (size_t)b * T;
    int s = fin[b];
    if (s < 0) {  // the pass had no valid layout: mark the output invalid
        if (lane == 0) {
            if (PASS == 0) overlap[b] = 0;
            else for (int t = 0; t < P; ++t) steps[(size_t)b * P + t] = -1;
        }
        return;
    }
    const int ov = PASS == 1 ? overlap[b] : -1;
    if (PASS == 1 && lane == 0) steps[(size_t)b * P + P - 1] = s;
    const int stop = PASS == 0 ? P / 2 : 0;
    for (int t = P - 1; t > stop; --t) {
        const int j = s >> K, u = t - 1;  // find s_u, u = t − 1
        const float target = hb[(size_t)u * J + j];
        // x of step u (the rolled sequence in PASS 0: element i sits at (i + shift) % T)
        const float x0 = xb[(2 * u - shift + T) % T], x1 = xb[(2 * u + 1 - shift + T) % T];
        int found = -1;
        for (int c0 = 0; c0 < C && found < 0; c0 += CL) {
            const int c = c0 + lane;
            bool hit = false;
            if (lane < CL) {
                const uint32_t p = (uint32_t)(j + c * J);
                const int e = (int)(((p * HMUL) >> 7) & 511);
#ifdef __CUDACC__
                const float d = __fadd_rn(fsq(__fsub_rn(entries[2 * e], x0)),
                                          fsq(__fsub_rn(entries[2 * e + 1], x1)));
#else
                const float d = fsq(entries[2 * e] - x0) + fsq(entries[2 * e + 1] - x1);
#endif
                float bv;
                if (u == 0)
                    bv = PASS == 1 && (int)(p >> K) != ov ? __uint_as_float(INF_BITS) : 0.f;
                else
                    bv = hb[(size_t)(u - 1) * J + (p >> K)];
                hit = __float_as_uint(fadd(bv, d)) == __float_as_uint(target);
            }
            const uint32_t mask = warp_ballot(hit);
            if (mask) found = c0 + first_lane(mask);
        }
        if (found < 0) {  // no candidate reproduces the minimum (cannot happen): say so
            if (lane == 0) {
                if (PASS == 0) overlap[b] = 0;
                else for (int v = 0; v <= u; ++v) steps[(size_t)b * P + v] = -1;
            }
            return;
        }
        s = j + found * J;
        if (PASS == 1 && lane == 0) steps[(size_t)b * P + u] = s;
    }
    if (PASS == 0 && lane == 0) overlap[b] = s >> K;
}

#ifdef __CUDACC__
namespace {
// the two dist tables end the plan; below them best, x and the last args (low_fits)
constexpr size_t SMEM_BYTES = (size_t)DIST_OFF + 2 * 0x10000;
template <int K>
bool low_fits(int T) {
    constexpr int J = S >> K;
    return (size_t)(2 * (J + J / 32)) * 4 + (size_t)T * 4 + J <= (size_t)DIST_OFF;
}

template <int K>
int run(const float* x, const float* entries, int B, int T, float* hist, int32_t* fin,
        int32_t* ov, int64_t* steps, cudaStream_t st) {
    if (!low_fits<K>(T)) return -2;
    const size_t smem = SMEM_BYTES;
    cudaError_t e = cudaFuncSetAttribute(pair_viterbi_pass<K, 0>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(pair_viterbi_pass<K, 1>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return (int)e;
    const int nb = (B + BW - 1) / BW;
    pair_viterbi_pass<K, 0><<<B, NT, smem, st>>>(x, entries, T, nullptr, hist, fin);
    pair_viterbi_back<K, 0><<<nb, 32 * BW, 0, st>>>(x, entries, hist, T, B, fin, ov, nullptr);
    pair_viterbi_pass<K, 1><<<B, NT, smem, st>>>(x, entries, T, ov, hist, fin);
    pair_viterbi_back<K, 1><<<nb, 32 * BW, 0, st>>>(x, entries, hist, T, B, fin, ov, steps);
    return (int)cudaGetLastError();
}
}  // namespace

extern "C" {

// global scratch bytes a sequence: the class minima of P steps, its final state and overlap
int64_t tq_pair_viterbi_scratch(int k, int T) {
    return (int64_t)(T / 2) * (S >> (2 * k)) * 4 + 8;
}

// x [B, T] float32 -> step states [B, T/2] int64 (both passes, four launches);
// entries: the 512 value pairs (float32 [512, 2]); scratch: B · tq_pair_viterbi_scratch
int tq_pair_viterbi(const float* x, const float* entries, int B, int T, int k, uint8_t* scratch,
                    int64_t* steps, void* stream) {
    auto st = (cudaStream_t)stream;
    float* hist = reinterpret_cast<float*>(scratch);
    int32_t* fin = reinterpret_cast<int32_t*>(scratch + (size_t)B * (T / 2) * (S >> (2 * k)) * 4);
    int32_t* ov = fin + B;
    if (k == 2) return run<4>(x, entries, B, T, hist, fin, ov, steps, st);
    if (k == 3) return run<6>(x, entries, B, T, hist, fin, ov, steps, st);
    if (k == 4) return run<8>(x, entries, B, T, hist, fin, ov, steps, st);
    return -1;
}

}  // extern "C"
#endif
