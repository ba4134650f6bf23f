"""Stop requests: SIGTERM / SIGINT / SIGUSR1 (SLURM's warning signal).

Before the first update there is nothing to checkpoint, so a signal ends the process at once with
the signal's conventional status (128 + signal number). After it, a signal asks for a checkpoint
at the next sync point (all ranks agree there) and exit 75; a second SIGINT exits at once.

Why a thread and `sigwait`: a Python handler runs only when the main thread executes bytecode,
and start-up spends long stretches inside C++ (TensorFlow import, building thousands of
emulators, MPI initialisation). The signals are blocked in the main thread before any other
thread exists, every later thread inherits the mask, and one waiting thread takes them whatever
the main thread is doing. Threads that existed earlier (a BLAS pool started by numpy's import)
do not block them; the Python handlers installed as well cover a signal delivered to one of those.
C++ calls that hold the GIL for long (building thousands of emulators) stop that thread too:
`fatal_during_c_call` lets the default action end the process during them.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

EXIT_SIGNALLED = 75  # stopped by a signal after writing a checkpoint: resume with --resume RUN_DIR
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class SignalFlag:
    """`received` is set by a stop request once training has started (`started = True`)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.started = False  # set by the trainer after its first update
        self._old: dict[int, Any] = {}
        self._blocked = False
        self._restored = False
        self._lock = threading.Lock()
        self._stderr = 2

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._stderr = os.dup(2)  # the real standard error, even while start-up output is captured (tfquiet)
        for s in STOP_SIGNALS:
            self._old[s] = signal.signal(s, self._handle)
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        self._blocked = True
        threading.Thread(target=self._wait, name="SignalThread", daemon=True).start()

    def _wait(self) -> None:
        while True:
            self.on_signal(signal.sigwait(STOP_SIGNALS))

    def _handle(self, signum: int, frame: Any) -> None:
        self.on_signal(signum)

    def on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        with self._lock:
            if self._restored:  # training is over: what the default action would do
                os._exit(128 + signum)
            if not self.started:
                self._say(f"ba3c: got {name} before the first update: nothing to checkpoint yet; exiting "
                          f"(status {128 + signum})")
                os._exit(128 + signum)
            if self.received is not None and signum == signal.SIGINT:
                os._exit(130)  # files are only ever replaced atomically, so nothing is left half-written
            self.received = signum
        self._say(f"\nba3c: got {name}: checkpointing at the next sync point (press Ctrl-C again to quit at once)")

    def _say(self, line: str) -> None:
        sys.stderr.flush()
        os.write(self._stderr, (line + "\n").encode())

    @contextlib.contextmanager
    def fatal_during_c_call(self) -> Iterator[None]:
        """For a long C++ call that holds the GIL (building emulators): the waiting thread cannot run
        then, so a stop signal takes its default action (ends the process, status 128 + signal)."""
        if not self._blocked or self.started:
            yield
            return
        old = {s: signal.signal(s, signal.SIG_DFL) for s in STOP_SIGNALS}
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # the kernel then picks this thread
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            for s, h in old.items():
                signal.signal(s, h)

    def restore(self) -> None:
        """Back to the default behaviour (called in the main thread once training has ended)."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._restored = True
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}
        if self._blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            self._blocked = False
