"""`RunState`: what outlives an update (counters, training time, CPU seconds) and how it travels:
into every checkpoint's meta (under the keys checkpoints have always had), out of one on resume,
and from rank 0 to every rank at start-up."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class RunState:
    updates: int = 0
    frames: int = 0       # emulator frames played for the updates so far, all ranks together: the samples'
    #                       agent steps and the steps no sample holds (FIRE after a lost life), x frameskip
    episodes: int = 0     # finished episodes, all ranks (counted on rank 0 at sync points)
    prior_time_s: float = 0.0  # training wall seconds before this process (earlier segments of a resumed run)
    cpu_s: float = 0.0         # CPU seconds of all ranks' processes since the run began, as of the last sync (rank 0)
    prior_cpu_s: float = 0.0   # the part of cpu_s spent before this process
    cpu_s_from_start: bool = True  # False once resumed from a checkpoint that did not count CPU seconds from the start
    rollbacks: int = 0      # the collapse guard's rollbacks so far, resumes included
    lr_scale: float = 1.0   # the lr multiplier those rollbacks left (each one cuts it for the rest of the run)
    t_start: float = 0.0    # wall clock (time.time) when this process began training
    cpu_start: float = 0.0  # this rank's process CPU seconds then: every thread, simulators and learner alike

    def start_clocks(self) -> None:
        self.t_start, self.cpu_start = time.time(), time.process_time()

    def elapsed(self, now: float | None = None) -> float:
        """Training wall seconds since the run began, resumes included."""
        return self.prior_time_s + (time.time() if now is None else now) - self.t_start

    def cpu_here(self) -> float:
        """This rank's process CPU seconds since this process began training."""
        return time.process_time() - self.cpu_start

    def to_meta(self, now: float | None = None) -> dict[str, Any]:
        """The checkpoint's counters (its meta also holds the config, the model and the world size)."""
        return {"updates": self.updates, "frames": self.frames, "episodes": self.episodes,
                "time_s": self.elapsed(now), "cpu_s": self.cpu_s, "cpu_s_from_start": self.cpu_s_from_start,
                "rollbacks": self.rollbacks, "lr_scale": self.lr_scale}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> RunState:
        """Back out of a checkpoint's meta; keys that older checkpoints lack take their old meaning. Older ones
        may also hold "lr_adapt", the multiplier of the removed --lr-adapt kl (config.REMOVED_OPTIONS): unread."""
        cpu = float(meta.get("cpu_s", 0.0))  # absent: the checkpoint predates CPU accounting
        return cls(updates=int(meta["updates"]), frames=int(meta["frames"]), episodes=int(meta["episodes"]),
                   prior_time_s=float(meta.get("time_s", 0.0)), cpu_s=cpu, prior_cpu_s=cpu,
                   cpu_s_from_start=bool(meta.get("cpu_s_from_start", False)),
                   rollbacks=int(meta.get("rollbacks", 0)), lr_scale=float(meta.get("lr_scale", 1.0)))

    def broadcast(self, dist) -> RunState:  # dist: ba3c.dist.Dist
        """Rank 0's state on every rank (before the clocks start)."""
        return RunState(**dist.broadcast_obj(dataclasses.asdict(self)))
