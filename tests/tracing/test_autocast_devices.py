"""torch.autocast on the target's device type (coverage_db/curated/autocast_devices.toml, opaudit/matrix/amp.py):
the autocast regions a program enters for CUDA are recorded, and judged on each target's release as torch's Python
answers the ported call there."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers import FIXTURES, run_cli

import opaudit
from opaudit.matrix import amp
from opaudit.matrix.matrix import holds

SCRIPT = FIXTURES / "scripts" / "autocast_regions.py"
LINES = {text: n for n, text in enumerate(SCRIPT.read_text().splitlines(), 1) if text.startswith("with torch.")}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("autocast")
    rc, out, err = run_cli("trace", "--json", "t.json", "-t", "cuda", "--", str(SCRIPT), cwd=tmp)
    assert rc == 0, err[-2000:]
    return opaudit.Trace.load(tmp / "t.json")


def test_the_cuda_regions_are_recorded_with_the_dtype_the_program_named(trace):
    regions = {(r.dtypes, r.source) for r in trace.records if r.op == amp.OP}
    # torch.cuda.amp.autocast() names no dtype (it passes float16 on, CUDA's default): ported, it takes the
    # device's; the region with enabled=False and the CPU's are no CUDA autocast
    named = LINES['with torch.autocast("cuda", dtype=torch.bfloat16):']
    legacy = LINES["with torch.cuda.amp.autocast():"]
    assert regions == {(("bfloat16",), f"{SCRIPT}:{named}"), ((), f"{SCRIPT}:{legacy}")}
    assert all(r.kind == "api" and r.calls == 1 for r in trace.records if r.op == amp.OP)


def test_each_release_judges_the_regions_as_its_torch_answers_them(trace):
    targets = ["mps@2.4.0", "mps@2.5.0", "mps@2.6.0", "mps@2.14.1", "xla@2.1.0", "xla@2.9.0", "ascend@2.14.0",
               "cuda"]
    a = opaudit.audit(trace, targets, landscape=False)
    f = a.frame[a.frame.op == amp.OP].set_index("target")
    # no autocast for mps before 2.5: the ported call raises, whatever its ops
    assert f.loc["mps@2.4.0", "status"] == "version_skew" and "PyTorch 2.5 added it" in f.loc["mps@2.4.0", "note"]
    v = a.verdict("mps@2.4.0")
    assert v.verdict == "version_skew" and v.needs_torch == "2.5"
    assert any("autocast for mps needs PyTorch 2.5" in s for s in v.advice)
    assert not any("re-trace" in s for s in v.advice)  # a re-trace under 2.4 would not change it
    # 2.5 lists float16 only: the bfloat16 region runs in float32 there
    assert f.loc["mps@2.5.0", "status"] == "native"
    assert "autocast in bfloat16 is off on mps in PyTorch 2.5.0" in " ".join(f.loc["mps@2.5.0", "caveats"])
    named = LINES['with torch.autocast("cuda", dtype=torch.bfloat16):']
    assert [x for x in a.verdict("mps@2.5.0").advice if "autocast" in x] == [
        "autocast in bfloat16 is off on mps in PyTorch 2.5.0, which lists float16: torch warns and the region runs in "
        f"float32 (its ops are judged here as the CUDA path ran them) ({SCRIPT}:{named})",
        # traced for -t cuda only: no trace of the regions as mps@2.5.0 runs them, which the advice says how to take
        "trace the code with -t mps@2.5.0 (without --no-retrace) to have it traced again as mps runs autocast "
        "(autocast off for regions in bfloat16 (float32)) and judged by that"]
    assert "macOS 13" in " ".join(f.loc["mps@2.6.0", "caveats"]) and not f.loc["mps@2.14.1", "caveats"]
    # xla: float16 is off in 2.1 (bfloat16 only), and the region without a dtype runs in xla's default, bfloat16
    assert "autocast in bfloat16 is off" not in " ".join(f.loc["xla@2.1.0", "caveats"])
    assert "runs in bfloat16 where the program names no dtype" in " ".join(f.loc["xla@2.9.0", "caveats"])
    # a plugin's device answers with its own list, which the data does not hold: judged as recorded
    assert f.loc["ascend@2.14.0", "status"] == "native" and not f.loc["ascend@2.14.0", "caveats"]
    assert f.loc[a.verdict("cuda").target, "status"] == "native" and not f.loc[a.verdict("cuda").target, "caveats"]


@pytest.mark.parametrize("device", sorted(d for d in amp.rules() if d != "cuda"))
def test_the_data_is_what_the_installed_torch_answers(device):
    """The rules for the installed torch, held to torch.autocast itself: whether the device type has autocast,
    which dtypes leave it on, and the default dtype (CUDA's autocast is off on a build without CUDA: not held)."""
    rule = amp.rules()[device]
    version = torch.__version__.split("+")[0]
    available = holds(rule.get("available", ""), version)
    assert torch.amp.is_autocast_available(device) == available
    if not available:
        return
    assert str(torch.get_autocast_dtype(device)).removeprefix("torch.") == rule["default"]
    listed = next(e["dtypes"] for e in rule["dtypes"] if holds(e["versions"], version))
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            on = torch.autocast(device, dtype=dtype)._enabled
        assert on == (str(dtype).removeprefix("torch.") in listed), (device, dtype)


def test_scan_amp_is_a_region_too(tmp_path):
    (tmp_path / "m.py").write_text("import torch\nfrom torch import nn\n"
                                   "def get_model():\n    return nn.Linear(8, 2)\n"
                                   "def get_inputs():\n    return (torch.randn(4, 8),)\n")
    rc, out, err = run_cli("scan", "m.py", "--amp", "bf16", "-t", "mps@2.4.0", "--json", "s.json", "-q",
                           cwd=tmp_path)
    trace = opaudit.Trace.load(tmp_path / "s.json")
    assert [(r.dtypes, r.phase) for r in trace.records if r.op == amp.OP] == [(("bfloat16",), "forward")]
    assert "no autocast for mps" in out + err


def test_the_rehearsal_answers_autocast_as_the_audit_judges_it(tmp_path):
    """One truth for both: the rehearsal of mps@2.4.0 fails at the program's first autocast (at its line), the
    rehearsal of mps@2.5.0 runs the bfloat16 region in float32 (autocast off, with torch's warning) and the
    legacy region in float16, and the newest runs both."""
    named = LINES['with torch.autocast("cuda", dtype=torch.bfloat16):']
    rc, out, err = run_cli("run", "--simulate", "mps@2.4.0", "--", str(SCRIPT), cwd=tmp_path)
    assert rc == 3 and "unsupported autocast device_type 'mps'" in err and f"line {named}" in err, err[-2000:]
    rc, out, err = run_cli("run", "--simulate", "mps@2.5.0", "--", str(SCRIPT), cwd=tmp_path)
    assert rc == 0, err[-2000:]
    assert "torch.float32 torch.float16 torch.float32" in out
    assert f"{SCRIPT}:{named}: UserWarning: In mps autocast, but the target dtype is not supported" in err
    rc, out, err = run_cli("run", "--simulate", "mps", "--", str(SCRIPT), cwd=tmp_path)
    assert rc == 0 and "torch.bfloat16 torch.float16 torch.float32" in out, err[-2000:]
