"""opaudit zoo: every model in a process of its own, a failure recorded and the zoo going on, the cache,
the outputs, and the same results from Ray tasks."""

from __future__ import annotations

import csv
import json

import pytest
from helpers import TINY_ZOO, TINY_ZOO_TARGETS

from opaudit.zoo.report import op_demand, summary
from opaudit.zoo.run import Job, ZooResult, job_key, resolve_targets, run_job, run_zoo, work


def _csv(out):
    with open(out / "zoo.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_the_csv_has_a_row_per_model_and_target_and_the_failure_with_its_reason(tiny_zoo):
    out, cache, stdout = tiny_zoo
    rows = _csv(out)
    keys = resolve_targets(TINY_ZOO_TARGETS)
    gpt2, bert, bad = TINY_ZOO
    assert [r["model"] for r in rows] == [gpt2] * len(keys) + [bert] * len(keys) + [bad]
    assert [r["target"] for r in rows[:len(keys)]] == keys
    by = {(r["model"], r["target"]): r for r in rows}
    # MUSA 1.2.1 lacks _foreach_lerp_, which AdamW's default foreach path runs on its PrivateUse1 device; MPS
    # before 2.4 has no _foreach_ kernel either, but torch steps AdamW one tensor at a time there
    # (device_branches.toml), so it runs
    assert by[gpt2, "musa@1.2.1"]["verdict"] == "fails" and by[bert, "musa@1.2.1"]["missing"] == "_foreach_lerp_.Scalar"
    assert by[gpt2, "mps@2.3.0"]["verdict"] == "runs" and by[gpt2, "mps@2.3.0"]["missing"] == ""
    assert by[gpt2, keys[0]]["family"] == "gpt2" and by[bert, keys[0]]["head"] == "MaskedLM"
    assert bad == rows[-1]["model"] and rows[-1]["verdict"] == "error" and rows[-1]["reason"] == "spec"
    assert "did you mean llama" in rows[-1]["error"]
    assert (out / "zoo.html").stat().st_size > 5000
    doc = json.loads((out / "zoo.json").read_text())
    assert doc["targets"] == keys and [m["spec"] for m in doc["models"]] == TINY_ZOO
    assert doc["op_demand"]["musa@1.2.1"] == [{"op": "_foreach_lerp_.Scalar", "models": 2, "blocked": [gpt2, bert]}]
    assert doc["op_demand"]["mps@2.3.0"] == []
    assert "3 models, 2 traced, 1 failed (spec 1); 0 from the cache" in stdout
    assert "musa@1.2.1: 0/2 run; 2 fail; most blocking: _foreach_lerp_.Scalar (2)" in stdout
    assert "mps@2.3.0: 2/2 run" in stdout


def test_a_rerun_takes_every_model_from_the_cache(tiny_zoo, monkeypatch):
    import opaudit.zoo.specs as specs

    out, cache, _ = tiny_zoo
    before = json.loads((out / "zoo.json").read_text())["models"]
    resolved = []  # a model type's spec resolves from the cache's table: no configuration is built again

    def load_spec(spec, build=True):
        resolved.append(spec)
        return real(spec, build=build)

    real = specs.load_spec
    monkeypatch.setattr(specs, "load_spec", load_spec)
    again = run_zoo(TINY_ZOO, targets=TINY_ZOO_TARGETS, train=True, jobs=2, cache=cache)
    assert again.cached == 2 and again.records == before and resolved == [TINY_ZOO[2]]  # the misspelt one
    # the key follows the configuration, the targets and the coverage data, not only the spec's text
    key = dict(targets=["xpu@2.14"], train=True, mode="auto", device="cuda", db_version="a")
    assert job_key("hf:x", "c1", **key) == job_key("hf:x", "c1", **key)
    changed = [{"db_version": "b"}, {"targets": ["xpu@2.13"]}, {"train": False}, {"mode": "meta"}]
    keys = {job_key("hf:x", "c1", **key), job_key("hf:x", "c2", **key),
            *(job_key("hf:x", "c1", **{**key, **c}) for c in changed)}  # type: ignore[arg-type]
    assert len(keys) == 2 + len(changed)


def _job(spec: str, **kw) -> Job:
    return Job(spec, "k", "f", "", "file", "h", ["xpu@2.14"], train=False, device="cpu", **kw)


def test_timeout_and_memory_cap_end_one_model_with_its_reason(tmp_path):
    slow = tmp_path / "slow.py"
    slow.write_text("import time, torch\n\ndef get_model():\n    time.sleep(60)\n    return torch.nn.Linear(2, 2)\n\n"
                    "def get_inputs():\n    return torch.randn(1, 2)\n")
    record = run_job(_job(str(slow), timeout=3))
    assert (record["status"], record["reason"]) == ("failed", "timeout") and record["duration_s"] < 20
    greedy = tmp_path / "greedy.py"
    greedy.write_text("import torch\n\ndef get_model():\n    m = torch.nn.Linear(2, 2)\n    m.big = torch.ones(2**33)\n"
                      "    return m\n\ndef get_inputs():\n    return torch.randn(1, 2)\n")  # 32 GiB of float32
    record = run_job(_job(f"{greedy}", memory=4 * 2**30, timeout=120))
    assert (record["status"], record["reason"]) == ("failed", "memory"), record


def test_a_timeout_is_cached_for_runs_whose_limits_are_no_larger(tmp_path):
    slow = tmp_path / "slow.py"
    slow.write_text("import time, torch\n\ndef get_model():\n    time.sleep(60)\n    return torch.nn.Linear(2, 2)\n\n"
                    "def get_inputs():\n    return torch.randn(1, 2)\n")
    cache = tmp_path / "cache"
    first = run_zoo([str(slow)], targets=TINY_ZOO_TARGETS, jobs=1, timeout=2, cache=cache)
    assert first.cached == 0 and first.records[0]["reason"] == "timeout"
    again = run_zoo([str(slow)], targets=TINY_ZOO_TARGETS, jobs=1, timeout=2, cache=cache)  # no 2 s spent again
    assert again.cached == 1 and again.records == first.records and again.wall_s < 2
    longer = run_zoo([str(slow)], targets=TINY_ZOO_TARGETS, jobs=1, timeout=3, cache=cache)  # may give more: run
    assert longer.cached == 0 and longer.records[0]["reason"] == "timeout" and longer.wall_s >= 3


def test_ray_tasks_give_the_results_of_the_local_processes(tiny_zoo):
    ray = pytest.importorskip("ray", reason="Ray is in .[test] (opaudit[ray])")
    out, _, _ = tiny_zoo
    local = [r for r in json.loads((out / "zoo.json").read_text())["models"] if r["spec"] != TINY_ZOO[1]]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = run_zoo([TINY_ZOO[0], TINY_ZOO[2]], targets=TINY_ZOO_TARGETS, train=True, jobs=2, cache=None,
                         executor="ray")
    finally:
        ray.shutdown()
    ignore = ("duration_s", "mode_reason")  # the seconds, and the memory available when the mode was chosen
    assert [{k: v for k, v in r.items() if k not in ignore} for r in result.records] == \
        [{k: v for k, v in r.items() if k not in ignore} for r in local]
    assert op_demand(result, "mps@2.3.0") == op_demand(ZooResult(local, result.targets, True), "mps@2.3.0")


def test_spec_files_and_bad_requests(tmp_path):
    from opaudit.errors import InputError
    from opaudit.zoo.specs import read_spec_file

    listed = tmp_path / "models.txt"
    listed.write_text("# our models\nhf:llama?num_hidden_layers=2   # the small one\n\nhf:bert\n")
    assert read_spec_file(listed) == ["hf:llama?num_hidden_layers=2", "hf:bert"]
    with pytest.raises(InputError, match="no such file|No such file"):
        read_spec_file(tmp_path / "absent.txt")
    with pytest.raises(InputError, match="no model given"):
        run_zoo([])
    with pytest.raises(InputError, match="unknown executor"):
        run_zoo(["hf:bert"], executor="slurm")


def test_a_library_the_model_needs_and_lacks_is_its_own_reason(tmp_path):
    needy = tmp_path / "needy.py"
    needy.write_text("import torch\n\ndef get_model():\n    import opaudit_absent_backbone  # noqa: F401\n"
                     "    return torch.nn.Linear(2, 2)\n\ndef get_inputs():\n    return torch.randn(1, 2)\n")
    record = work(_job(str(needy)))
    assert (record["status"], record["reason"]) == ("failed", "package"), record
    assert "opaudit_absent_backbone" in record["error"]


def test_a_model_that_reads_its_data_is_traced_for_real_where_auto_chose_meta(tmp_path, monkeypatch):
    reader = tmp_path / "reader.py"
    reader.write_text("import torch\n\nclass Router(torch.nn.Module):\n    def __init__(self):\n"
                      "        super().__init__()\n        self.proj = torch.nn.Linear(4, 4)\n\n"
                      "    def forward(self, x):\n        counts = (x > 0).sum(0).tolist()  # a MoE's routing, read\n"
                      "        return self.proj(x) * len(counts)\n\n"
                      "def get_model():\n    return Router()\n\ndef get_inputs():\n    return torch.randn(3, 4)\n")
    monkeypatch.setattr("opaudit.tracing.modes.COMFORT_SHARE", 0.0)  # auto takes meta for any model
    record = work(Job(str(reader), "k", "f", "", "file", "h", ["xpu@2.14"], train=True, device="cpu"))
    assert (record["status"], record["mode"]) == ("ok", "real"), record
    assert record["mode_reason"].startswith("meta could not run it (") and "meta tensor" in record["mode_reason"]
    record = work(Job(str(reader), "k", "f", "", "file", "h", ["xpu@2.14"], train=True, device="cpu", mode="meta"))
    assert (record["status"], record["reason"]) == ("failed", "forward")  # meta asked for: no retry
    # too big for real (its 20 parameters take 320 bytes with gradients and AdamW states): meta's failure stays
    record = work(Job(str(reader), "k", "f", "", "file", "h", ["xpu@2.14"], train=True, device="cpu", memory=100))
    assert (record["status"], record["reason"]) == ("failed", "forward") and "meta tensor" in record["error"]


def test_the_summary_tells_native_runs_from_cpu_fallback_runs():
    """zoo.csv says cpu_fallback; the terminal summary must not count those models as plain runs."""

    def model(spec: str, verdict: str) -> dict:
        return {"spec": spec, "status": "ok", "targets": [{"target": "ascend@2.6.0", "verdict": verdict,
                                                            "summary": "", "missing": ""}]}

    z = ZooResult([model("a", "runs"), model("b", "cpu_fallback"), model("c", "fails")], ["ascend@2.6.0"], False)
    line = next(x for x in summary(z) if x.startswith("  ascend@2.6.0"))
    assert line.startswith("  ascend@2.6.0: 1/3 run; 1 with ops on the CPU fallback; 1 fail"), line


def test_the_summary_names_a_failed_spec_once():
    """A spec that does not resolve says its own name first (InputError "hf:mixtrall: ..."): said once, not twice."""
    z = ZooResult([{"spec": "hf:mixtrall", "status": "failed", "reason": "spec", "targets": [],
                    "error": "hf:mixtrall: transformers has no model type 'mixtrall' (did you mean mixtral?)"},
                   {"spec": "hf:bert", "status": "failed", "reason": "forward", "targets": [],
                    "error": "the model failed in the forward pass: ValueError: x"}], ["ascend@2.6.0"], False)
    failed = [x for x in summary(z) if x.startswith("  failed: ")]
    assert failed == ["  failed: hf:mixtrall: transformers has no model type 'mixtrall' (did you mean mixtral?)",
                      "  failed: hf:bert: the model failed in the forward pass: ValueError: x"]


def test_a_rerun_resolves_library_models_from_the_cache_without_the_library(tmp_path, monkeypatch):
    """A diffusers class's defaults (and a transformers model type's configuration) are resolved once: a rerun
    plans the same jobs from the cache's table, without building a configuration or filling defaults again."""
    import opaudit.zoo.specs as specs
    from opaudit.zoo.run import plan

    pytest.importorskip("diffusers", reason="diffusers is in .[test]")
    models = ["diffusers:UNet2DModel?sample_size=8&block_out_channels=[8,8,16,16]&norm_num_groups=4",
              "hf:bert?num_hidden_layers=1"]
    options = dict(targets=["cuda@2.13"], train=True, mode="auto", device="cuda", timeout=60, memory=None,
                   threads=1, cache=tmp_path)
    first, bad = plan(models, **options)
    assert not bad and [j.family for j in first] == ["UNet2DModel", "bert"]

    def unresolvable(spec, build=True):
        raise AssertionError(f"{spec} resolved again")

    monkeypatch.setattr(specs, "load_spec", unresolvable)
    again, bad = plan(models, **options)
    assert not bad and [(j.key, j.family, j.config_hash) for j in again] == \
        [(j.key, j.family, j.config_hash) for j in first]
    # a file or a hub-cache spec is resolved every time: its content can change under the same name
    _, bad = plan(["hf:acme/tiny-gpt"], **options)
    assert "resolved again" in bad["hf:acme/tiny-gpt"]["error"]
    # each library's table stands on its own stamp: a changed diffusers resolver (here: one more package it
    # depends on) resolves the diffusers class again and leaves the transformers model type's resolution standing
    import opaudit.zoo.run as run

    monkeypatch.setitem(run._RESOLVED_BY, "diffusers", (("diffusers", "transformers", "numpy"),
                                                        run._RESOLVED_BY["diffusers"][1]))
    _, bad = plan(models, **options)
    assert list(bad) == [models[0]] and "resolved again" in bad[models[0]]["error"]


def _server_state() -> tuple[int, int, int]:
    """In a model's process: how many objects the collector leaves alone, and what is already cached there."""
    import gc

    from opaudit.matrix.database import load_database
    from opaudit.tracing import branches

    return gc.get_freeze_count(), branches.installed.cache_info().currsize, load_database.cache_info().currsize


def test_each_model_process_starts_from_the_servers_warm_frozen_state():
    """The fork server parses torch's device branches and loads the default targets' matrices once, then freezes
    its objects out of the collector's reach: a model's process neither redoes that work nor copies the server's
    pages by collecting them (bench/results/zoo_hf.json: the atlas's cold time)."""
    from opaudit.zoo.run import _context

    with _context().Pool(1) as pool:
        frozen, branches_cached, databases_cached = pool.apply(_server_state)
    assert frozen > 100_000  # torch's and transformers' objects
    assert branches_cached == 1 and databases_cached >= 1
