"""The only module that imports horovod or mpi4py: rank, size, gradient averaging, broadcast, gather.

Three backends behind one interface:
* `horovod`: gradients averaged inside the compiled train step, by one `hvd.allreduce` per
  gradient (each starts as soon as backprop produces its gradient) or one
  `hvd.grouped_allreduce` after the last (both Keras-3-safe, see ../shared/facts.md);
  optionally in float16 (`hvd.Compression.fp16`);
* `mpi`: mpi4py, one flattened buffer, `Allreduce` with the uppercase buffer API (float32), or
  for float16 an Alltoall and an Allgather with the sum in numpy (Open MPI has no float16 sum);
* `none`: a single process.
Small host-side collectives (broadcast of weights, gathers of statistics, the stop vote) use
mpi4py in both MPI backends; Horovod then shares MPI with it (mpi4py initialises MPI first).
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def launched_by_mpi() -> bool:
    return any(v in os.environ for v in _LAUNCHER_VARS)


def horovod_available() -> bool:
    try:
        import horovod.tensorflow as hvd
        return bool(hvd.mpi_built())
    except Exception:
        return False


class Dist:
    """Single-process backend; the MPI backends override what differs."""

    name = "none"
    graph_allreduce = False  # True: the train step averages gradients inside its compiled graph

    def __init__(self) -> None:
        self.rank, self.size = 0, 1

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def average_flat(self, buf: np.ndarray) -> np.ndarray:
        return buf

    def graph_average(self, tensors: list, per_tensor: bool = False, compression: str = "none") -> list:
        """Inside a tf.function: the average over ranks of each tensor (per_tensor: one op each, so
        each can start as soon as its input exists; else one grouped op waiting for all)."""
        return tensors

    def broadcast_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return list(arrays)

    def gather(self, obj: Any) -> list[Any] | None:
        return [obj]

    def broadcast_obj(self, obj: Any) -> Any:
        """Rank 0's small Python object on every rank (exact, unlike the float32 array path)."""
        return obj

    def any_true(self, flag: bool) -> bool:
        return flag

    def barrier(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


class MpiDist(Dist):
    name = "mpi"

    def __init__(self) -> None:
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        # Gradients travel on their own communicator: in overlap mode they are exchanged from a
        # worker thread while the main thread gathers statistics, and collectives on one
        # communicator must not interleave between threads.
        self.grad_comm = self.comm.Dup()

    def average_flat(self, buf: np.ndarray, compression: str = "none") -> np.ndarray:
        if compression == "fp16":
            return self._average_fp16(np.asarray(buf, np.float32))
        buf = np.ascontiguousarray(buf, dtype=np.float32)
        self.grad_comm.Allreduce(self._MPI.IN_PLACE, buf, op=self._MPI.SUM)
        buf /= self.size
        return buf

    def _average_fp16(self, buf: np.ndarray) -> np.ndarray:
        """Half the bytes on the wire. Open MPI has no float16 sum (and a Python user operation is
        called per segment: slow), so this is the ring allreduce's two halves by hand: Alltoall of
        float16 chunks (each rank gets everyone's copy of its chunk), a float32 sum of its chunk in
        numpy, Allgather of the averaged float16 chunks. Bytes per rank: 2 (r-1)/r x n x 2, half of
        float32's. Each value is rounded to float16 twice: once sent, once averaged."""
        MPI, r, n = self._MPI, self.size, buf.size
        chunk = -(-n // r)  # ceil: the buffer padded to r equal chunks
        send = np.zeros(r * chunk, np.float16)
        send[:n] = buf
        mine = np.empty((r, chunk), np.float16)
        self.grad_comm.Alltoall([send.view(np.uint16), MPI.UINT16_T], [mine.view(np.uint16), MPI.UINT16_T])
        avg = (mine.astype(np.float32).sum(axis=0) / r).astype(np.float16)
        full = np.empty(r * chunk, np.float16)
        self.grad_comm.Allgather([avg.view(np.uint16), MPI.UINT16_T], [full.view(np.uint16), MPI.UINT16_T])
        return full[:n].astype(np.float32)

    def broadcast_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        flat = np.concatenate([np.asarray(a, np.float32).ravel() for a in arrays]) if arrays else np.zeros(0, np.float32)
        self.comm.Bcast(flat, root=0)
        out, i = [], 0
        for a in arrays:
            out.append(flat[i:i + a.size].reshape(a.shape).astype(a.dtype))
            i += a.size
        return out

    def gather(self, obj: Any) -> list[Any] | None:
        return self.comm.gather(obj, root=0)

    def broadcast_obj(self, obj: Any) -> Any:
        return self.comm.bcast(obj, root=0)

    def any_true(self, flag: bool) -> bool:
        return bool(self.comm.allreduce(int(flag), op=self._MPI.MAX))

    def barrier(self) -> None:
        self.comm.Barrier()


class HorovodDist(MpiDist):
    name = "horovod"
    graph_allreduce = True

    def __init__(self) -> None:
        super().__init__()  # mpi4py initialises MPI (thread-multiple) before Horovod attaches to it
        import horovod.tensorflow as hvd

        self._hvd = hvd
        hvd.init(comm=self.comm)
        if (hvd.rank(), hvd.size()) != (self.rank, self.size):
            raise RuntimeError(f"horovod sees rank {hvd.rank()}/{hvd.size()}, mpi4py {self.rank}/{self.size}")

    def graph_average(self, tensors: list, per_tensor: bool = False, compression: str = "none") -> list:
        hvd = self._hvd
        comp = hvd.Compression.fp16 if compression == "fp16" else hvd.Compression.none
        if per_tensor:
            # Independent ops: each depends only on its own gradient, so TensorFlow hands the dense
            # layer's (computed first in backprop) to Horovod while the convolutions' are still running.
            return [hvd.allreduce(t, op=hvd.Average, compression=comp) for t in tensors]
        return hvd.grouped_allreduce(tensors, op=hvd.Average, compression=comp)

    def shutdown(self) -> None:
        self._hvd.shutdown()


def choose_backend(requested: str) -> str:
    """Resolve `--dist auto` without initialising anything."""
    if requested != "auto":
        return requested
    if not launched_by_mpi():
        return "none"
    return "horovod" if horovod_available() else "mpi"


def init(backend: str) -> Dist:
    if backend == "none":
        return Dist()
    if backend == "mpi":
        return MpiDist()
    if backend == "horovod":
        if not horovod_available():
            raise RuntimeError("--dist horovod: horovod is not installed with MPI support "
                               "(run launch/build_horovod.sh, or use --dist mpi)")
        return HorovodDist()
    raise ValueError(f"unknown dist backend '{backend}'")


def world_size_hint() -> int:
    """Number of ranks from the launcher's environment, before MPI is initialised (for validation)."""
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"):
        if var in os.environ and launched_by_mpi():
            return int(os.environ[var])
    return 1


def ranks_on_this_host_hint() -> int:
    """Ranks sharing this host's memory, from the launcher's environment (before MPI starts)."""
    if launched_by_mpi():
        for var in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"):
            if os.environ.get(var, "").isdigit():
                return max(1, int(os.environ[var]))
    return 1
