"""bench/rehearsal_corpus.py, on a corpus of one program of this repository's own
(tests/fixtures/rehearsal_corpus/): a CPU reference, two unported rehearsals, a port rehearsed under
--strict --no-map-cuda, and a trace, each checked for training, for its losses against the CPU's and for
its device ops against the trace's."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

from helpers import FIXTURES, ROOT

FIXTURE = FIXTURES / "rehearsal_corpus"


def _bench():
    spec = importlib.util.spec_from_file_location("rehearsal_corpus_bench", ROOT / "bench" / "rehearsal_corpus.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_corpus_script_rehearses_a_program_three_ways(tmp_path):
    corpus = tmp_path / "corpus"
    shutil.copytree(FIXTURE / "owner__tiny", corpus / "owner__tiny")
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "rehearsal_corpus.py"), "--corpus", str(corpus),
                           "--manifest", str(FIXTURE / "corpus.toml"), "--out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    (prog,) = results["programs"]
    runs = {r["kind"]: r for r in prog["runs"]}
    assert set(runs) == {"cpu", "sim:ascend", "sim:musa", "port", "trace"}
    assert all(r["rc"] == 0 and r["reason"] is None for r in runs.values()), {k: r["stderr_tail"] for k, r in
                                                                             runs.items() if r["rc"]}
    assert all(r["trains"] for r in runs.values())
    assert runs["cpu"]["probe"]["device"] == "cpu" and runs["cpu"]["probe"]["backwards"] == 4
    assert runs["sim:ascend"]["probe"]["device"] == "npu:0" and runs["sim:musa"]["probe"]["device"] == "musa:0"
    assert runs["port"]["probe"]["device"] == "npu:0" and runs["trace"]["probe"]["device"] == "cuda:0"
    for kind in ("sim:ascend", "sim:musa", "port", "trace"):
        assert runs[kind]["loss_reference"] == "cpu" and runs[kind]["loss_match"], runs[kind]["loss_rel_diff"]
    for kind in ("sim:ascend", "sim:musa", "port"):
        ops = runs[kind]["device_ops"]
        assert ops["equal"], ops
    # torch_npu registers zeros (an LSTM's initial state); PyTorch's is CompositeExplicitAutograd: the stand-in
    # receives its parts, which the comparison reports apart
    assert "zeros" in runs["sim:ascend"]["device_ops"]["stand_in_composite"]
    assert "zeros" not in runs["sim:musa"]["device_ops"]["stand_in_composite"]
    assert "Fixed" in runs["port"]["fix"]["summary"]  # the port rewrote the TF32 switch and the device
    table = out.with_suffix(".md").read_text()
    assert "| tiny-lstm (owner/tiny train.py) |" in table and "ops =" in table
    assert "Runs that exit 0: 5/5; that train: 5/5; losses matching the reference: 4/4; the trace's device ops " \
           "equal the rehearsal's: 3/3." in table and "None: every run exited 0." in table


def test_why_a_run_failed():
    bench = _bench()
    assert bench._reason(0, "", None) is None
    assert bench._reason(3, "error: x failed: ModuleNotFoundError: No module named 'torch_npu'", None) == \
        "stand-in import: no module torch_npu"
    assert bench._reason(3, "error: RuntimeError: Expected all tensors to be on the same device, but found "
                            "at least two devices, npu:0 and cpu!", {"loads": 1}).startswith("checkpoint")
    assert not bench._reason(3, "error: RuntimeError: Expected all tensors to be on the same device",
                             {"loads": 0}).startswith("checkpoint")
    assert bench._reason(-6, "terminate called without an active exception\n", None).startswith("abort")
    ref, run = {"probe": {"losses": [2.0, 1.0]}}, {"probe": {"losses": [2.0, 1.001, 0.5]}}
    assert abs(bench._loss_diff(ref, run) - 1e-3) < 1e-9
    assert bench._loss_diff(ref, {"probe": {"losses": []}}) is None


def test_a_run_of_some_programs_keeps_the_others_results(tmp_path):
    bench = _bench()
    manifest = {"program": [{"id": "a"}, {"id": "b"}, {"id": "c"}]}
    header = {"vendors": ["ascend"], "port_target": "ascend", "loss_rtol": 1e-3}
    out = tmp_path / "results.json"
    old = {**header, "programs": [{"id": "a", "runs": "old a"}, {"id": "b", "runs": "old b"},
                                  {"id": "gone", "runs": "no longer in the manifest"}]}
    out.write_text(json.dumps(old))
    kept = bench._kept(out, {**header, "programs": []}, manifest)
    assert [p["id"] for p in kept] == ["a", "b"]
    order = [p["id"] for p in manifest["program"]]
    ran = [{"id": "c", "runs": "new c"}]  # after each program the file is written again: what has run so far
    assert [(p["id"], p["runs"]) for p in bench._merged(ran, kept, order)] == [
        ("a", "old a"), ("b", "old b"), ("c", "new c")]
    ran.append({"id": "a", "runs": "new a"})
    merged = bench._merged(ran, kept, order)
    assert [(p["id"], p["runs"]) for p in merged] == [("a", "new a"), ("b", "old b"), ("c", "new c")]
    # results made with other vendors (or another tolerance) are not comparable: nothing is kept
    assert bench._kept(out, {**header, "vendors": ["musa"], "programs": []}, manifest) == []
    assert bench._kept(tmp_path / "none.json", {**header, "programs": []}, manifest) == []


def test_paths_of_the_machine_that_ran_and_quoted_source_lines_are_left_out():
    bench = _bench()
    run = {"reason": None, "stderr_tail": (
        "/home/u/src/opaudit/opaudit/rehearsal/device.py:653: UserWarning: x\n"
        "  File \"/tmp/rc-p-1/p-sim-ascend/main.py\", line 3\n"
        "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/rnn.py:1: UserWarning: y\n"
        "  File \"/srv/ck/bench/rehearsal_corpus/probe/sitecustomize.py\", line 75, in backward\n"
        "    return original(self, *args, **kwargs)")}
    bench._tidy(run)
    assert run["stderr_tail"] == (
        "opaudit/rehearsal/device.py:653: UserWarning: x\n"
        "  File \"main.py\", line 3\n"
        "site-packages/torch/nn/modules/rnn.py:1: UserWarning: y\n"
        "  File \"bench/rehearsal_corpus/probe/sitecustomize.py\", line 75, in backward")
