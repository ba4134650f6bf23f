"""benchmarks/replay_save.py on a small replay: it saves and loads through the trainer's own functions, writes
its JSON and plot, removes the shard, and refuses bad input in one line (no timing assertions)."""
from __future__ import annotations

import json

from benchmarks import replay_save


def test_small_replay_round_trip(tmp_path):
    out = tmp_path / "out"
    assert replay_save.main(["--slots", "400", "--dir", str(tmp_path / "shard"), "--out", str(out)]) == 0
    result = json.loads((out / "replay_save.json").read_text())
    assert result["transitions"] > 0 and result["bytes"] > 400 * 84 * 84
    assert result["save_s"] >= 0 and result["load_s"] >= 0 and result["warmup_s_modelled"] > 0
    assert (out / "replay_save.png").stat().st_size > 0 and not (tmp_path / "shard").exists()


def test_bad_input(tmp_path, capsys):
    assert replay_save.main(["--slots", "10", "--out", str(tmp_path)]) == 2
    assert "--slots must be at least" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    assert replay_save.main(["--dir", str(tmp_path / "full"), "--out", str(tmp_path)]) == 2
    assert "give an empty --dir" in capsys.readouterr().err
