"""Device branches in torch's own Python (coverage_db/curated/device_branches.toml, opaudit/tracing/branches.py):
the ops torch runs in its CUDA arm are marked in the trace, judged on a target that takes the other arm by that
arm's ops, and not held against that target's rehearsal."""

from __future__ import annotations

import inspect
import json

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


def _attention(mask: bool) -> tuple[nn.Module, nn.Module, torch.Tensor, torch.Tensor | None]:
    torch.manual_seed(0)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2,
                                enable_nested_tensor=mask).eval()
    mha = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2]) if mask else None
    return enc, mha, torch.randn(2, 5, 32), pad


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_attention_s_fast_paths_are_judged_by_the_path_each_device_takes():
    """In inference, MultiheadAttention and TransformerEncoderLayer run one fused op on cpu, cuda and the PrivateUse1
    device, their general path on mps, xla and xpu (the encoder layer's fused op on xpu from 2.12): MPS has neither
    fused op, and was reported failing on both; Ascend's PrivateUse1 device runs them, the encoder layer's on its CPU
    fallback. The encoder's mask check runs on every device (_nested_tensor_from_mask_left_aligned, which MPS lacks:
    a padding mask fails there for real, before the device test), its nested-tensor conversion only on the fast
    path's devices."""
    enc, mha, x, pad = _attention(mask=True)
    engines = ["python"] + (["native"] if native.load() is not None else [])
    for name in engines:
        with recorder_engine(name), opaudit.record() as rec, torch.no_grad():
            h = enc(x, src_key_padding_mask=pad)
            mha(h, h, h)
        marked = {(r.op, r.within.removeprefix("branch:nn.")) for r in rec.trace.records
                  if r.within and r.within.startswith("branch:nn.")}
        assert marked == {("aten::_native_multi_head_attention.default", "mha.fast_path"),
                          ("aten::_transformer_encoder_layer_fwd.default", "transformer_encoder_layer.fast_path"),
                          ("aten::_nested_tensor_from_mask.default", "transformer_encoder.nested"),
                          ("aten::logical_not.default", "transformer_encoder.nested"),
                          ("aten::to_padded_tensor.default", "transformer_encoder.nested")}, name
        assert any(r.op == "aten::_nested_tensor_from_mask_left_aligned.default" and r.within is None
                   for r in rec.trace.records)
    targets = ["mps@2.14.1", "xpu@2.7", "xpu@2.14", "ascend@2.14.0"]
    a = opaudit.audit(rec.trace, targets, landscape=False)
    assert a.verdict("mps@2.14.1").missing == ["_nested_tensor_from_mask_left_aligned (forward)"]
    f = a.frame.set_index(["target", "op"])
    fused = ("aten::_native_multi_head_attention.default", "aten::_transformer_encoder_layer_fwd.default")
    for op in fused:
        assert f.loc[("mps@2.14.1", op), "status"] in ("native", "composite")
        assert "another branch on mps" in f.loc[("mps@2.14.1", op), "note"]
    # xpu: MultiheadAttention's general path in every release, the encoder layer's fused op from 2.12
    assert "another branch on xpu" in f.loc[("xpu@2.7", fused[1]), "note"]
    assert "branch" not in f.loc[("xpu@2.14", fused[1]), "note"]
    assert "another branch on xpu" in f.loc[("xpu@2.14", fused[0]), "note"]
    # the PrivateUse1 device takes both fast paths: judged as recorded
    assert f.loc[("ascend@2.14.0", fused[1]), "status"] == "cpu_fallback"
    assert not any("branch" in f.loc[("ascend@2.14.0", op), "note"] for op in fused)

    # without a padding mask nothing of the encoder's conversion runs, and MPS runs the whole model
    enc, mha, x, _ = _attention(mask=False)
    with opaudit.record() as rec, torch.no_grad():
        h = enc(x)
        mha(h, h, h)
    a = opaudit.audit(rec.trace, ["mps@2.1.0", "mps@2.14.1"], landscape=False)
    assert [(a.verdict(t).verdict, a.verdict(t).missing) for t in ("mps@2.1.0", "mps@2.14.1")] == [("runs", [])] * 2


@pytest.mark.parametrize("label", ["branch:nn.mha.fast_path", "branch:nn.transformer_encoder_layer.fast_path"])
def test_each_attention_module_s_other_arm_is_what_its_general_path_runs(label):
    """The data's other arm of a fast path, held to the ops the module's general path records here (grad enabled,
    which takes it on the CPU): MultiheadAttention with and without attention weights and with a float mask, the
    encoder layer with relu and gelu."""
    declared = {op for op, _ in branches.branches()[label].other_arm}
    torch.manual_seed(0)
    x = torch.randn(2, 5, 32)
    if label == "branch:nn.mha.fast_path":
        mha = nn.MultiheadAttention(32, 4, batch_first=True).eval()
        mask = torch.zeros(5, 5)
        calls = [lambda: mha(x, x, x), lambda: mha(x, x, x, need_weights=False),
                 lambda: mha(x, x, x, attn_mask=mask)]
    else:
        layers = [nn.TransformerEncoderLayer(32, 4, 64, activation=act, batch_first=True).eval()
                  for act in ("relu", "gelu")]
        calls = [lambda layer=layer: layer(x) for layer in layers]
    for call in calls:
        with opaudit.record() as rec:
            call()
        ran = {r.op.removesuffix(".default") for r in rec.trace.records if r.kind != "api"}
        assert ran and ran <= declared, ran - declared


def test_the_strict_rehearsal_of_mps_runs_attention_s_fast_paths_as_its_general_path(tmp_path):
    """The rehearsal's device for mps is a PrivateUse1 device, which takes the fused ops' path: MPS lacks them,
    and a strict rehearsal failed on the first one though the real device never calls it. Ascend's runs one on the
    vendor's CPU fallback, as the audit says."""
    script = FIXTURES / "scripts" / "attention_inference.py"
    rc, out, err = run_cli("run", "--simulate", "mps", "--strict", "--", str(script), cwd=tmp_path)
    assert rc == 0, err[-2000:]
    assert "runs on the device" in out + err
    rc, out, err = run_cli("run", "--simulate", "ascend", "--strict", "--", str(script), cwd=tmp_path)
    assert rc == 0 and "_transformer_encoder_layer_fwd" in out + err and "vendor_cpu" in out + err, err[-2000:]


def test_an_op_aten_replaces_for_a_targets_tensors_is_judged_as_that_op(tmp_path):
    """A C++ device branch (device_branches.toml kernel_branch): reshape reaches _reshape_alias on CUDA, view on XLA.
    xla lacks _reshape_alias (its CPU fallback would run it), yet never receives it: judged as view there, and as
    recorded on a PrivateUse1 plugin's device, which receives it."""
    script = FIXTURES / "scripts" / "reshape_views.py"
    code, _, err = run_cli("trace", "-q", "-t", "xla@2.9.0", "-t", "ascend", "--audit-json", "a.json", "--",
                           str(script), cwd=tmp_path)
    assert code == 0, err[-2000:]
    doc = json.loads((tmp_path / "a.json").read_text())
    row = next(o for o in doc["ops"] if o["op"] == "aten::_reshape_alias.default")
    xla, ascend = row["results"]["xla@2.9.0"], next(v for k, v in row["results"].items() if k.startswith("ascend"))
    assert xla["status"] == "native" and xla["via"] == "view" and "TensorShape.cpp" in xla["note"]
    assert ascend["via"] is None and "TensorShape.cpp" not in ascend["note"]
    assert "_reshape_alias" not in " ".join(doc["targets"][0]["cpu_fallback"] + doc["targets"][0]["missing"])
