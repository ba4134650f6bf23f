#!/usr/bin/env bash
# The node model's anchor and the scaling benchmark on a many-core machine, as one prepared script
# (docs/results/scaling.md says why). Most important first: the train step at 1 and 16 threads
# (device16.json: copy it over benchmarks/results/step_time/device16.json, then rerun
# `python -m benchmarks.scaling --analyze-only benchmarks/results/scaling/scaling.json` and `python -m benchmarks.plan`),
# then 1 and 16 ranks, one fat rank, the no-exchange control at 16, so a run cut short by the
# device's time limit still answers the main question. Results go to $OUT (JSON + log per part).
set -u
OUT=${OUT:-/tmp/out}
THREADS=${THREADS:-$(nproc)}
timeout "${STEP_TIMEOUT:-240}" python3 -m benchmarks.step_time --threads "1,$THREADS" --batches 32,128,512 \
  --rounds 3 --repeats 1 --out "$OUT" --name device16 > "$OUT/step_time.log" 2>&1
tail -12 "$OUT/step_time.log"
common=(--seconds "${SECONDS_PER_RUN:-12}" --warmup "${WARMUP:-5}" --reps 10 --out "$OUT")
timeout "${PART1_TIMEOUT:-330}" python3 -m benchmarks.scaling "${common[@]}" --name scaling-16core-part1 \
  --ranks 1,16 --layouts core,fat --fat-ranks 1 --control-ranks 16 --sweep-ranks 16 > "$OUT/part1.log" 2>&1
tail -15 "$OUT/part1.log"
timeout "${PART2_TIMEOUT:-200}" python3 -m benchmarks.scaling "${common[@]}" --name scaling-16core-part2 \
  --ranks 2,4,8 --layouts core,fat --fat-ranks 2,4 --control-ranks "" --sweep-ranks 2,4 > "$OUT/part2.log" 2>&1
tail -15 "$OUT/part2.log"
