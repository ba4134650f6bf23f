"""Config: CLI from the dataclasses, JSON round trip, presets, and bad input rejected early."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from ba3c.config import PRESETS, Config, ConfigError, all_option_names, build_parser, config_from_dict, save_json
from ba3c.simulators import UnknownEnvError, resolve_env
from ba3c.train import resolve
from conftest import ROOT, subprocess_env


def test_help_lists_every_option_with_default():
    text = build_parser().format_help()
    for name in all_option_names():
        assert "--" + name.replace("_", "-") in text
    for flag in ("--env", "--total-frames", "--run-dir", "--resume", "--config", "--preset", "--model", "--seed"):
        assert flag in text
    assert "(default: 'pong')" in text


def test_json_round_trip_and_cli_overrides(tmp_path):
    cfg, _ = resolve(["--env", "breakout", "--lr", "0.002", "--num-envs", "48"])
    path = tmp_path / "c.json"
    save_json(cfg, str(path))
    again, _ = resolve(["--config", str(path)])
    assert again == cfg
    over, _ = resolve(["--config", str(path), "--num-envs", "64"])
    assert over.sim.num_envs == 64 and over.learn.lr == 0.002 and over.sim.env == "breakout"


def test_paper_preset():
    cfg, _ = resolve(["--preset", "paper"])
    for k, v in PRESETS["paper"].items():
        assert getattr(getattr(cfg, {"model": "learn", "predict_batch": "sim"}.get(k, "learn")), k) == v
    cfg2, _ = resolve(["--preset", "paper", "--lr", "0.01"])
    assert cfg2.learn.lr == 0.01 and cfg2.learn.beta2 == 0.75


@pytest.mark.parametrize("name,rom", [("pong", "pong"), ("Pong", "pong"), ("ALE/Pong-v5", "pong"),
                                      ("SpaceInvaders", "space_invaders"), ("space_invaders", "space_invaders"),
                                      ("BreakoutNoFrameskip-v4", "breakout")])
def test_game_names(name, rom):
    spec = resolve_env(name)
    assert (spec.kind, spec.name) == ("atari", rom)


def test_unknown_game_suggests():
    with pytest.raises(UnknownEnvError, match="breakout"):
        resolve_env("breakuot")
    assert resolve_env("CartPole-v1").kind == "gym"


BAD = [
    (["--env", "pongg"], "--env"),
    (["--preset", "fast"], "--preset"),
    (["--num-envs", "0"], "--num-envs"),
    (["--train-batch", "-4"], "--train-batch"),
    (["--predict-batch", "64", "--num-envs", "32"], "--predict-batch"),
    (["--train-batch", "100000"], "--train-batch"),
    (["--n-step", "40000", "--max-episode-frames", "1000"], "--n-step"),
    (["--lr", "nan"], "--lr"),
    (["--lr", "inf"], "--lr"),
    (["--gamma", "1.5"], "--gamma"),
    (["--total-frames", "abc"], "--total-frames"),
    (["--resume", "/nonexistent/run"], "--resume"),
    (["--run-dir", "/proc/ba3c-not-writable"], "--run-dir"),
    (["--queue-batches", "0"], "--queue-batches"),
    (["--collapse-guard", "retry"], "--collapse-guard"),
    (["--guard-entropy-drop", "1.5"], "--guard-entropy-drop"),
    (["--guard-lr-cut", "0"], "--guard-lr-cut"),
    (["--guard-snapshot-updates", "0"], "--guard-snapshot-updates"),
    (["--guard-max-rollbacks", "0"], "--guard-max-rollbacks"),
    (["--keep-every-frames", "-5"], "--keep-every-frames"),
    # the network against the observations, decided before TensorFlow starts
    (["--env", "CartPole-v1", "--model", "nature"], "--model nature"),
    (["--env", "CartPole-v1", "--model", "paper"], "--model paper"),
    (["--env", "Pendulum-v1"], "not discrete"),
    # sizes against this machine's memory (emulators, frame stacks, queued batches)
    (["--env", "pong", "--num-envs", "100000000"], "use at most --num-envs"),
    (["--queue-batches", "1000000000"], "--queue-batches"),
    (["--rehearse-ranks", "128"], "--rehearse-ranks"),
    (["--rehearse-ranks", "0"], "--rehearse-ranks"),
    (["--life-loss", "reset"], "--life-loss"),
    (["--env", "CartPole-v1", "--life-loss", "terminal"], "--life-loss terminal"),
    (["--eval-sticky-actions", "1"], "--eval-sticky-actions"),
    (["--eval-sticky-actions", "-0.25"], "--eval-sticky-actions"),
    (["--env", "CartPole-v1", "--eval-sticky-actions", "0.25"], "--eval-sticky-actions"),
    (["--sticky-actions", "1"], "--sticky-actions: must be in [0, 1)"),
    (["--sticky-actions", "nan"], "--sticky-actions: must be a finite number"),
    (["--env", "CartPole-v1", "--sticky-actions", "0.25"], "--sticky-actions 0.25: sticky actions are an ALE"),
    (["--decorrelate-steps", "-1"], "--decorrelate-steps"),
    (["--decorrelate-steps", "100"], "--predict-batch equal to --num-envs"),  # default: asynchronous
    (["--env", "CartPole-v1", "--decorrelate-steps", "100", "--predict-batch", "8", "--num-envs", "8"],
     "--decorrelate-steps 100"),
    (["--model", "paper", "--train-batch", "4096", "--num-envs", "100000", "--predict-batch", "16"], "available"),
]


# Runs the entry point and reports whether TensorFlow was imported by the time it returned.
MAIN_THEN_TF = ("import sys\nfrom ba3c.train import main\nrc = main(sys.argv[1:])\n"
                "print('tensorflow imported:', 'tensorflow' in sys.modules)\nsys.exit(rc)")


@pytest.mark.parametrize("args,option", BAD)
def test_bad_input_exits_2_with_one_clear_line(args, option, tmp_path):
    if "--run-dir" not in args:
        args = [*args, "--run-dir", str(tmp_path / "r")]
    # the time limit only catches a start-up that goes ahead (the real ones take about a second)
    p = subprocess.run([sys.executable, "-c", MAIN_THEN_TF, *args], cwd=ROOT, env=subprocess_env(),
                       capture_output=True, text=True, timeout=15)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ba3c: error:") and option in lines[0], p.stderr
    assert "tensorflow imported: False" in p.stdout  # refused before anything expensive
    assert not (tmp_path / "r").exists()  # nothing written


def test_bad_json_configs(tmp_path):
    unknown = tmp_path / "u.json"
    unknown.write_text(json.dumps({"learn": {"lrr": 0.1}}))
    with pytest.raises(ConfigError, match="did you mean lr"):
        resolve(["--config", str(unknown)])
    wrong = tmp_path / "w.json"
    wrong.write_text(json.dumps({"sim": {"num_envs": "many"}}))
    with pytest.raises(ConfigError, match="--num-envs: expected int"):
        resolve(["--config", str(wrong)])
    broken = tmp_path / "b.json"
    broken.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        resolve(["--config", str(broken)])


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.sampled_from(["num_envs", "predict_batch", "train_batch", "n_step", "lr", "gamma",
                                        "clip_norm", "total_frames", "beta1"]),
                       st.one_of(st.integers(-5, 5000), st.floats(allow_nan=True, allow_infinity=True),
                                 st.text(max_size=3)),
                       max_size=4))
def test_config_parser_accepts_only_valid(values):
    """Any dict of values either builds a Config that re-validates, or raises ConfigError (never anything else)."""
    try:
        learn = ("train_batch", "n_step", "lr", "gamma", "clip_norm", "beta1")
        cfg = config_from_dict({"sim": {k: v for k, v in values.items() if k in ("num_envs", "predict_batch")},
                                "learn": {k: v for k, v in values.items() if k in learn},
                                "run": {k: v for k, v in values.items() if k == "total_frames"}})
    except ConfigError:
        return
    assert cfg.sim.predict_batch <= cfg.sim.num_envs and cfg.learn.lr > 0 and 0 < cfg.learn.gamma <= 1
    assert Config(cfg.sim, cfg.learn, cfg.run) == cfg



def test_life_loss_auto_is_terminal_for_atari_only():
    from ba3c.config import resolve_life_loss

    cfg = Config()
    assert cfg.sim.life_loss == "auto"
    assert resolve_life_loss(cfg, atari=True).sim.life_loss == "terminal"
    assert resolve_life_loss(cfg, atari=False).sim.life_loss == "ignore"
    for explicit in ("ignore", "terminal"):  # asked for: kept (a non-Atari `terminal` is refused by ba3c.train)
        assert resolve_life_loss(cfg.replace(life_loss=explicit), atari=True).sim.life_loss == explicit


def test_configs_saved_before_an_option_keep_what_they_ran_with(tmp_path):
    """A run saved before --life-loss existed trained with `ignore`: its resume and its checkpoint's config
    say so (whatever the default), and a resume that keeps it records no change."""
    from ba3c.config import IMPLIED_BY_OLDER_CONFIGS, saved_config
    from ba3c.resume import config_changes

    run = tmp_path / "old"
    old = Config().replace(run_dir=str(run)).to_dict()
    del old["sim"]["life_loss"]
    assert saved_config(old).sim.life_loss == IMPLIED_BY_OLDER_CONFIGS["life_loss"] == "ignore"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(old))
    resumed, is_resume = resolve(["--resume", str(run)])
    assert is_resume and resumed.sim.life_loss == "ignore"
    assert config_changes(old, resumed) == {}
    assert config_changes(old, resumed.replace(life_loss="terminal")) == {"life_loss": ["ignore", "terminal"]}


def test_configs_saved_before_the_exchange_options_keep_the_grouped_float32_exchange(tmp_path):
    """Runs saved before --allreduce and --compression existed exchanged with one grouped float32 allreduce:
    a resume keeps that (whatever today's defaults) and records no change; asking for another is one."""
    from ba3c.config import saved_config
    from ba3c.resume import config_changes

    run = tmp_path / "old"
    old = Config().replace(run_dir=str(run), allreduce="per-tensor", compression="fp16").to_dict()
    del old["learn"]["allreduce"], old["learn"]["compression"]
    assert (saved_config(old).learn.allreduce, saved_config(old).learn.compression) == ("grouped", "none")
    run.mkdir()
    (run / "config.json").write_text(json.dumps(old))
    resumed, is_resume = resolve(["--resume", str(run)])
    assert is_resume and (resumed.learn.allreduce, resumed.learn.compression) == ("grouped", "none")
    assert config_changes(old, resumed) == {}
    changed, _ = resolve(["--resume", str(run), "--allreduce", "per-tensor"])
    assert config_changes(old, changed) == {"allreduce": ["grouped", "per-tensor"]}


def write_run_from_elsewhere(run, extra: dict, value_changes: dict | None = None) -> dict:
    """A run directory whose config.json (and one checkpoint's meta) was written by another ba3c: options this
    version lacks (`extra`, group -> {name: value}) or values it rejects (`value_changes`)."""
    import numpy as np

    from ba3c import checkpoint as ckpt

    saved = Config().replace(env="CartPole-v1", run_dir=str(run)).to_dict()
    for group, opts in extra.items():
        saved[group].update(opts)
    for group, opts in (value_changes or {}).items():
        saved[group].update(opts)
    run.mkdir()
    (run / "config.json").write_text(json.dumps(saved))
    (run / "meta.json").write_text(json.dumps({"git_sha": "0123456789abcdef0123456789abcdef01234567"}))
    ckpt.save(str(run / "checkpoints"), 7, [np.zeros(2, np.float32)],
              {"config": saved, "model": "mlp", "num_actions": 2, "obs_shape": [4], "updates": 7, "frames": 140,
               "episodes": 1}, 3)
    return saved


def test_resume_of_a_run_with_unknown_options_is_one_line(tmp_path):
    """config.json from a newer version or another branch: every unknown option named, what to do said, no traceback."""
    run = tmp_path / "newer"
    write_run_from_elsewhere(run, {"sim": {"sticky_training": 0.25}, "run": {"fancy_logger": True}})
    p = subprocess.run([sys.executable, "-c", MAIN_THEN_TF, "--resume", str(run)], cwd=ROOT, env=subprocess_env(),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ba3c: error: --resume:"), p.stderr
    assert "sim.sticky_training, run.fancy_logger" in lines[0] and "does not know" in lines[0]
    assert "git commit 0123456789ab" in lines[0] and "start a new run" in lines[0]
    assert "tensorflow imported: False" in p.stdout
    # a known option with a value this version lacks, and a config.json that is not JSON
    bad_value = tmp_path / "other"
    write_run_from_elsewhere(bad_value, {}, {"sim": {"life_loss": "episodic"}})
    with pytest.raises(ConfigError,
                       match=r"--resume: .*config.json: --life-loss: 'episodic' is not one of .*git commit"):
        resolve(["--resume", str(bad_value)])
    (bad_value / "config.json").write_text("{truncated")
    with pytest.raises(ConfigError, match="--resume: cannot read"):
        resolve(["--resume", str(bad_value)])
