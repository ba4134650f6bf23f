"""Run under `mpirun -np 2`: Gorila's learner on two ranks, each sampling its own replay memory.

    mpirun -np 2 python tests/multirank/mpi_gorila.py BACKEND OUT_DIR

Every rank fills its own replay (different transitions per rank), then makes 6 updates with the DQN loss
(target copied every 2 updates) through the shared Learner and the chosen exchange, and records after each
update the checksums of its network and its target network and its own batch. Rank 0 also replays the same
batches in one process, both ranks' batches concatenated (the mean loss over the union has the average of the
two ranks' gradients), as the reference the exchanged updates must match.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

UPDATES, TARGET_EVERY, BATCH = 6, 2, 16


def main() -> None:
    backend, out_dir = sys.argv[1], sys.argv[2]
    from ba3c import dist as dist_mod
    from ba3c.algos.dqn import Gorila, make_loss
    from ba3c.algos.replay import Replay, ReplaySample
    from ba3c.config import Config
    from ba3c.learner import Learner
    from ba3c.model import build_model

    d = dist_mod.init(backend)
    cfg = Config().replace(algo="gorila", **{**Gorila.defaults, "train_batch": BATCH, "lr": 1e-2,
                                             "target_every": TARGET_EVERY, "replay_size": 400, "num_envs": 2,
                                             "predict_batch": 2})

    def q() -> object:
        return build_model("mlp", (4,), 2, seed=0, head="q")

    def learner(dist) -> Learner:
        model = q()
        return Learner(model, cfg.learn, dist, cfg.learn.lr, 0, loss=make_loss(cfg, model, q))

    def checksum(weights) -> float:
        return float(sum(np.sum(np.asarray(w, np.float64)) for w in weights))

    rng = np.random.default_rng(100 + d.rank)  # each rank's own transitions
    replay = Replay(400, 2, (4,), np.float32, clip_rewards=False)
    for t in range(150):
        z = np.zeros(2, bool)
        replay.add(np.array([0, 1]), rng.normal(size=(2, 4)).astype(np.float32), rng.normal(size=2).astype(np.float32),
                   rng.random(2) < 0.05, z, None, rng.integers(0, 2, 2).astype(np.int32), t)
    live = learner(d)
    live.broadcast_from_root()
    out: dict = {"rank": d.rank, "network": [], "target": [], "batches": []}
    for _ in range(UPDATES):
        b = replay.sample(BATCH, rng)
        live.train(b)
        out["network"].append(checksum(live.model.weights))
        out["target"].append(checksum(live.loss.target.model.weights))
        out["batches"].append({k: np.asarray(getattr(b, k)).tolist() for k in
                               ("obs", "actions", "rewards", "next_obs", "dones", "versions")})
    out["final_weights"] = [np.asarray(w).tolist() for w in live.model.get_weights()]
    gathered = d.gather(out["batches"])
    if d.is_root:  # the reference: one process, both ranks' batches as one
        ref = learner(dist_mod.Dist())
        for u in range(UPDATES):
            parts = [gathered[r][u] for r in range(d.size)]
            ref.train(ReplaySample(**{k: np.concatenate([np.asarray(p[k], np.float32 if k in ("obs", "next_obs",
                                      "rewards", "dones") else (np.int32 if k == "actions" else np.int64))
                                      for p in parts]) for k in parts[0]}))
        out["reference_weights"] = [np.asarray(w).tolist() for w in ref.model.get_weights()]
    with open(os.path.join(out_dir, f"rank{d.rank}.json"), "w") as fh:
        json.dump(out, fh)
    d.shutdown()


if __name__ == "__main__":
    main()
