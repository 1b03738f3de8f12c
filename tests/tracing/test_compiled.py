"""torch.compile while opaudit records or rehearses (opaudit.tracing.compiled): the code runs eagerly, on both
CUDA engines and in the rehearsal, with the same ops as the uncompiled script, and the trace and the rehearsal
say where it was compiled. Before, Dynamo traced into the recorder (an assertion about opaudit's own handlers,
reported as the script's failure) and Inductor failed to compile for the simulated device."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from helpers import ROOT, run_cli

SCRIPT = ROOT / "tests" / "fixtures" / "scripts" / "cuda_bf16_fused.py"
SITE = re.compile(r"torch\.compile ran eagerly \(\S*cuda_bf16_fused\.py:\d+\)")


def _counts(data) -> Counter:
    return Counter({(r["op"], r["kind"], r["phase"], r["where"], tuple(r["dtypes"])): r["calls"]
                    for r in data["records"]})


@pytest.mark.parametrize("engine", ["stand-in", "simulator"])
def test_a_compiled_model_is_traced_as_it_runs_eagerly(tmp_path, engine):
    env = {} if engine == "stand-in" else {"OPAUDIT_CUDA_STAND_IN": "0"}
    traces = {}
    for name, extra in (("eager", []), ("compiled", ["--compile"])):
        out = tmp_path / f"{name}.json"
        rc, _, stderr = run_cli("trace", "-q", "--no-audit", "--json", str(out), "--", str(SCRIPT), *extra,
                                cwd=tmp_path, env=env)
        assert rc == 0, stderr[-2000:]
        traces[name] = json.loads(out.read_text())
    compiled, eager = traces["compiled"], traces["eager"]
    assert compiled["meta"]["simulated"]["engine"] == engine
    assert compiled["meta"]["status"] == "complete"
    assert [w for w in compiled["meta"]["warnings"] if SITE.search(w)], compiled["meta"]["warnings"]
    assert not [w for w in eager["meta"]["warnings"] if "torch.compile" in w]
    a, b = _counts(compiled), _counts(eager)
    assert {k: (a[k], b[k]) for k in set(a) | set(b) if a[k] != b[k]} == {}


def test_a_compiled_model_is_rehearsed_as_it_runs_eagerly(tmp_path):
    stats = {}
    for name, extra in (("eager", []), ("compiled", ["--compile"])):
        out = tmp_path / f"{name}.stats.json"
        rc, stdout, stderr = run_cli("run", "--simulate", "ascend", "--strict", "--stats", str(out), "--",
                                     str(SCRIPT), *extra, cwd=tmp_path)
        assert rc == 0, stderr[-2000:]
        stats[name] = json.loads(out.read_text())
    assert [w for w in stats["compiled"]["warnings"] if SITE.search(w)], stats["compiled"]
    assert stats["eager"]["warnings"] == []
    assert "warning: torch.compile ran eagerly" in stdout  # the last run's summary says it too

    def ops(s):
        return {(o["op"], o["path"]): o["calls"] for o in s["ops"]}

    assert ops(stats["compiled"]) == ops(stats["eager"])


def test_a_model_compiled_before_the_trace_is_traced_as_it_runs_eagerly():
    """A model compiled before ``opaudit.trace`` is called (``fullgraph=True`` too, which stopped the trace with
    torch's "found no compiled frames"): its original module runs, with the same records as the uncompiled
    model's, and the trace says it was compiled."""
    import torch

    import opaudit

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)
    eager = opaudit.trace(model, x, train=True)
    with pytest.warns(RuntimeWarning, match="compiled Sequential"):
        compiled = opaudit.trace(torch.compile(model, fullgraph=True), x, train=True)
    assert compiled.meta.status == "complete"
    assert [w for w in compiled.meta.warnings if "Sequential compiled before opaudit started" in w], \
        compiled.meta.warnings

    def counts(t):
        return Counter({(r.op, r.kind, r.phase, tuple(r.dtypes)): r.calls for r in t.records})

    a, b = counts(compiled), counts(eager)
    assert {k: (a[k], b[k]) for k in set(a) | set(b) if a[k] != b[k]} == {}


def test_a_function_compiled_before_the_trace_runs_eagerly():
    """A function compiled with fullgraph=True before the trace (called in the model's forward) runs eagerly
    too (torch.compiler's force_eager stance), and the stance before the trace is back after it."""
    import torch

    import opaudit

    double_relu = torch.compile(lambda x: torch.relu(x) * 2, fullgraph=True)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            return double_relu(self.linear(x))

    t = opaudit.trace(Model(), torch.randn(2, 4))
    assert t.meta.status == "complete"
    assert {"relu", "mul.Tensor"} <= {r.op.removeprefix("aten::").removesuffix(".default") for r in t.records}
    from torch._dynamo import eval_frame

    assert eval_frame._stance.stance == "default" and not torch._dynamo.config.disable
