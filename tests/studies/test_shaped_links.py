"""studies/shaped_links and benchmarks/netns.py (the in-box cluster it builds): the link model's arithmetic by hand,
and the in-box cluster for real (as root).

The real runs are tiny (2 ranks, 400 KB, 1 Gbit/s) and assert structure only: the bytes went over the
shaped veths (every tbf qdisc carried them, loopback did not), and afterwards, also after a failure
or a signal mid-run, no namespace, link or process of the run is left.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from benchmarks import exchange_probe, netns, scaling_model as sm
from conftest import ROOT, subprocess_env
from studies.shaped_links import shaped_links as sl

# ---------------------------------------------------------------- the model (pure arithmetic)


def test_ring_bytes_and_tcp_payload_by_hand():
    assert sm.ring_bytes_per_rank(1, 1e6) == 0.0
    assert sm.ring_bytes_per_rank(2, 1e6) == pytest.approx(1e6)  # 2(1)/2
    assert sm.ring_bytes_per_rank(8, 8e6) == pytest.approx(14e6)  # 2(7)/8 x 8 MB
    # 1500-byte MTU: 1448 payload bytes per 1514 bytes tbf counts; per 1538 on an Ethernet wire
    assert sm.tcp_payload_bandwidth(1514.0) == pytest.approx(1448.0)
    assert sm.tcp_payload_bandwidth(1538.0, framing_bytes=sm.WIRE_FRAMING_BYTES) == pytest.approx(1448.0)
    assert sm.tcp_payload_bandwidth(9014.0, mtu=9000) == pytest.approx(8948.0)


def test_fit_link_efficiency_recovers_overhead_and_efficiency():
    xs = [0.1, 0.2, 0.4, 0.8]
    a, eff = sm.fit_link_efficiency([(x, 0.003 + x / 0.9) for x in xs])
    assert a == pytest.approx(0.003) and eff == pytest.approx(0.9)
    # a negative intercept (e.g. tbf's bucket) is refitted through the origin
    a, eff = sm.fit_link_efficiency([(x, -0.01 + x / 0.5) for x in xs])
    assert a == 0.0 and 0.5 < eff < 0.6
    assert sm.fit_link_efficiency([(0.1, 0.2), (0.1, 0.3)]) is None  # one distinct x
    assert sm.relative_error(1.1, 1.0) == pytest.approx(0.1) and sm.relative_error(0.5, 1.0) == pytest.approx(-0.5)


def test_predictions_by_hand():
    # 2 ranks, 1 MB, 1 Gbit/s (125 MB/s): the model's 0.8 x line = 100 MB/s -> 10 ms, + 2 x 35 us published
    p = sl.predictions(2, 1e6, 1e9)
    assert p["projected"] == pytest.approx(0.010 + 2 * 35e-6)
    assert p["framing"] == pytest.approx(1e6 / (125e6 * 1448 / 1514) + 2 * 35e-6)
    assert p["line_rate"] == pytest.approx(0.008)
    assert sl.MODEL_LINK_EFFICIENCY == pytest.approx(0.8)
    # 10 Gbit/s uses its own published latency; 0.1 Gbit/s says which figure stood in
    assert sl.published_latency(1e10)[0] == 20e-6 and "Hurwitz" in sl.published_latency(1e10)[1]
    assert sl.published_latency(1e8)[0] == 35e-6 and sl.published_latency(1e8)[1].startswith("none found")


def test_transport_and_tbf_settings():
    assert sl.transport_mca("default", 6_750_876) == []
    mca = sl.transport_mca("eager", 6_750_876)
    limit = int(mca[mca.index("btl_tcp_eager_limit") + 1])
    assert limit >= 6_750_876 + 65536 and limit & (limit - 1) == 0
    ring = sl.transport_mca("ring", 6_750_876)
    assert ring[ring.index("coll_tuned_allreduce_algorithm") + 1] == "4"
    assert sl.transport_mca("ring+eager", 6_750_876) == ring + mca
    with pytest.raises(ValueError):
        sl.transport_mca("ring+fast", 1)
    burst, limit = netns.tbf_sizes(1e9)
    assert burst >= 64 * 1024 and limit >= burst


def test_interface_traffic_counts_loopback_apart():
    before = {"lo": (10, 10), "eth0": (100, 200)}
    after = {"lo": (15, 16), "eth0": (1100, 2200), "eth1": (5, 7)}
    assert exchange_probe.traffic(before, after) == {"rx_bytes": 1005, "tx_bytes": 2007,
                                                     "lo_rx_bytes": 5, "lo_tx_bytes": 6}


def _run(ranks, rate, seconds, transport="default", nbytes=1e6):
    per_rank = [{"cpu_s": 0.01, "tx_bytes": 2e6, "rx_bytes": 2e6, "lo_tx_bytes": 0, "lo_rx_bytes": 0}] * ranks
    return {"ranks": ranks, "rate_bps": rate, "transport": transport, "hosts": [f"n{i}" for i in range(ranks)],
            "tbf": None if rate is None else {"burst": 131072, "limit": 1 << 20},
            "links": {} if rate is None else {"n0:up": {"tx_bytes": 100, "qdisc_bytes": 100, "qdisc_drops": 0,
                                                         "qdisc_overlimits": 3}},
            "backends": {"mpi": {"bytes": nbytes, "seconds": seconds, "per_rank": per_rank}}}


def test_analyze_judges_only_link_bound_points():
    line = sl.predictions(2, 1e6, 1e8)["line_rate"]  # 80 ms
    runs = [_run(2, None, [0.004, 0.005, 0.006]),
            _run(2, 1e8, [line / 0.95] * 3),  # unshaped 5 ms / 84 ms: link-bound
            _run(2, 1e9, [0.012] * 3),  # unshaped 5 / 12 ms: CPU-bound, not judged
            _run(4, 1e8, [sl.predictions(4, 1e6, 1e8)["line_rate"] / 0.95] * 3)]  # no unshaped run: not judged
    a = sl.analyze(runs)
    rows = {(r["ranks"], r["rate_bps"]): r for r in a["rows"]}
    assert rows[2, 1e8]["link_bound"] and not rows[2, 1e9]["link_bound"] and not rows[4, 1e8]["link_bound"]
    assert rows[2, 1e8]["cpu_share"] == pytest.approx(0.005 / (line / 0.95))
    assert rows[2, 1e8]["error"]["projected"] == pytest.approx(0.95 / 0.8 - 1, rel=1e-2)  # 0.8 of line vs 0.95 measured
    s = a["summary"]["mpi/default"]
    assert s["ranks_judged"] == [2] and s["link_bound_points"] == [[2, 1e8]]
    assert s["max_abs_error"]["projected"] == pytest.approx(abs(rows[2, 1e8]["error"]["projected"]))
    assert s["target_met"]["projected"] is False and s["target_met"]["line_rate"] is True
    assert "fitted" not in a["fits"]  # one link-bound point: nothing to fit
    assert rows[2, 1e8]["through_tbf"] == 1.0 and rows[2, 1e8]["distinct_hosts"] == 2
    assert rows[2, 1e8]["tbf_burst_share"] == pytest.approx(131072 / 1e6)


# ---------------------------------------------------------------- the in-box cluster, for real (root)

def _why_not() -> str | None:
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    return sl.preflight()


def needs_root(test):
    """The real runs: root for the namespaces (skipped without it, saying why), and mpirun across them."""
    for mark in (pytest.mark.root, pytest.mark.mpi,
                 pytest.mark.skipif(_why_not() is not None, reason=f"shaped_links: {_why_not()}")):
        test = mark(test)
    return test
TINY = ["--ranks", "2", "--rates-gbit", "1", "--transports", "default", "--floats", "100000"]


def _leftovers(pid: int) -> list[str]:
    """Anything of the run whose process was `pid`: namespaces, links here, processes naming its tag."""
    tag = f"{netns.NAME_PREFIX}{pid}"
    found = [f"namespace {ns}" for ns in netns.our_namespaces(tag + "-")]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [f"link {line}" for line in links.splitlines() if tag in line]
    found += [f"process {line}" for line in _cmdlines(tag)]
    return found


def _start(args: list[str], out) -> subprocess.Popen:
    # SIGINT back to its default in the child, as at a terminal: a job started in the background by a
    # non-interactive shell (e.g. CI) inherits SIGINT ignored, and Python then installs no Ctrl-C handler.
    return subprocess.Popen([sys.executable, "-m", "studies.shaped_links", *args, "--out", str(out)], cwd=ROOT,
                            env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@needs_root
def test_tiny_run_goes_over_the_shaped_links_and_cleans_up(tmp_path):
    import json

    p = _start(["--quick"], tmp_path)
    log, _ = p.communicate(timeout=900)
    assert p.returncode == 0, log[-4000:]
    assert _leftovers(p.pid) == []
    res = json.loads((tmp_path / "shaped_links.json").read_text())
    assert (tmp_path / "shaped_links.png").stat().st_size > 5000
    runs = {r["rate_bps"]: r for r in res["runs"]}
    assert set(runs) == {None, 1e9} and all("error" not in r for r in runs.values())
    shaped = runs[1e9]
    assert set(shaped["links"]) == {"n0:up", "n0:down", "n1:up", "n1:down"}  # both ends of both veths: a tbf
    for name, c in shaped["links"].items():
        assert c["qdisc_bytes"] > 4 * 100_000, name  # the exchanges' bytes passed every qdisc
        assert c["qdisc_bytes"] >= 0.9 * c["tx_bytes"], name  # ... and what the interface sent went through it
    for r in res["analysis"]["rows"]:
        assert r["distinct_hosts"] == 2  # each rank on its own "node"
        assert r["sent_bytes_per_rank"] >= 0.99 * r["ring_bytes_per_rank"]  # the message crossed the veth
        assert r["loopback_bytes_per_rank"] < 0.01 * r["sent_bytes_per_rank"]  # and not the loopback
        assert r["median_s"] > 0 and r["min_s"] <= r["median_s"] <= r["max_s"]
    row = next(r for r in res["analysis"]["rows"] if r["rate_bps"] == 1e9)
    assert set(row["predicted_s"]) >= {"projected", "framing", "line_rate"} and isinstance(row["link_bound"], bool)
    assert "mpi/default" in res["analysis"]["summary"]


@needs_root
def test_failure_mid_run_cleans_up(tmp_path):
    p = _start([*TINY, "--reps", "3", "--fail-after-runs", "1"], tmp_path)
    log, _ = p.communicate(timeout=900)
    assert p.returncode != 0 and "failing on purpose" in log, log[-4000:]
    assert "unshaped" in log  # it failed after the first run, with the cluster up
    assert _leftovers(p.pid) == []


@needs_root
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_exchange_cleans_up(tmp_path, sig):
    p = _start([*TINY, "--reps", "100000"], tmp_path)  # runs until signalled
    try:
        tag = f"{netns.NAME_PREFIX}{p.pid}"
        deadline = time.time() + 600
        while time.time() < deadline and not any("exchange_probe" in x for x in _cmdlines(tag)):
            assert p.poll() is None, p.stdout.read()[-4000:]
            time.sleep(0.5)
        assert netns.our_namespaces(tag + "-"), "the cluster should be up while the ranks exchange"
        time.sleep(2)  # the ranks are exchanging now
        p.send_signal(sig)
        log, _ = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0, log[-4000:]
    assert _leftovers(p.pid) == []


@needs_root
def test_leftovers_of_a_dead_run_are_removed_and_a_live_runs_kept(tmp_path):
    import tempfile

    with open("/proc/sys/kernel/pid_max") as fh:
        dead = f"{netns.NAME_PREFIX}{int(fh.read())}"  # pid_max itself is never a pid
    live = f"{netns.NAME_PREFIX}{os.getpid()}"
    dead_dir = os.path.join(tempfile.gettempdir(), f"{dead}-test")
    try:
        for ns in (f"{dead}-n0", f"{live}-n0"):
            subprocess.run(["ip", "netns", "add", ns], check=True)
        os.makedirs(dead_dir)
        removed = netns.remove_stale()
        assert f"{dead}-n0" in removed and dead_dir in removed
        assert netns.our_namespaces(dead + "-") == [] and not os.path.exists(dead_dir)
        assert netns.our_namespaces(live + "-") == [f"{live}-n0"]  # a running process's: left alone
    finally:
        for ns in (f"{dead}-n0", f"{live}-n0"):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(dead_dir, ignore_errors=True)


def _cmdlines(tag: str) -> list[str]:
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as fh:
                    line = fh.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if tag in line:
                out.append(line)
    return out


def test_refuses_to_run_without_what_it_needs(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "root" in sl.preflight()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda tool, path=None: None if tool == "tc" else f"/usr/bin/{tool}")
    assert "`tc`" in sl.preflight()
