set -u
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
(cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-gpu -j16 > $OUT/build.log 2>&1) || { tail -30 $OUT/build.log; exit 1; }
rm -f $OUT/build.log
S=./build-gpu/tools/stepgraph
timeout 70 $S ab --max-seqs 1 --a gemm=cublas --b gemm=mixed --reps 5 --json $OUT/ab-gemm-b1.json > $OUT/ab-gemm-b1.log 2>&1; echo "== ab gemm b=1 rc=$? ($(( $(date +%s)-t0 )) s)"; grep -E "whole step|_proj|lm_head|mlp\.|summary" $OUT/ab-gemm-b1.log | cut -c1-140 | head -12
timeout 60 ./build-gpu/tests/tests_gpu "[skinny]" 2>&1 | tail -2
timeout 60 $S ab --a postconv=fast --b postconv=token_tile --reps 5 --json $OUT/ab-postconv.json --svg $OUT/ab-postconv.svg > $OUT/ab-postconv.log 2>&1; echo "== ab postconv rc=$? ($(( $(date +%s)-t0 )) s)"; sed -n '/A median/,$p' $OUT/ab-postconv.log | cut -c1-130 | head -30
for arm in k4 k4x2; do
timeout 75 $S ab --phase prefill --a conv.fwd=register --b conv.fwd=$arm --reps 3 --json $OUT/ab-convfwd-$arm.json > $OUT/ab-convfwd-$arm.log 2>&1; echo "== ab conv.fwd $arm rc=$? ($(( $(date +%s)-t0 )) s)"; grep -E "whole step|conv|tokens of|logits" $OUT/ab-convfwd-$arm.log | cut -c1-130
done
timeout 70 $S soak --preset tiny --replays 100000 --json $OUT/soak-tiny.json > $OUT/soak.log 2>&1; echo "== soak rc=$? ($(( $(date +%s)-t0 )) s)"; tail -4 $OUT/soak.log
timeout 40 compute-sanitizer --tool synccheck --error-exitcode 99 ./build-gpu/tests/tests_gpu "[skinny]" > $OUT/synccheck.log 2>&1; echo "synccheck skinny rc=$? $(grep 'ERROR SUMMARY' $OUT/synccheck.log | tail -1)"
echo "total $(( $(date +%s)-t0 )) s"
