"""Writes runtime/pair_gemv.cu with every pair_rows instance in packed fp16 (session 28's
cc3dec6: one HFMA2 a step and token instead of an IDP2A), for `bench/pair_gemv.py
--ab-source` (timing only; its emulator test is in cc3dec6). Each edit must apply once,
so a drifted source fails here instead of timing something else.

    python3 bench/device/fp16_rows_variant.py tqbuild/runtime/pair_gemv_s30fp16rows.cu
"""

from __future__ import annotations

import sys
from pathlib import Path

SOURCE = Path(__file__).parents[2] / "tqbuild" / "runtime" / "pair_gemv.cu"

PERIOD_HEAD = """                        float (&facc)[RB][M], bool on = true) {
    const int g = group_of(p, ppb);
"""
# rows_period's fp16 body, before its int8 one (which it returns ahead of)
PERIOD_HALF = """    {
        uint32_t hacc[RB][M];
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
            for (int m = 0; m < M; ++m) hacc[r][m] = 0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            uint32_t xw[M][8];
#pragma unroll
            for (int m = 0; m < M; ++m) group_words(xq + (m * ng + g) * gsw + 8 * (1 - h), xw[m]);
#pragma unroll
            for (int v = 8 * h; v < 8 * h + 8; ++v) {
#pragma unroll
                for (int r = 0; r < RB; ++r) {
                    const uint32_t e = lds_abs(((window(w[r], v) * HMUL) & AMASK) | lane4);
#pragma unroll
                    for (int m = 0; m < M; ++m)
                        hacc[r][m] = hfma2(e, xw[m][7 - (v & 7)], hacc[r][m]);
                }
            }
        }
#pragma unroll
        for (int m = 0; m < M; ++m) {
            const float gm = on ? gs[m * ng + g] : 0.f;
#pragma unroll
            for (int r = 0; r < RB; ++r)
                facc[r][m] = fmaf(gm, f16_bits_float(hacc[r][m] & 0xFFFF) +
                                          f16_bits_float(hacc[r][m] >> 16), facc[r][m]);
        }
        return;
    }
"""
EDITS = [
    (PERIOD_HEAD, PERIOD_HEAD + PERIOD_HALF),
    ("    load_table<NTH>(table, smem);\n", "    load_table<NTH, true>(table, smem);\n"),
    ("quantize_slots<false, NTH == 512 ? 4 : 1>(", "quantize_slots<true, NTH == 512 ? 4 : 1>("),
    ("return rows_smem(M, n, RB, NTH, g); });",
     "return rows_smem(M, n, RB, NTH, g); }, 20, GSW_HALF);"),
    ("return rows_smem(M, n, rb, nth, GSW_TIGHT); }",
     "return rows_smem(M, n, rb, nth, GSW_HALF); }"),
]


def variant(src: str) -> str:
    for old, new in EDITS:
        if src.count(old) != 1:
            raise SystemExit(f"{SOURCE}: {old[:60]!r} found {src.count(old)} times, not once")
        src = src.replace(old, new)
    return ("// session 30's A/B variant: every pair_rows instance in packed fp16 (session 28's "
            "cc3dec6)\n" + src)


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(variant(SOURCE.read_text()))
