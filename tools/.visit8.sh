set -u
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-gpu -j16 > $OUT/build.log 2>&1) || { tail -30 $OUT/build.log; exit 1; }
rm -f $OUT/build.log; echo "build $(( $(date +%s)-t0 )) s"
S=./build-gpu/tools/stepgraph
for b in 32 16; do
timeout 45 $S ab --max-seqs $b --a gemm=cublas --b gemm=mixed --reps 5 --json $OUT/ab-gemm-b$b.json > $OUT/ab-gemm-b$b.log 2>&1; echo "== ab gemm mixed b=$b rc=$? ($(( $(date +%s)-t0 )) s)"; grep -E "whole step|lm_head|summary" $OUT/ab-gemm-b$b.log | cut -c1-140
done
timeout 100 ./build-gpu/tests/tests_gpu "[gemm],[skinny],[manifest],[bf16]" > $OUT/tests.log 2>&1; echo "tests rc=$? $(tail -2 $OUT/tests.log | tr '\n' ' ') ($(( $(date +%s)-t0 )) s)"; grep -B3 -A12 FAILED $OUT/tests.log | head -30
