#!/usr/bin/env bash
# Submit the scaling benchmark once per node count (one job each, -N n, one rank per node).
#
#   launch/submit_scaling.sh [scaling.py options]          from the repository root
#
# NODE_COUNTS  node counts to submit (default "1 2 4 8 16 32 64")
# Partition, account and time limit: sbatch's own variables, e.g.
#   SBATCH_PARTITION=cpu SBATCH_ACCOUNT=proj SBATCH_TIMELIMIT=0:30:00 launch/submit_scaling.sh
# Output: benchmarks/results/scaling/cluster/nodes-NNN/ and the job logs next to them.
set -euo pipefail
cd "$(dirname "$0")/.."  # the repository root: the jobs' submit dir, where .venv and benchmarks/ are
results=benchmarks/results/scaling/cluster
mkdir -p "$results"  # SLURM does not create the directory of --output
for n in ${NODE_COUNTS:-1 2 4 8 16 32 64}; do
  tag=$(printf 'nodes-%03d' "$n")
  job=$(sbatch --parsable -N "$n" --job-name="ba3c-scaling-$n" --output="$results/$tag-%j.out" \
        launch/scaling.sbatch "$@")
  echo "submitted $tag: job ${job%%;*}"
done
echo "results: $results/nodes-NNN/ (squeue --me to follow)"
