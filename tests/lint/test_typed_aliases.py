"""OA109 on a target whose plugin has no typed tensor classes (musa, neutral; coverage_db/curated/vendors.toml
``legacy_types``): ``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`` and its uses are one port.
The alias becomes a factory of tensors of its dtype on the device (the CPU where the flag is false); a call with
sizes becomes ``torch.empty(..., **Tensor.keywords)``, ``x.type(Tensor)`` becomes ``x.to(**Tensor.keywords)``, a
call with data stays as it is. Where any use has no rewrite (a class test, the class passed on, a call that may be
given a size or data), nothing of the group is rewritten and its finding says why."""

from __future__ import annotations

import ast

import numpy as np
import pytest
import torch
from helpers import run_cli

from opaudit.lint import Settings, fix_source, lint_source

HEAD = (
    "import argparse\n"
    "import numpy as np\n"
    "import torch\n"
    "from torch.autograd import Variable\n"
    "\n"
    "opt = argparse.ArgumentParser().parse_args([])\n"
    "cuda = True if torch.cuda.is_available() else False\n"
)
PROGRAM = HEAD + (
    "Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor\n"
    "LongTensor = torch.cuda.LongTensor if cuda else torch.LongTensor\n"
    "\n"
    "\n"
    "def sample(n_row):\n"
    "    labels = np.array([num for _ in range(n_row) for num in range(n_row)])\n"
    "    labels = Variable(LongTensor(labels))\n"
    "    return labels\n"
    "\n"
    "\n"
    "imgs = torch.arange(6, dtype=torch.float64).reshape(3, 2)\n"
    "valid = Variable(Tensor(imgs.size(0), 1).fill_(1.0), requires_grad=False)\n"
    "real = Variable(imgs.type(Tensor))\n"
    "z = Variable(Tensor(np.ones((imgs.shape[0], 4))))\n"
    "ids = LongTensor(np.random.randint(0, 10, imgs.shape[0]))\n"
    "pair = Tensor([0.5, 1.5])\n"
    "none = Tensor()\n"
    "labels = sample(2)\n"
)
PORTED = HEAD.replace("torch.cuda.is_available", "torch.musa.is_available") + (
    'Tensor = functools.partial(torch.tensor, dtype=torch.float32, device="musa" if cuda else "cpu")\n'
    'LongTensor = functools.partial(torch.tensor, dtype=torch.int64, device="musa" if cuda else "cpu")\n'
    "\n"
    "\n"
    "def sample(n_row):\n"
    "    labels = np.array([num for _ in range(n_row) for num in range(n_row)])\n"
    "    labels = Variable(LongTensor(labels))\n"
    "    return labels\n"
    "\n"
    "\n"
    "imgs = torch.arange(6, dtype=torch.float64).reshape(3, 2)\n"
    "valid = Variable(torch.empty(imgs.size(0), 1, **Tensor.keywords).fill_(1.0), requires_grad=False)\n"
    "real = Variable(imgs.to(**Tensor.keywords))\n"
    "z = Variable(Tensor(np.ones((imgs.shape[0], 4))))\n"
    "ids = LongTensor(np.random.randint(0, 10, imgs.shape[0]))\n"
    "pair = Tensor([0.5, 1.5])\n"
    "none = torch.empty(0, **Tensor.keywords)\n"
    "labels = sample(2)\n"
)
MUSA = Settings(target="musa")


def _fixed(source: str, settings: Settings = MUSA) -> str:
    new = fix_source(source.encode(), settings).new
    assert new is not None
    return new.decode()


def _oa109(source: str, settings: Settings = MUSA) -> list:
    return [f for f in lint_source(source.encode(), settings).findings if f.code == "OA109"]


def test_the_alias_and_every_use_are_rewritten_together():
    fixed = _fixed(PROGRAM)
    body = fixed.replace("import torch_musa\n", "").replace("import functools\n", "")
    assert body == PORTED, fixed
    assert "import torch_musa\n" in fixed and "import functools\n" in fixed
    found = _oa109(PROGRAM)
    assert [(f.line, f.fix) for f in found] == [(8, "safe"), (9, "safe"), (19, "safe"), (20, "safe"), (24, "safe")]
    assert "2 calls with sizes -> torch.empty(..., **Tensor.keywords)" in found[0].message, found[0].message
    assert "2 calls with data, kept" in found[0].message and "1 x.type(Tensor) -> x.to(**Tensor.keywords)" in \
        found[0].message
    assert fix_source(fixed.encode(), MUSA).new == fixed.encode()  # nothing left for a second fix


def test_the_port_builds_what_the_legacy_classes_built_on_the_cpu():
    """Where the flag is false (no device), the port's tensors are the CPU classes' own: shape, dtype, data."""
    np.random.seed(0)
    legacy: dict = {}
    exec(compile(PROGRAM.replace("torch.cuda.is_available()", "False"), "legacy", "exec"), legacy)
    np.random.seed(0)
    port: dict = {}
    exec(compile(PORTED.replace("torch.musa.is_available()", "False").replace(
        "import torch\n", "import functools\nimport torch\n"), "port", "exec"), port)
    for name in ("valid", "real", "z", "ids", "pair", "none", "labels"):
        a, b = legacy[name], port[name]
        assert (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device), name
        if name != "none":
            assert torch.equal(a, b), name


REASONS = [
    ("ok = isinstance(real, Tensor)\n", "`isinstance(real, Tensor)` is a class test"),
    ("torch.set_default_tensor_type(Tensor)\n", "is given the class itself"),
    ("other = Tensor\n", "`other = Tensor` uses the class as a value"),
    ("name = Tensor.__name__\n", "reads an attribute of the class"),
    ("n = opt.n\nx = Tensor(n)\n", "`Tensor(n)` may be given a size or data"),
    ("x = Tensor(np.random.normal(0, 1))\n", "may be given a size or data"),  # a number: a size to the class
    ("x = Tensor(data=[1.0])\n", "may be given a size or data"),
    ("Tensor = torch.FloatTensor\n", "`Tensor` is bound more than once"),
]


@pytest.mark.parametrize(("use", "why"), REASONS, ids=[w.split("`")[1] if "`" in w else w for _, w in REASONS])
def test_a_use_without_a_rewrite_leaves_the_whole_group(use, why):
    source = HEAD + "Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor\n" \
                    "valid = Tensor(4, 1).fill_(1.0)\nreal = valid.type(Tensor)\n" + use
    assert _fixed(source, Settings(target="musa", unsafe_fixes=True)) == source  # not the alias, its uses or the probe
    found = _oa109(source)
    assert len(found) == 1 and found[0].line == 8 and found[0].fix == "suggestion"
    assert why in found[0].message and "rewritten with all its uses or not at all" in found[0].message


def test_the_groups_of_a_file_stand_alone():
    """Each alias is one group: one rewritten, one kept (its use is a class test); the probe stays CUDA's while the
    kept one remains, so the program keeps its CPU path."""
    source = HEAD + ("Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor\n"
                     "LongTensor = torch.cuda.LongTensor if cuda else torch.LongTensor\n"
                     "x = Tensor(2, 2)\n"
                     "ok = isinstance(x, LongTensor)\n")
    fixed = _fixed(source)
    assert "Tensor = functools.partial(" in fixed and "x = torch.empty(2, 2, **Tensor.keywords)" in fixed
    assert "LongTensor = torch.cuda.LongTensor if cuda else torch.LongTensor" in fixed
    assert "torch.cuda.is_available()" in fixed


def test_a_use_inside_another_rewrite_is_rewritten_inside_it():
    source = HEAD + ("Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor\n"
                     "a = Tensor(2, 3).cuda()\n"
                     "b = imgs.type(Tensor).cuda()\n")
    fixed = _fixed(source, Settings(target="musa", unsafe_fixes=True))  # (imgs.cuda(): not known to be a tensor)
    assert "a = torch.empty(2, 3, **Tensor.keywords).musa()" in fixed
    assert "b = imgs.to(**Tensor.keywords).musa()" in fixed
    ast.parse(fixed)


def test_scopes_and_shadowing():
    """Uses in functions are the alias's; a function with a `Tensor` of its own is not; an alias in a function is a
    group of that function."""
    source = HEAD + ("Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor\n"
                     "def penalty(real):\n"
                     "    alpha = Tensor(np.random.random((real.size(0), 1)))\n"
                     "    return Tensor(real.shape[0], 1).fill_(1.0) * alpha\n"
                     "def own(Tensor):\n"
                     "    return Tensor(3)\n"
                     "def step(n):\n"
                     "    T = torch.cuda.HalfTensor if cuda else torch.HalfTensor\n"
                     "    return T(n, 2)\n")
    fixed = _fixed(source)
    assert "    alpha = Tensor(np.random.random((real.size(0), 1)))\n" in fixed
    assert "    return torch.empty(real.shape[0], 1, **Tensor.keywords).fill_(1.0) * alpha\n" in fixed
    assert "    return Tensor(3)\n" in fixed  # a parameter
    assert '    T = functools.partial(torch.tensor, dtype=torch.float16, device="musa" if cuda else "cpu")\n' in fixed
    assert "    return torch.empty(n, 2, **T.keywords)\n" in fixed


def test_other_spellings_of_the_alias():
    """Unconditional, the flag negated, a call written one argument a line."""
    source = HEAD + ("Tensor = torch.FloatTensor if not cuda else torch.cuda.FloatTensor\n"
                     "Half = torch.cuda.HalfTensor\n"
                     "x = Tensor(\n    4,\n    1,\n)\n"
                     "y = Half(2, 2)\n")
    fixed = _fixed(source)
    assert 'Tensor = functools.partial(torch.tensor, dtype=torch.float32, device="cpu" if not cuda else "musa")' \
        in fixed
    assert 'Half = functools.partial(torch.tensor, dtype=torch.float16, device="musa")' in fixed
    assert "x = torch.empty(\n    4,\n    1,\n    **Tensor.keywords,\n)\n" in fixed
    assert "y = torch.empty(2, 2, **Half.keywords)" in fixed


def test_a_module_others_may_import_is_an_unsafe_fix():
    """A module-level alias of a file that is no script (no argument parsing, no __main__) may be imported and called
    as a class elsewhere: the group needs --unsafe-fixes, and so does the probe."""
    source = "import torch\ncuda = torch.cuda.is_available()\n" \
             "Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor\nx = Tensor(2)\n"
    assert {f.fix for f in lint_source(source.encode(), MUSA).findings} == {"unsafe"}
    assert _fixed(source) == source  # nothing half done, and no import left behind
    assert "x = torch.empty(2, **Tensor.keywords)" in _fixed(source, Settings(target="musa", unsafe_fixes=True))


def test_targets_with_typed_classes_keep_the_class():
    fixed = _fixed(PROGRAM, Settings(target="ascend"))
    assert "Tensor = torch.npu.FloatTensor if cuda else torch.FloatTensor" in fixed
    assert "Variable(Tensor(imgs.size(0), 1).fill_(1.0)" in fixed and "functools" not in fixed


def test_neutral_writes_the_accelerator():
    fixed = _fixed(PROGRAM, Settings(target="neutral", min_torch="2.6"))
    assert "device=torch.accelerator.current_accelerator() if cuda else \"cpu\")" in fixed, fixed


def test_the_port_runs_on_the_simulated_device(tmp_path):
    """The port, rehearsed on musa with CUDA absent: the flag is true there and the tensors land on the device."""
    script = tmp_path / "legacy_gan.py"
    script.write_text(_fixed(PROGRAM + "assert valid.device.type == real.device.type == z.device.type == 'musa'\n"
                             "assert ids.dtype == torch.int64 and labels.device.type == 'musa'\n"
                             "print('on', valid.device, real.dtype, z.dtype, ids.dtype)\n"))
    code, out, err = run_cli("run", "--simulate", "musa", "--no-map-cuda", "--", str(script), cwd=tmp_path)
    assert code == 0, out + err
    assert "on musa:0 torch.float32 torch.float32 torch.int64" in out, out + err


SOLVER = (
    "import numpy as np\n"
    "import torch\n"
    "import torch.nn as nn\n"
    "\n"
    "\n"
    "class BaseSolver(object):\n"
    "    def __init__(self):\n"
    "        self.use_gpu = torch.cuda.is_available()\n"
    "        self.Tensor = torch.cuda.FloatTensor if self.use_gpu else torch.FloatTensor\n"
    "\n"
    "\n"
    "class Solver(BaseSolver):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.LR = self.Tensor()\n"
    "        self.net = nn.Conv2d(3, 3, 1)\n"
    "        if self.use_gpu:\n"
    "            self.net = self.net.cuda()\n"
    "\n"
    "    def feed(self, batch):\n"
    "        assert isinstance(batch, torch.Tensor)\n"
    "        self.LR.resize_(batch.size()).copy_(batch)\n"
    "        flipped = self.Tensor(batch.numpy()[:, :, ::-1].copy())\n"
    "        return self.net(self.LR) + self.net(flipped)\n"
)


def test_an_attribute_alias_becomes_a_function_that_builds_what_the_class_built():
    """``self.Tensor = torch.cuda.FloatTensor if self.use_gpu else torch.FloatTensor`` (SRFBN's BaseSolver,
    Paper99/SRFBN_CVPR19 at 046f693, solvers/base_solver.py:15): subclasses in other modules call it with nothing,
    sizes or an ndarray, which no rewrite of this file can see, so the CUDA class becomes a function that builds the
    CPU class's tensor from whatever it is given and moves it to the device; its calls stay. Unsafe: another module
    may use it as a class."""
    found = _oa109(SOLVER)
    assert [(f.line, f.fix) for f in found] == [(9, "unsafe")], found
    assert "2 calls here stay as they are" in found[0].message and "may use it as a class" in found[0].message
    safe = _fixed(SOLVER)  # unsafe: not without --unsafe-fixes, the probe neither
    assert "torch.cuda.is_available()" in safe and "self.Tensor = torch.cuda.FloatTensor if" in safe
    fixed = _fixed(SOLVER, Settings(target="musa", unsafe_fixes=True))
    assert '        self.Tensor = (lambda *size_or_data: torch.FloatTensor(*size_or_data).to("musa")) if ' \
           'self.use_gpu else torch.FloatTensor\n' in fixed, fixed
    assert "torch.musa.is_available()" in fixed and "self.net.musa()" in fixed
    assert "self.LR = self.Tensor()\n" in fixed and "flipped = self.Tensor(batch" in fixed  # calls as they were
    assert lint_source(fixed.encode(), Settings(target="musa")).findings == []


def test_the_function_builds_what_the_class_built():
    """The factory's tensors are the CPU class's, whatever it was given: nothing, sizes, a torch.Size, a list, an
    ndarray (of another dtype too), a tensor."""
    factory = eval("lambda *size_or_data: torch.FloatTensor(*size_or_data).to('cpu')", {"torch": torch})
    for args in ((), (2, 3), (torch.Size([4, 1]),), ([0.5, 1.5],), (np.ones((2, 2), dtype=np.float32),),
                 (np.linspace(0, 1, 3),), (torch.arange(3.0),)):
        a, b = torch.FloatTensor(*args), factory(*args)
        assert (a.shape, a.dtype, a.device) == (b.shape, b.dtype, b.device), args
        if a.numel() and args and not isinstance(args[0], int) and not isinstance(args[0], torch.Size):
            assert torch.equal(a, b), args


def test_an_attribute_alias_with_a_use_that_needs_the_class_stays_whole():
    for use, why in (("        ok = isinstance(batch, self.Tensor)\n", "is a class test"),
                     ("        x = batch.type(self.Tensor)\n", "needs the class"),
                     ("        name = self.Tensor.__name__\n", "reads an attribute of the class"),
                     ("        self.Tensor = torch.FloatTensor\n", "is bound more than once")):
        source = SOLVER + use
        assert _fixed(source, Settings(target="musa", unsafe_fixes=True)).count("torch.cuda.") == 2, use
        (found,) = _oa109(source)
        assert found.fix == "suggestion" and why in found.message, found.message


def test_an_attribute_alias_passed_on_is_called_where_it_goes(tmp_path):
    """pix2pix's style: the alias given to a loss that builds its targets with it (``self.Tensor(input.size())``).
    Rehearsed on musa with CUDA absent, the port's tensors are on the device and the loss trains."""
    script = tmp_path / "gan_loss.py"
    script.write_text(
        "import torch\nimport torch.nn as nn\n\n\n"
        "class GANLoss(nn.Module):\n"
        "    def __init__(self, tensor=torch.FloatTensor):\n"
        "        super().__init__()\n"
        "        self.Tensor = tensor\n"
        "        self.loss = nn.MSELoss()\n\n"
        "    def forward(self, input, real):\n"
        "        target = self.Tensor(input.size()).fill_(1.0 if real else 0.0)\n"
        "        return self.loss(input, target)\n\n\n"
        "class Model:\n"
        "    def __init__(self):\n"
        "        self.gpu = torch.cuda.is_available()\n"
        "        self.Tensor = torch.cuda.FloatTensor if self.gpu else torch.Tensor\n"
        "        self.Tensor = torch.cuda.FloatTensor if self.gpu else torch.FloatTensor\n"
        "\n\n"
        "class Pix2Pix:\n"
        "    def __init__(self):\n"
        "        self.gpu = torch.cuda.is_available()\n"
        "        self.Tensor = torch.cuda.FloatTensor if self.gpu else torch.FloatTensor\n"
        "        self.net = nn.Linear(4, 1)\n"
        "        if self.gpu:\n"
        "            self.net.cuda()\n"
        "        self.criterion = GANLoss(tensor=self.Tensor)\n\n\n"
        "if __name__ == '__main__':\n"
        "    torch.manual_seed(0)\n"
        "    m = Pix2Pix()\n"
        "    opt = torch.optim.SGD(m.net.parameters(), lr=0.1)\n"
        "    x = m.Tensor(8, 4).normal_()\n"
        "    loss = m.criterion(m.net(x), True)\n"
        "    loss.backward()\n"
        "    opt.step()\n"
        "    print('on', x.device.type, loss.device.type)\n")
    found = {f.line: f for f in _oa109(script.read_text())}
    # GANLoss's own `self.Tensor = tensor` is its attribute; Model binds its own twice: its groups stay
    assert sorted(found) == [19, 20, 26]
    assert found[19].fix == found[20].fix == "suggestion" and "bound more than once" in found[19].message
    assert found[26].fix == "unsafe" and "passed on 1 time, to be called" in found[26].message, found[26].message
    script.write_text(script.read_text().replace(
        "class Model:\n    def __init__(self):\n        self.gpu = torch.cuda.is_available()\n"
        "        self.Tensor = torch.cuda.FloatTensor if self.gpu else torch.Tensor\n"
        "        self.Tensor = torch.cuda.FloatTensor if self.gpu else torch.FloatTensor\n", ""))
    assert "Model" not in script.read_text()  # (its groups left would keep the file's probes CUDA's)
    code, out, err = run_cli("fix", "-t", "musa", "--unsafe-fixes", str(script), cwd=tmp_path)
    assert code == 0, out + err
    code, out, err = run_cli("run", "--simulate", "musa", "--no-map-cuda", "--", str(script), cwd=tmp_path)
    assert code == 0, out + err
    assert "on musa musa" in out, out + err


def test_a_name_alias_given_sizes_or_data_unknown_becomes_the_function():
    """A call whose argument may be a size or data (``Tensor(n)``, n read from options) had no rewrite; with no
    x.type(Tensor) beside it, the alias becomes the function and every call stays."""
    source = HEAD + "Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor\n" \
                    "n = opt.n if hasattr(opt, 'n') else 3\nx = Tensor(n)\ny = Tensor(4, 1).fill_(1.0)\n"
    fixed = _fixed(source)
    assert 'Tensor = (lambda *size_or_data: torch.FloatTensor(*size_or_data).to("musa")) if cuda else ' \
           'torch.FloatTensor\n' in fixed, fixed
    assert "x = Tensor(n)\ny = Tensor(4, 1).fill_(1.0)\n" in fixed and "functools" not in fixed
    (found,) = _oa109(source)
    assert found.fix == "safe" and "`Tensor(n)` may be given a size or data" in found.message


def test_a_typed_class_named_as_a_string_is_found_and_ported():
    """x.type("torch.cuda.FloatTensor") converts and x.type() == "torch.cuda.HalfTensor" tests as the class does; lint
    saw only the class. Where the plugin has typed classes the name becomes its own (torch_npu's Tensor.type takes
    it); elsewhere the conversion gets .to(device, dtype) as a suggestion and the test is named for a hand rewrite."""
    source = ('import torch\nx = torch.ones(2)\ny = x.type("torch.cuda.FloatTensor")\n'
              'if x.type() == "torch.cuda.HalfTensor":\n    print(1)\nname = "torch.cuda.amp"\n')
    ported = fix_source(source.encode(), Settings(target="ascend")).new.decode()
    assert 'x.type("torch.npu.FloatTensor")' in ported and '== "torch.npu.HalfTensor"' in ported
    assert '"torch.cuda.amp"' in ported  # not a typed class's name
    found = [f for f in lint_source(source.encode(), MUSA).findings if f.code == "OA109"]
    assert [f.line for f in found] == [3, 4] and found[0].replacement == 'x.to("musa", torch.float32)'
    assert "compare or convert the tensor's dtype and device" in found[1].message
