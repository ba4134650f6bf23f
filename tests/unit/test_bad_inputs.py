"""Bad inputs of both command lines (python -m ba3c.train, python -m ba3c.evaluate): each refused with exit status 2
and one line on standard error that names what to change (a change that can be made), before TensorFlow is imported,
with nothing written.

Each case runs the entry point's main() in a subprocess whose working directory holds the case's files, and which
says afterwards whether TensorFlow was imported (a loose guard that the check came first).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_config import write_run_from_elsewhere

from conftest import subprocess_env

MAIN = ("import importlib, sys\nrc = importlib.import_module(sys.argv[1]).main(sys.argv[2:])\n"
        "print('tensorflow imported:', 'tensorflow' in sys.modules)\nsys.exit(rc)")

# (arguments, what the line must say); run in a directory holding the files named below (see `workspace`)
TRAIN = [
    (["--config", "notutf8.json"], "--config: 'notutf8.json' is not UTF-8 text"),
    (["--config", "adir"], "--config: cannot read 'adir' (Is a directory)"),
    (["--config", "nosuch.json"], "--config: no such file"),
    (["--config", "broken.json"], "is not valid JSON"),
    (["--config", "nul.json"], "--run-dir: cannot write"),
    (["--rehearse-ranks", "100000"], "lower --rehearse-ranks to at most 64"),
    (["--seed", "-1"], "--seed: must be >= 0"),
    (["--seed", "99999999999"], "--seed: must be at most 2147483647"),
    (["--max-episode-frames", "99999999999"], "--max-episode-frames: must be at most 2147483647"),
    (["--intra-op-threads", "99999999999"], "--intra-op-threads: must be at most 1024"),
    (["--inter-op-threads", "-1"], "--inter-op-threads: must be >= 0"),
    (["--env-threads", "99999999999"], "--env-threads: must be at most 1024"),
    (["--total-frames", "abc"], "--total-frames: invalid int value: 'abc'"),
    (["--total-frames", "0"], "--total-frames: must be > 0"),
    (["--lr", "nan"], "--lr: must be a finite number"),
    (["--lr", "-1"], "--lr: must be > 0"),
    (["--log-interval-s", "inf"], "--log-interval-s: must be a finite number"),
    (["--num-envs", "99999999999"], "use at most --num-envs"),
    (["--checkpoint-max-failures", "0"], "--checkpoint-max-failures: must be > 0"),
    (["--run-dir", "afile"], "--run-dir: cannot write to 'afile'"),
    (["--resume", "afile"], "--resume: 'afile' is not a run directory"),
    (["--resume", "nosuch"], "--resume: 'nosuch' is not a run directory"),
    (["--env", "nosuch"], "--env: unknown game"),
    (["--no-such-option", "1"], "unrecognized arguments: --no-such-option"),
]
EVALUATE = [
    (["--policy", "nosuch", "run"], "argument --policy: invalid choice: 'nosuch'"),
    (["--epsilon", "2", "--policy", "egreedy", "run"], "--epsilon must be in [0, 1], got 2.0"),
    (["--epsilon", "nan", "run"], "--epsilon must be in [0, 1], got nan"),
    (["--episodes", "0", "run"], "--episodes must be >= 1"),
    (["--num-envs", "abc", "run"], "argument --num-envs: invalid int value"),
    (["--num-envs", "-3", "run"], "--num-envs must be >= 1"),
    (["--max-episode-frames", "0", "run"], "--max-episode-frames must be in [1, 2147483647]"),
    (["--sticky-actions", "1", "run"], "--sticky-actions: must be in [0, 1)"),
    (["--seed", "-1", "run"], "--seed must be in [0, "),
    (["--threads", "-1", "run"], "--threads must be in [0, 1024]"),
    (["--threads", "99999999999", "run"], "--threads must be in [0, 1024]"),
    (["--json", "adir", "run"], "--json: 'adir' is a directory; name a file, e.g. adir/eval.json"),
    (["--json", "afile/out.json", "run"], "--json: cannot write 'afile/out.json'"),
    (["--record", "adir", "run"], "--record: 'adir' is a directory"),
    (["--num-envs", "99999999999", "--episodes", "99999999999", "run"], "use at most --num-envs"),
    (["nosuch"], "no such file or directory: 'nosuch'"),
    (["afile"], "'afile' is neither a run directory nor a checkpoint"),
    (["adir"], "no valid checkpoint in"),
    (["broken-run"], "unusable: ckpt-0000000007.npz: checksum mismatch"),
    ([], "the following arguments are required: RUN_DIR_OR_CHECKPOINT"),
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    ws = tmp_path_factory.mktemp("bad_inputs")
    (ws / "notutf8.json").write_bytes(b'{"run": {"total_frames": 1}}\xff\xfe')
    (ws / "broken.json").write_text('{"run": ')
    (ws / "nul.json").write_text(json.dumps({"run": {"run_dir": "a\0b"}}))
    (ws / "adir").mkdir()
    (ws / "afile").write_text("not a run\n")
    write_run_from_elsewhere(ws / "run", {})  # a run directory with a checkpoint (CartPole)
    write_run_from_elsewhere(ws / "broken-run", {})
    npz = next((ws / "broken-run" / "checkpoints").glob("*.npz"))
    npz.write_bytes(npz.read_bytes()[:-10])  # truncated
    return ws


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _refused(module: str, args: list[str], says: str, ws: Path) -> None:
    before = _tree(ws)
    p = subprocess.run([sys.executable, "-c", MAIN, module, *args], cwd=ws, env=subprocess_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    prefix = "ba3c: error: " if module == "ba3c.train" else "ba3c.evaluate: error: "
    assert len(lines) == 1 and lines[0].startswith(prefix), p.stderr
    assert says in lines[0], lines[0]
    assert "at most 0" not in lines[0] and "Traceback" not in p.stderr
    assert "tensorflow imported: False" in p.stdout
    assert _tree(ws) == before  # nothing written (no run directory, no result file, nothing changed)


@pytest.mark.parametrize("args,says", TRAIN, ids=[" ".join(a) for a, _ in TRAIN])
def test_train_bad_input(args, says, workspace):
    _refused("ba3c.train", args, says, workspace)


@pytest.mark.parametrize("args,says", EVALUATE, ids=[" ".join(a) or "no-args" for a, _ in EVALUATE])
def test_evaluate_bad_input(args, says, workspace):
    _refused("ba3c.evaluate", args, says, workspace)


def test_the_checks_import_no_tensorflow(workspace):
    """In this process: the validation functions alone raise, and TensorFlow stays unimported (run first in a fresh
    interpreter, where nothing else has imported it)."""
    code = ("import sys\nfrom ba3c.config import ConfigError\nfrom ba3c import train, evaluate\n"
            "for argv in (['--config', 'notutf8.json'], ['--rehearse-ranks', '100000']):\n"
            "    try:\n        train.check_args(argv)\n        raise SystemExit('accepted ' + str(argv))\n"
            "    except ConfigError:\n        pass\n"
            "args = evaluate.build_parser().parse_args(['--epsilon', '2', 'run'])\n"
            "try:\n    evaluate.check_args(args)\n    raise SystemExit('accepted --epsilon 2')\n"
            "except evaluate.EvalError:\n    pass\n"
            "print('tensorflow' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], cwd=workspace, env=subprocess_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "False", p.stdout + p.stderr


def test_global_batch_fixes_can_be_applied():
    """Each fix the global-batch limit names is one a user can make (never 'at most 0')."""
    from ba3c.config import Config, ConfigError, check_world

    cfg = Config().replace(train_batch=64)
    for ranks, says in ((65, "lower --train-batch to at most 63"), (5000, "run on at most 64 ranks")):
        with pytest.raises(ConfigError) as e:
            check_world(cfg, ranks)
        assert says in str(e.value) and "at most 0" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        check_world(Config().replace(train_batch=64, rehearse_ranks=100), 1)
    assert "lower --train-batch to at most 40 or lower --rehearse-ranks to at most 64" in str(e.value)
