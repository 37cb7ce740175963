set -u
export PATH=/usr/local/cuda/bin:$PATH
echo "commit $(git rev-parse --short HEAD) + $(git status --porcelain | wc -l) changed"
t0=$(date +%s)
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-gpu -j16 > $OUT/build.log 2>&1) || { tail -30 $OUT/build.log; exit 1; }
rm -f $OUT/build.log; echo "build $(( $(date +%s)-t0 )) s"
S=./build-gpu/tools/stepgraph
timeout 280 ./build-gpu/tests/tests_gpu > $OUT/tests_gpu.log 2>&1; echo "tests_gpu rc=$? $(tail -3 $OUT/tests_gpu.log | tr '\n' ' ') ($(( $(date +%s)-t0 )) s)"
grep -B3 -A15 "FAILED" $OUT/tests_gpu.log | head -40
timeout 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 ./build-gpu/tests/tests_gpu "[skinny]" > $OUT/memcheck.log 2>&1; echo "memcheck skinny rc=$? $(grep 'ERROR SUMMARY' $OUT/memcheck.log | tail -1)"
timeout 60 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 99 ./build-gpu/tests/tests_gpu "[skinny]" > $OUT/racecheck.log 2>&1; echo "racecheck skinny rc=$? $(grep 'RACECHECK SUMMARY' $OUT/racecheck.log | tail -1)"
for b in 1 8; do
  timeout 90 $S ab --max-seqs $b --a gemm=cublas --b gemm=mixed --reps 5 --json $OUT/ab-gemm-b$b.json > $OUT/ab-gemm-b$b.log 2>&1; echo "== ab gemm b=$b rc=$? ($(( $(date +%s)-t0 )) s)"; grep -E "whole step|_proj|lm_head|mlp\.|tokens of|logits bytes" $OUT/ab-gemm-b$b.log | cut -c1-140 | head -12
done
timeout 60 $S capture --phase both --json $OUT/capture.json > $OUT/capture.log 2>&1; echo "== capture rc=$?"; tail -14 $OUT/capture.log | cut -c1-150
echo "total $(( $(date +%s)-t0 )) s"
