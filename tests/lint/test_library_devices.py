"""OA715: a call of an installed package's function that picks CUDA for its caller. Small packages are built on disk
(tmp_path) and put on sys.path as an installed package would be; the linted script lives in a project of its own.
Each finding must name the library's file and line, and `fix` must pass the parameter that controls the choice
with the target's device, or leave the call where none does."""

from __future__ import annotations

import ast
import importlib.util
import os
import textwrap

import pytest
from helpers import run_cli

from opaudit.lint import Settings, fix_source, installed, lint_source

PACKAGES = {
    # a training framework's AMP helpers: one picks CUDA itself, one takes the device type, one passes it on
    "fakeamp/__init__.py": """
        from .helpers import autocast_ctx, outer, smart_amp_autocast
    """,
    "fakeamp/helpers.py": """
        import torch


        def smart_amp_autocast(enabled=True):
            return torch.autocast(device_type="cuda", enabled=enabled)


        def autocast_ctx(enabled=True, device_type=None):
            device_type = device_type or "cuda"
            return torch.autocast(device_type=device_type, enabled=enabled)


        def outer(enabled=True, **kwargs):
            return autocast_ctx(enabled, **kwargs)
    """,
    # a data-loading helper that pins batches for CUDA (a module of its own, not a package)
    "fakeloader.py": """
        from torch.utils.data import DataLoader


        def loader(dataset, pin_memory_device="cuda", batch_size=8):
            return DataLoader(dataset, batch_size=batch_size, pin_memory=True, pin_memory_device=pin_memory_device)
    """,
    # a distributed helper that asks for NCCL, and a class that moves its model with .cuda()
    "fakedist/__init__.py": """
        import torch
        import torch.distributed as dist


        def init(backend="nccl"):
            dist.init_process_group(backend)


        class Runner:
            def __init__(self, model):
                self.model = model.cuda()
    """,
}

SCRIPT = """\
import torch
from fakeamp import autocast_ctx, outer, smart_amp_autocast
from fakeloader import loader
import fakedist

with smart_amp_autocast():
    pass
with autocast_ctx():
    pass
with outer(enabled=True):
    pass
dl = loader(ds)
fakedist.init()
runner = fakedist.Runner(model)
with autocast_ctx(device_type="cpu"):
    pass
dl = loader(ds, "cpu")
fakedist.init(backend=args.backend)
"""


@pytest.fixture
def site(tmp_path, monkeypatch):
    folder = tmp_path / "site"
    for name, text in PACKAGES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    monkeypatch.syspath_prepend(str(folder))
    return folder


@pytest.fixture
def script(tmp_path, site):
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    path = project / "train.py"
    path.write_text(SCRIPT)
    return path


def findings(path, target, **kw):
    return [f for f in lint_source(path.read_bytes(), Settings(target=target, **kw), str(path)).findings
            if f.code == "OA715"]


def test_each_call_names_where_the_library_picks_cuda(script):
    found = {f.line: f for f in findings(script, "ascend")}
    assert sorted(found) == [6, 8, 10, 12, 13, 14]  # none where the call passes the device or backend
    assert "`fakeamp.smart_amp_autocast` at fakeamp/helpers.py:5 `torch.autocast(device_type=\"cuda\", " \
           "enabled=enabled)`; no argument of it changes that" in found[6].message
    assert found[6].fix == "suggestion" and "patch fakeamp/helpers.py:5" in found[6].replacement
    assert "fakeamp/helpers.py:9 `\"cuda\"`" in found[8].message and "unless the call passes `device_type`" \
        in found[8].message
    assert found[8].fix == "unsafe" and found[8].replacement == 'autocast_ctx(device_type="npu")'
    assert found[10].fix == "unsafe" and found[10].replacement == 'outer(enabled=True, device_type="npu")'
    assert "fakeloader.py:4 `pin_memory_device=\"cuda\"` (its default)" in found[12].message
    assert found[12].fix == "safe" and found[12].replacement == 'loader(ds, pin_memory_device="npu")'
    assert "fakedist/__init__.py:5 `backend=\"nccl\"` (its default)" in found[13].message
    assert found[13].replacement == 'fakedist.init(backend="hccl")'
    assert "fakedist/__init__.py:11 `model.cuda()`" in found[14].message and found[14].fix == "suggestion"


@pytest.mark.parametrize(("target", "device", "backend", "package"), [("ascend", "npu", "hccl", "torch_npu"),
                                                                       ("musa", "musa", "mccl", "torch_musa")])
def test_fix_passes_the_targets_device(script, target, device, backend, package):
    before = script.read_bytes()
    fixed = fix_source(before, Settings(target=target, unsafe_fixes=True), str(script))
    assert fixed.error is None
    new = fixed.new.decode()
    ast.parse(new)
    assert f'with autocast_ctx(device_type="{device}"):' in new
    assert f'with outer(enabled=True, device_type="{device}"):' in new
    assert f'dl = loader(ds, pin_memory_device="{device}")' in new
    assert f'fakedist.init(backend="{backend}")' in new
    assert "with smart_amp_autocast():" in new and "runner = fakedist.Runner(model)" in new  # nothing to pass
    assert f"import {package}" in new
    assert fix_source(fixed.new, Settings(target=target, unsafe_fixes=True), str(script)).new == fixed.new
    left = lint_source(fixed.new, Settings(target=target), str(script)).findings
    assert sorted(f.line for f in left if f.code == "OA715") == [7, 15]  # what no argument changes stays
    safe = fix_source(before, Settings(target=target), str(script)).new.decode()
    assert f'pin_memory_device="{device}"' in safe and "autocast_ctx()" in safe  # the steered ones need --unsafe-fixes


def test_a_project_module_of_the_same_name_is_the_projects(script):
    (script.parent / "fakeloader.py").write_text("def loader(dataset, pin_memory_device='cuda'):\n    pass\n")
    assert 12 not in [f.line for f in findings(script, "ascend")]


def test_a_file_without_a_trigger_word_is_read_for_its_library_calls(tmp_path, site):
    path = tmp_path / "plain.py"
    path.write_text("from fakeloader import loader\n\ndl = loader(ds)\n")
    assert [f.line for f in findings(path, "ascend")] == [3]
    assert findings(path, "ascend", ignore=("OA715",)) == []
    path.write_text("import os\n\nos.path.join('a', 'b')\n")
    assert lint_source(path.read_bytes(), Settings(target="ascend"), str(path)).skipped


def test_rocm_and_a_changed_library(tmp_path, site):
    path = tmp_path / "t.py"
    path.write_text("from fakeloader import loader\ndl = loader(ds)\n")
    assert findings(path, "rocm") == []  # HIP answers to "cuda"
    module = site / "fakeloader.py"
    module.write_text(module.read_text().replace('pin_memory_device="cuda"', 'pin_memory_device=""'))
    os.utime(module, ns=(1, 1))  # another modification time: read again
    assert findings(path, "ascend") == []


def test_lint_on_the_command_line_with_pythonpath(script, site):
    code, out, _ = run_cli("lint", "--target", "musa", str(script), env={"PYTHONPATH": str(site)}, fresh=True)
    assert code == 1
    assert "train.py:12:6: OA715 [*] an installed library's function picks CUDA for its caller: " \
           "`fakeloader.loader` at fakeloader.py:4" in out


def test_a_real_installed_package():
    """A function of a package installed in this environment whose default is CUDA, found at test time."""
    candidates = [("timm", "from timm.utils import NativeScaler\nscaler = NativeScaler()\n",
                   "timm/utils/cuda.py:", 'NativeScaler(device="npu")'),
                  ("transformers", "from transformers.integrations.sinq import replace_with_sinq_linear\n"
                                   "model = replace_with_sinq_linear(model)\n",
                   "transformers/integrations/sinq.py:", 'replace_with_sinq_linear(model, device="npu:0")')]
    tried = []
    for package, source, where, rewrite in candidates:
        if importlib.util.find_spec(package) is None:
            continue
        q = source.split("\n")[0].replace("from ", "").replace(" import ", ".")
        found = installed.callee(q)
        if found is None or not any(ch.default for ch in found.choices):
            continue  # another version: the default moved
        tried.append(package)
        result = lint_source(source.encode(), Settings(target="ascend"))
        (finding,) = [f for f in result.findings if f.code == "OA715"]
        assert finding.line == 2 and where in finding.message and finding.fix == "safe"
        assert rewrite in fix_source(source.encode(), Settings(target="ascend")).new.decode()
    if not tried:
        pytest.skip("no installed package here has a function that defaults to CUDA")


def _project_findings(tmp_path, monkeypatch, source: str) -> list:
    """The ascend findings of ``source`` as train.py of a project of its own, with tmp_path/site on sys.path."""
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    script = project / "train.py"
    script.write_text(source)
    return findings(script, "ascend")


def test_a_type_is_not_a_choice_and_an_optional_path_is_info(tmp_path, monkeypatch):
    """A CUDA name in a signature's annotation (`scaler: GradScaler | None`) picks nothing; a choice on a path the
    library takes under a condition of its own (`if amp_mode == "amp"`, a call in one branch) is shown as info:
    the default path may never choose CUDA (pytorch-ignite's create_supervised_trainer, in the held-out set)."""
    folder = tmp_path / "site" / "fakeengine"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(textwrap.dedent("""
        import torch
        from torch.cuda.amp import GradScaler


        def _check(amp_mode: str | None, scaler: bool | GradScaler | None) -> str | None:
            return amp_mode


        def _amp_step(model):
            def step(x):
                with torch.autocast("cuda", enabled=True):
                    return model(x)
            return step


        def _plain_step(model):
            return model


        def trainer(model, amp_mode=None, scaler=False):
            mode = _check(amp_mode, scaler)
            if mode == "amp":
                return _amp_step(model)
            return _plain_step(model)


        def typed(model, scaler: GradScaler | None = None):
            return model
    """).lstrip())
    found = _project_findings(tmp_path, monkeypatch,
                              "from fakeengine import trainer, typed\nt = trainer(model)\nu = typed(model)\n")
    assert [(f.line, f.severity) for f in found] == [(2, "info")], found
    assert "fakeengine/__init__.py:11" in found[0].message and "under a condition of its own" in found[0].message


def test_a_class_is_what_its_objects_run_by_themselves(tmp_path, monkeypatch):
    """A class's choices are those its objects make without the caller naming a method: __init__ and the special
    methods, forward (a module called runs it) and the methods these call on self. A method the caller calls by name
    (`model.parallelize()`, transformers' GPT-2 before 5.0, in the third held-out set) is that call's, not the
    class's."""
    folder = tmp_path / "site" / "fakemodels"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(textwrap.dedent("""
        import torch


        class LM(torch.nn.Module):
            def __init__(self, width):
                super().__init__()
                self.model_parallel = False
                self.head = torch.nn.Linear(width, width)

            def parallelize(self, device_map=None):
                self.devices = range(torch.cuda.device_count())
                self.model_parallel = True

            def forward(self, x):
                if self.model_parallel:
                    torch.cuda.set_device(0)
                return self.head(x)


        class Placed(torch.nn.Module):
            def __init__(self, width):
                super().__init__()
                self.head = torch.nn.Linear(width, width)
                self._place()

            def _place(self):
                self.head.to("cuda")
    """).lstrip())
    found = _project_findings(tmp_path, monkeypatch,
                              "from fakemodels import LM, Placed\nlm = LM(8)\nplaced = Placed(8)\n")
    assert [(f.line, f.severity) for f in found] == [(2, "info"), (3, "error")], found
    assert "fakemodels/__init__.py:16" in found[0].message and "fakemodels/__init__.py:11" not in found[0].message
    assert "fakemodels/__init__.py:27" in found[1].message and "no argument of it changes that" in found[1].message
