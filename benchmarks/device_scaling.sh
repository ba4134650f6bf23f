#!/usr/bin/env bash
# The scaling benchmark on a 16-core machine, as one prepared script (docs/results/scaling.md says why).
# Most important points first (1 and 16 ranks, one fat rank, the no-exchange control at
# 16), so a run cut short by the
# device's time limit still answers the main question. Results go to $OUT (JSON + log per part).
set -u
OUT=${OUT:-/tmp/out}
common=(--seconds "${SECONDS_PER_RUN:-12}" --warmup "${WARMUP:-5}" --reps 10 --out "$OUT")
timeout "${PART1_TIMEOUT:-330}" python3 -m benchmarks.scaling "${common[@]}" --name scaling-16core-part1 \
  --ranks 1,16 --layouts core,fat --fat-ranks 1 --control-ranks 16 --sweep-ranks 16 > "$OUT/part1.log" 2>&1
tail -15 "$OUT/part1.log"
timeout "${PART2_TIMEOUT:-200}" python3 -m benchmarks.scaling "${common[@]}" --name scaling-16core-part2 \
  --ranks 2,4,8 --layouts core,fat --fat-ranks 2,4 --control-ranks "" --sweep-ranks 2,4 > "$OUT/part2.log" 2>&1
tail -15 "$OUT/part2.log"
