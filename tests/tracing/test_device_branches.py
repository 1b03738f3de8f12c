"""Device branches in torch's own Python (coverage_db/curated/device_branches.toml, opaudit/tracing/branches.py):
the ops torch runs in its CUDA arm are marked in the trace, judged on a target that takes the other arm by that
arm's ops, and not held against that target's rehearsal."""

from __future__ import annotations

import inspect

import pytest
import torch
from helpers import FIXTURES, recorder_engine, run_cli
from torch import nn

import opaudit
from opaudit.tracing import branches, native

SCRIPT = FIXTURES / "scripts" / "grad_scaler_fp16.py"
LABEL = "branch:grad_scaler.inverse_scale"


def test_the_cuda_arm_is_found_in_the_installed_torch():
    b = branches.installed()
    code = torch.amp.GradScaler.unscale_.__code__
    assert b.holds(code)
    # the instructions of the arm's line, and of no other line
    src, first = inspect.getsourcelines(torch.amp.GradScaler.unscale_)
    arm_line = first + next(i for i, text in enumerate(src) if ".double().reciprocal().float()" in text)
    inside = {line for start, end, line in code.co_lines() if b.at(code, start) == LABEL}
    assert inside == {arm_line}


def test_a_conditional_that_is_not_in_the_source_marks_nothing(monkeypatch):
    """A torch whose function lacks the conditional (an older release) is traced as it runs."""
    real = branches.branches()
    changed = {k: branches.Branch(**{**vars(v), "conditions": ("self._scale.device.type == 'mps'",)})
               for k, v in real.items() if v.cuda_arm != "function"}
    monkeypatch.setattr(branches, "branches", lambda: changed)
    assert branches.Branches().arms == {}


def _train() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()


@pytest.fixture(scope="module")
def traces():
    out = {}
    engines = ["python"] + (["native"] if native.load() is not None else [])
    for name in engines:
        with recorder_engine(name), opaudit.record() as rec:
            _train()
        out[name] = rec.trace
    return out


def test_both_recorders_mark_the_ops_of_the_cuda_arm(traces):
    for name, trace in traces.items():
        marked = {(r.op, r.phase, r.dtypes) for r in trace.records if r.within == LABEL}
        assert marked == {("aten::_to_copy.default", "optimizer", ("float32->float64",)),
                          ("aten::reciprocal.default", "optimizer", ("float64",)),
                          ("aten::_to_copy.default", "optimizer", ("float64->float32",))}, name
        # the rest of unscale_ (the found_inf tensor, the unscaling itself) is outside the arm
        assert any(r.op.startswith("aten::_amp_foreach_non_finite") and r.within is None for r in trace.records)


def test_the_audit_judges_the_arm_by_the_target_s_own_branch(traces):
    trace = traces.get("native") or traces["python"]
    a = opaudit.audit(trace, ["mps@2.8.0", "mps@2.7.1", "ascend"], landscape=False)
    f = a.frame[a.frame.within == LABEL]
    new, old, ascend = (f[f.target == t] for t in ("mps@2.8.0", "mps@2.7.1", a.verdict("ascend").target))
    # mps on a PyTorch whose GradScaler has the MPS arm: the float32 reciprocal it runs instead, no finding
    assert set(new.status) == {"native"} and all("another branch on mps" in n for n in new.note)
    assert not any("float64" in op for op in a.verdict("mps@2.8.0").missing)
    # before that arm (PyTorch 2.7), MPS runs the float64 step too, and cannot
    assert "missing" in set(old.status) and any("float64" in n for n in old.note)
    # a target of another device type takes the CUDA arm: judged as recorded
    assert set(ascend.status) == {"native"} and not any("branch" in n for n in ascend.note)


def test_the_strict_rehearsal_of_a_release_without_the_other_arm_fails_on_it(tmp_path):
    """(The newest MPS, which takes the other arm, runs the script: tests/rehearsal/test_dtype_truth.py's
    differential holds every target's strict rehearsal to the audit's verdict.)"""
    rc, out, err = run_cli("run", "--simulate", "mps@2.7.1", "--strict", "--", str(SCRIPT), cwd=tmp_path)
    assert rc == 3, err[-2000:]
    line = next(n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1) if "scaler.unscale_(" in text)
    assert "float64" in err and f"{SCRIPT}:{line}" in err


def _clip() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    nn.functional.cross_entropy(model(x), y).backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def test_gradient_clipping_is_judged_by_the_path_each_device_takes():
    """clip_grad_norm_ runs _foreach_norm and _foreach_mul_ on the devices of torch's foreach list, one tensor at a
    time elsewhere (mps, xla): MPS before 2.4 has no _foreach_ kernel, yet clipping runs there. Each release has
    the test in its own place (clip_grad_norm_ up to 2.5, two functions from 2.6): the same marks were checked
    under PyPI's torch 2.1.2, 2.5.1 and 2.7.1."""
    label = "branch:clip_grad.foreach"
    engines = ["python"] + (["native"] if native.load() is not None else [])
    for name in engines:
        with recorder_engine(name), opaudit.record() as rec:
            _clip()
        marked = {r.op for r in rec.trace.records if r.within == label}
        assert marked == {"aten::_foreach_norm.Scalar", "aten::_foreach_mul_.Tensor"}, name
    a = opaudit.audit(rec.trace, ["mps@2.3.0", "ascend"], landscape=False)
    assert a.verdict("mps@2.3.0").verdict == "runs" and not a.verdict("mps@2.3.0").missing
    f = a.frame[a.frame.within == label]
    old, ascend = (f[f.target == t] for t in ("mps@2.3.0", a.verdict("ascend").target))
    assert all("another branch on mps" in n and "linalg_vector_norm" in n for n in old.note)
    assert not any("branch" in n for n in ascend.note)  # the PrivateUse1 device takes the foreach path


@pytest.mark.parametrize("label", sorted(k for k in branches.branches() if k.startswith("branch:optim.foreach.")))
def test_each_optimizer_s_other_arm_is_what_its_single_tensor_path_runs(label):
    """The data's other arm of an optimizer's foreach path, held to the ops torch's single-tensor path records here
    (the optimizer with its default settings, foreach=False, two steps on the CPU); ops on host tensors aside."""
    b = branches.branches()[label]
    name = b.id.rsplit(".", 1)[-1]
    classes = {"adam": ["Adam", "AdamW"], "rmsprop": ["RMSprop"], "nadam": ["NAdam"], "radam": ["RAdam"],
               "asgd": ["ASGD"], "sgd": ["SGD"]}.get(name, [name.capitalize()])
    declared = {op for op, _ in b.other_arm}
    for cls in classes:
        torch.manual_seed(0)
        m = nn.Linear(4, 2)
        opt = getattr(torch.optim, cls)(m.parameters(), lr=0.1, foreach=False,
                                        **({"momentum": 0.9} if cls == "SGD" else {}))
        for _ in range(2):
            m(torch.randn(3, 4)).sum().backward()
            with opaudit.record() as rec:
                opt.step()
            opt.zero_grad()
        ran = {r.op.removesuffix(".default") for r in rec.trace.records}
        assert ran - declared <= {"aten::_local_scalar_dense", "aten::lift_fresh"}, (cls, ran - declared)


MODEL = """import torch
from torch import nn
def get_model():
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
def get_inputs():
    return (torch.randn(4, 8),)
"""


def test_an_optimizer_s_default_foreach_path_is_judged_by_the_path_each_device_takes(tmp_path):
    """scan --train on the CUDA path: AdamW left to its default steps through _foreach_ ops on CUDA and the
    PrivateUse1 devices, one tensor at a time on mps (MPS before 2.4 has no _foreach_ kernel, and runs it); a
    program that passes foreach=True asks for that path on any device, and MPS 2.3 cannot run it."""
    (tmp_path / "m.py").write_text(MODEL)
    (tmp_path / "f.py").write_text(MODEL + "def get_optimizer(params):\n"
                                   "    return torch.optim.AdamW(params, foreach=True)\n")
    verdicts = {}
    for name in ("m", "f"):
        rc, out, err = run_cli("scan", f"{name}.py", "--train", "-t", "mps@2.3.0", "-t", "musa@1.2.1", "--json",
                               f"{name}.json", cwd=tmp_path)
        trace = opaudit.Trace.load(tmp_path / f"{name}.json")
        a = opaudit.audit(trace, ["mps@2.3.0", "musa@1.2.1"], landscape=False)
        verdicts[name] = {t: (a.verdict(t).verdict, a.verdict(t).missing) for t in ("mps@2.3.0", "musa@1.2.1")}
        marked = {(r.op, r.phase) for r in trace.records if r.within == "branch:optim.foreach.adam"}
        assert (("aten::_foreach_lerp_.Scalar", "optimizer") in marked) if name == "m" else not marked, marked
    assert verdicts["m"]["mps@2.3.0"] == ("runs", [])
    forced = verdicts["f"]["mps@2.3.0"]
    assert forced[0] == "fails" and "_foreach_lerp_.Scalar (optimizer)" in forced[1]
    # MUSA's PrivateUse1 device takes the foreach path either way: its missing _foreach_lerp_ stays
    for v in verdicts.values():
        assert v["musa@1.2.1"][0] == "fails" and [x.split(",")[0].rstrip(")") for x in v["musa@1.2.1"][1]] == \
            ["_foreach_lerp_.Scalar (optimizer"], verdicts
