#!/usr/bin/env bash
# One H200 call for the fused CUDA Viterbi: bash bench/device/viterbi.sh STEP...
# Steps: sass (build + resource report + SASS of the kernel), tests (CUDA
# Viterbi tests), quick (bench, k = 3 per-tensor only), bench (the full bench),
# vreg (L = 16 compile-time variants: their CUDA tests, then L = 16 timed beside the default),
# ncu (Nsight Compute sections of the L = 16 kernels, bench/device/ncu_viterbi.py), stalls
# (stall reasons, pipes and bank conflicts of the default and the SVARIANTS builds), streams
# (bench/viterbi_cuda.py --ls 16 with the launches on 1 and on 2 streams, VSTREAMS), btw
# (sequences a backtrack block x streams), pair (the pair code's Viterbi beside mul1's).
# The image lacks pydantic (tests/test_trellis.py imports it): carry its wheels in .whl/
# (git-ignored; `carry: [".whl"]`), made here with
#   pip download --no-deps -d .whl --python-version 3.12 --platform manylinux2014_x86_64 \
#     --only-binary=:all: pydantic pydantic-core typing-inspection annotated-types
source bench/device/env.sh  # pipefail, wheels, PYTHONPATH, kernel cache, $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv
for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    sass) nvcc -O3 -arch=sm_90 -fmad=false -Xptxas -v -cubin -o /tmp/v.cubin \
            tqbuild/kernels/viterbi_cuda.cu > "$OUT/ptxas.log" 2>&1
          cuobjdump --dump-sass /tmp/v.cubin > "$OUT/viterbi.sass" 2>&1; wc -l "$OUT/viterbi.sass" ;;
    tests) timeout "${TESTS_S:-300}" python3 -m pytest -q -x tests/test_viterbi_cuda.py \
             tests/test_trellis.py -k "cuda or viterbi or ldlq" 2>&1 | tee "$OUT/pytest.log" | tail -15 ;;
    quick) timeout "${BENCH_S:-300}" python3 bench/viterbi_cuda.py --quick 2>&1 | tee "$OUT/bench.log" \
             | cut -c1-300; cp bench/results/viterbi_cuda-cuda.json "$OUT/" ;;
    bench) timeout "${BENCH_S:-400}" python3 bench/viterbi_cuda.py $BENCH_ARGS 2>&1 | tee "$OUT/bench.log" \
             | cut -c1-300; cp bench/results/viterbi_cuda-cuda*.json "$OUT/" ;;
    vreg) # L = 16 compile-time variants (VVARIANTS: ';'-separated define sets; default: codes
          # in registers, class minima kept instead of backpointers, both): the CUDA tests
          # under each, then bench/viterbi_cuda.py --ls 16 for each beside the default
          # (VTESTS: the define sets whose tests run, default all of VVARIANTS)
          IFS=';' read -ra vs <<< "${VVARIANTS:--DTQ_VIT_REG=1 -DTQ_VIT_HIST=1;-DTQ_VIT_REG=1;-DTQ_VIT_HIST=1}"
          IFS=';' read -ra vts <<< "${VTESTS:-${VVARIANTS:-}}"
          for v in "${vts[@]}"; do
            echo "--- tests with $v"
            TQBUILD_VITERBI_FLAGS="$v" timeout "${TESTS_S:-300}" python3 -m pytest -q -x \
              tests/test_viterbi_cuda.py -k "16" 2>&1 | tail -3
          done
          i=0
          for v in "" "${vs[@]}"; do
            TQBUILD_VITERBI_FLAGS="$v" timeout "${BENCH_S:-300}" python3 bench/viterbi_cuda.py \
              --ls 16 --no-old --tag="-${VTAG:-}v$i" 2>&1 | cut -c1-300
            i=$((i + 1))
          done
          cp bench/results/viterbi_cuda-cuda-"${VTAG:-}"v*.json "$OUT/" ;;
    ncu) # stall reasons, issue rate and memory traffic of the L = 16 kernels (k = NCU_KS)
         timeout "${NCU_S:-200}" ncu --clock-control none -k regex:viterbi_tailbiting \
           --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
           --section ComputeWorkloadAnalysis --section Occupancy --section LaunchStats \
           python3 bench/device/ncu_viterbi.py ${NCU_KS:-2 3 4} > "$OUT/ncu-viterbi.txt" 2>&1
         echo "ncu rc $?"; grep -E "k [0-9] done|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall|Mem Busy|Max Bandwidth|DRAM Throughput|Duration" "$OUT/ncu-viterbi.txt" | head -60 ;;
    stalls) # stall reasons a issued instruction, pipe use and shared-memory bank conflicts of
            # the L = 16 kernels (k = NCU_KS) for each ';'-separated define set in SVARIANTS
            M=regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,gpu__time_duration.sum
            IFS=';' read -ra vs <<< "${SVARIANTS:-}"
            for v in "" "${vs[@]}"; do
              echo "--- stalls with '$v'" >> "$OUT/ncu-stalls.txt"
              TQBUILD_VITERBI_FLAGS="$v" timeout "${NCU_S:-120}" ncu --clock-control none \
                -k regex:viterbi_tailbiting --metrics "$M" python3 bench/device/ncu_viterbi.py \
                ${NCU_KS:-2 3 4} >> "$OUT/ncu-stalls.txt" 2>&1
              echo "stalls '$v' rc $?"
            done ;;
    streams) # launches alternating between 1 and 2 streams (TQBUILD_VITERBI_STREAMS)
           for n in ${VSTREAMS:-1 2}; do
             TQBUILD_VITERBI_STREAMS=$n timeout "${BENCH_S:-300}" python3 bench/viterbi_cuda.py \
               --ls 16 --no-old --tag="-${VTAG:-}s$n" 2>&1 | cut -c1-300
           done
           cp bench/results/viterbi_cuda-cuda-"${VTAG:-}"s*.json "$OUT/" ;;
    pair) # the pair code's CUDA Viterbi (L = 16) beside mul1's, same machine: bare and per tensor
          for code in pair mul1; do
            timeout "$(( ${END_S:-570} - SECONDS ))" python3 bench/viterbi_cuda.py --code $code \
              --ls 16 --no-old --tag="-${VTAG:-}$code" 2>&1 | cut -c1-250
            cp bench/results/viterbi_cuda-cuda-"${VTAG:-}"$code.json "$OUT/"
          done ;;
    btw) # sequences a backtrack block (TQ_VIT_BTW, BTWS) x launch streams (1 = per k, 2):
         # the CUDA tests -k 16 under each non-default BTW, then --ls 16 for each pair
         for w in ${BTWS:-32}; do
           TQBUILD_VITERBI_FLAGS="-DTQ_VIT_BTW=$w" timeout "${TESTS_S:-150}" python3 -m pytest -q -x \
             tests/test_viterbi_cuda.py -k "16" 2>&1 | tail -2
         done
         for pair in ${BTW_RUNS:-4:per 32:per 32:2 4:2}; do
           w=${pair%%:*} n=${pair##*:}
           [ "$n" = per ] && unset TQBUILD_VITERBI_STREAMS || export TQBUILD_VITERBI_STREAMS=$n
           TQBUILD_VITERBI_FLAGS=$([ "$w" = 4 ] || echo "-DTQ_VIT_BTW=$w") \
             timeout "$(( ${END_S:-570} - SECONDS ))" python3 bench/viterbi_cuda.py --ls 16 --no-old \
             --tag="-${VTAG:-}w${w}s$n" 2>&1 | cut -c1-200
           cp bench/results/viterbi_cuda-cuda-"${VTAG:-}"w${w}s$n.json "$OUT/"
         done
         unset TQBUILD_VITERBI_STREAMS ;;
    b8) python3 bench/build_8b_h200.py --limit "${B8_LIMIT:-470}" 2>&1 | tail -3 | cut -c1-1500
        cp bench/results/build_8b-cuda.json "$OUT/"; cp /tmp/b8/events.jsonl "$OUT/" ;;
  esac
done
echo "=== done $(date +%T)"
