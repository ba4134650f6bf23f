#!/usr/bin/env bash
# Install a local SLURM (slurmctld, slurmd, sbatch, ...) and munge from Debian's apt, so that
# tests/multirank/test_slurm.py can run sbatch jobs against a one-node cluster on localhost.
# Idempotent: does nothing when slurmctld is already installed. Needs root (a CI box).
set -euo pipefail
if command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ]; then
  echo "install_slurm_local.sh: slurm already installed ($(command -v slurmctld || echo /usr/sbin/slurmctld))"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_slurm_local.sh: no apt-get here; install slurm-wlm and munge with your package manager" >&2
  exit 2
fi
export DEBIAN_FRONTEND=noninteractive  # no debconf prompts on a CI box
apt-get update -qq
apt-get install -y -qq slurm-wlm munge
echo "install_slurm_local.sh: installed $(slurmctld -V)"
