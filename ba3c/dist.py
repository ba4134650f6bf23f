"""The only module that imports horovod or mpi4py: rank, size, gradient averaging, broadcast, gather.

Three backends behind one interface:
* `horovod`: gradients averaged inside the compiled train step, by one `hvd.allreduce` per
  gradient (each starts as soon as backprop produces its gradient) or one
  `hvd.grouped_allreduce` after the last (both Keras-3-safe; DistributedGradientTape is not: Horovod #4290);
  optionally in float16 (`hvd.Compression.fp16`);
* `mpi`: mpi4py with the uppercase buffer API: one flattened buffer averaged on the host after
  the step's backprop, or (per-tensor) each gradient handed from inside the compiled step to an
  exchange thread as soon as it exists; float32 `Allreduce`, or for float16 an Alltoall and an
  Allgather with the sum in numpy (Open MPI has no float16 sum);
* `none`: a single process.
Small host-side collectives (broadcast of weights, gathers of statistics, the stop vote) use
mpi4py in both MPI backends; Horovod then shares MPI with it (mpi4py initialises MPI first).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

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

    def __init__(self) -> None:
        self.rank, self.size = 0, 1

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def averages_in_graph(self, per_tensor: bool) -> bool:
        """True: gradients are averaged by `graph_average` inside the compiled train step; False: by
        `average_flat` on the host, after it."""
        return False

    def average_flat(self, buf: np.ndarray, compression: str = "none") -> np.ndarray:
        return buf

    def graph_average(self, tensors: list, per_tensor: bool = False, compression: str = "none") -> list:
        """Inside a tf.function: the average over ranks of each tensor (per_tensor: each exchange can
        start as soon as its tensor exists; else one grouped exchange waiting for all)."""
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
        # Gradients (the host's flat buffer, fp16 sums) travel on a communicator of their own, apart
        # from the control collectives on COMM_WORLD; the per-tensor exchange thread (OrderedExchange)
        # duplicates one more, since collectives on one communicator must not interleave between threads.
        self.grad_comm = self.comm.Dup()

    def averages_in_graph(self, per_tensor: bool) -> bool:
        return per_tensor

    def graph_average(self, tensors: list, per_tensor: bool = False, compression: str = "none") -> list:
        """Per-tensor exchange inside the compiled step, the mpi4py way: each gradient is handed (a
        tf.numpy_function that returns at once) to an exchange thread as soon as backprop produces
        it; a last tf.numpy_function waits for all the averages. The thread allreduces in one fixed
        order (the list reversed: backprop's order), the same on every rank, so the collectives
        match without Horovod's negotiation."""
        import tensorflow as tf

        if not per_tensor:
            raise ValueError("the mpi backend averages one flat buffer on the host unless per-tensor")
        ex = OrderedExchange(self, len(tensors), compression)  # one per traced graph, with its own thread
        tokens = [tf.numpy_function(ex.submitter(i), [t], tf.int64, stateful=True) for i, t in enumerate(tensors)]
        with tf.control_dependencies(tokens):
            outs = tf.numpy_function(ex.collect, [], [tf.float32] * len(tensors), stateful=True)
        return [tf.reshape(o, tf.shape(t)) for o, t in zip(outs, tensors)]

    def average_flat(self, buf: np.ndarray, compression: str = "none") -> np.ndarray:
        if compression == "fp16":
            return self._average_fp16(np.asarray(buf, np.float32).ravel())
        buf = np.ascontiguousarray(buf, dtype=np.float32)
        self.grad_comm.Allreduce(self._MPI.IN_PLACE, buf, op=self._MPI.SUM)
        buf /= self.size
        return buf

    def _average_fp16(self, buf: np.ndarray, comm: Any = None) -> np.ndarray:
        """Half the bytes on the wire. Open MPI has no float16 sum (and a Python user operation is
        called per segment: slow), so this is the ring allreduce's two halves by hand: Alltoall of
        float16 chunks (each rank gets everyone's copy of its chunk), a float32 sum of its chunk in
        numpy, Allgather of the averaged float16 chunks. Bytes per rank: 2 (r-1)/r x n x 2, half of
        float32's. Each value is rounded to float16 twice: once sent, once averaged."""
        MPI, r, n, comm = self._MPI, self.size, buf.size, comm or self.grad_comm
        chunk = -(-n // r)  # ceil: the buffer padded to r equal chunks
        send = np.zeros(r * chunk, np.float16)
        send[:n] = buf
        mine = np.empty((r, chunk), np.float16)
        comm.Alltoall([send.view(np.uint16), MPI.UINT16_T], [mine.view(np.uint16), MPI.UINT16_T])
        avg = (mine.astype(np.float32).sum(axis=0) / r).astype(np.float16)
        full = np.empty(r * chunk, np.float16)
        comm.Allgather([avg.view(np.uint16), MPI.UINT16_T], [full.view(np.uint16), MPI.UINT16_T])
        return full[:n].astype(np.float32)

    def broadcast_arrays(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        flat = (np.concatenate([np.asarray(a, np.float32).ravel() for a in arrays]) if arrays
                else np.zeros(0, np.float32))
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


class OrderedExchange:
    """mpi4py's per-tensor exchange for one traced train step: tensors handed in from TensorFlow's
    threads are averaged by a worker thread, in the fixed order `n-1, ..., 0`, on a communicator of
    its own. A tensor is exchanged as soon as it and all before it in that order have arrived."""

    def __init__(self, dist: MpiDist, n: int, compression: str) -> None:
        import queue
        import threading

        self.dist, self.n, self.compression = dist, n, compression
        self.comm = dist.comm.Dup()
        self.inbox: list[queue.Queue[np.ndarray]] = [queue.Queue(maxsize=1) for _ in range(n)]
        self.results: queue.Queue[list[np.ndarray] | BaseException] = queue.Queue(maxsize=1)
        threading.Thread(target=self._run, name="ExchangeThread", daemon=True).start()

    def submitter(self, i: int):
        def submit(tensor: np.ndarray) -> np.int64:
            self.inbox[i].put(np.array(tensor, np.float32, copy=True))  # TF may reuse the input's memory
            return np.int64(0)
        return submit

    def collect(self) -> list[np.ndarray]:
        out = self.results.get()
        if isinstance(out, BaseException):
            raise out
        return out

    def _run(self) -> None:
        MPI = self.dist._MPI
        while True:
            out: list[np.ndarray] = [np.empty(0, np.float32)] * self.n
            try:
                for i in reversed(range(self.n)):
                    buf = self.inbox[i].get()
                    if self.compression == "fp16":
                        out[i] = self.dist._average_fp16(buf.ravel(), self.comm).reshape(buf.shape)
                    else:
                        self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
                        out[i] = buf / np.float32(self.dist.size)
            except BaseException as e:  # surfaced in the train step by collect()
                self.results.put(e)
                return
            self.results.put(out)


class HorovodDist(MpiDist):
    name = "horovod"

    def __init__(self) -> None:
        super().__init__()  # mpi4py initialises MPI (thread-multiple) before Horovod attaches to it
        import horovod.tensorflow as hvd

        self._hvd = hvd
        hvd.init(comm=self.comm)
        if (hvd.rank(), hvd.size()) != (self.rank, self.size):
            raise RuntimeError(f"horovod sees rank {hvd.rank()}/{hvd.size()}, mpi4py {self.rank}/{self.size}")

    def averages_in_graph(self, per_tensor: bool) -> bool:
        return True

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
