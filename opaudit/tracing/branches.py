"""Device branches in torch's own Python (coverage_db/curated/device_branches.toml).

torch takes another path on some device types than on CUDA in a few places of its Python (GradScaler keeps its
inverse scale in float32 on MPS, in float64 elsewhere). The trace follows the CUDA path; the ops it records while
torch runs the CUDA arm of such a branch are marked ``within = "branch:<id>"``, so that the audit judges them, on
a target that takes the other arm, by that arm's ops, and the rehearsal of that target does not fail on ops the
device never runs.

The arm is found once per process: the function's source is parsed with :mod:`ast`, the conditional whose test
reads as the data says is found, and the instruction offsets of the CUDA arm's lines are read from the function's
code object (``co_lines``). Both recorders look an op's frames up by code object (a flag on the code's kind, so
that frames of other code cost nothing more) and ask :meth:`Branches.at` for the arm of a frame's offset.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import sys
import textwrap
import weakref
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

from opaudit.data import load_toml

PREFIX = "branch:"


@dataclass(frozen=True)
class Branch:
    id: str
    functions: tuple[str, ...]  # where the conditional is, in one PyTorch release or another
    conditions: tuple[str, ...]  # its test, as each release writes it
    cuda_arm: str
    devices: tuple[str, ...]
    other_arm: tuple[tuple[str, tuple[str, ...]], ...]  # (op, dtypes of its call)
    why: str
    source: str
    versions: str = ""  # the PyTorch releases whose source has the other arm (">=2.7"); "" for every one
    # an optimizer's setting the arm is taken by default for ("foreach"): the arm counts only while the step's
    # param group leaves it None (a program that asks for it runs the same path on every device)
    default_of: str = ""
    # a device type whose other arm has releases of its own ((device, versions), ...): XPU joined the transformer
    # encoder's fast path in 2.12, so it takes the other arm only before
    device_versions: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        """What the trace's ``within`` holds for the ops of its CUDA arm."""
        return PREFIX + self.id

    def taken_elsewhere(self, device_type: str, torch_version: str | None = None) -> bool:
        """Whether a device of this type, on PyTorch ``torch_version`` (None: the installed one), takes the
        other arm, and so never runs the recorded ops."""
        from opaudit.matrix.matrix import holds

        return device_type in self.devices and holds(dict(self.device_versions).get(device_type, self.versions),
                                                     torch_version)

    def describe(self, device_type: str) -> str:
        ops = ", ".join(op.removeprefix("aten::") + (f" ({'|'.join(d)})" if d else "") for op, d in self.other_arm)
        recorded = " (in the dtypes recorded)" if any(not d for _, d in self.other_arm) else ""
        return (f"torch takes another branch on {device_type} ({self.source}): it runs {ops or 'no op'} there "
                f"instead{recorded}")


@functools.cache
def branches() -> dict[str, Branch]:
    """Every branch of the data file, by its ``within`` label."""
    out = {}
    for e in load_toml("coverage_db", "curated/device_branches.toml").get("branch", []):
        functions, conditions = e["function"], e.get("condition", ())
        b = Branch(e["id"], (functions,) if isinstance(functions, str) else tuple(functions),
                   (conditions,) if isinstance(conditions, str) else tuple(conditions), e.get("cuda_arm", "body"),
                   tuple(e["devices"]),
                   tuple((o["op"], tuple(o.get("dtypes", ()))) for o in e.get("other_arm", [])), e["why"],
                   e["source"], e.get("versions", ""), e.get("default_of", ""),
                   tuple(sorted(e.get("device_versions", {}).items())))
        out[b.label] = b
    return out


@dataclass(frozen=True)
class KernelBranch:
    """An op the CUDA path reaches that aten's C++ replaces by ``instead`` for the tensors of some dispatch keys."""

    op: str  # "aten::_reshape_alias"
    dispatch_keys: tuple[str, ...]
    instead: str  # "aten::view"
    why: str
    source: str

    def describe(self) -> str:
        return f"{self.why} ({self.source}): the target runs {self.instead.removeprefix('aten::')}"


@functools.cache
def kernel_branches() -> dict[str, KernelBranch]:
    """The C++ device branches of the data file, by the recorded op's base name (``_reshape_alias``)."""
    out = {}
    for e in load_toml("coverage_db", "curated/device_branches.toml").get("kernel_branch", []):
        k = KernelBranch(e["op"], tuple(e["dispatch_keys"]), e["instead"], e["why"], e["source"])
        out[k.op.removeprefix("aten::")] = k
    return out


def kernel_instead(op: str, dispatch_key: str) -> KernelBranch | None:
    """The C++ branch by which a target of ``dispatch_key`` runs another op than ``op``
    (``aten::_reshape_alias.default`` or ``_reshape_alias``), if one does."""
    k = kernel_branches().get(op.removeprefix("aten::").split(".")[0])
    return k if k is not None and dispatch_key in k.dispatch_keys else None


def of(within: str | None) -> Branch | None:
    """The branch a trace row's ``within`` names, if it names one."""
    return branches().get(within) if within and within.startswith(PREFIX) else None


def _function(dotted: str) -> Any:
    """The function at ``dotted`` (``module.Class.method``), unwrapped; None where this torch lacks it."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return None
        return inspect.unwrap(obj)
    return None


def _arm_lines(fn: Any, b: Branch) -> set[int] | None:
    """The source lines (absolute) of the CUDA arms of the conditionals in ``fn`` whose test is one of
    ``b.conditions`` (every one: a function may test the same thing twice, as clip_grad_norm_ did for the norm and
    for the scaling)."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    if b.cuda_arm == "function":  # the whole function is the CUDA arm (an optimizer's foreach path)
        return set(range(first, first + len(lines)))
    text = textwrap.dedent("".join(lines))
    tree = ast.parse(text)
    wanted = {"".join(c.split()) for c in b.conditions}
    found: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.If, ast.IfExp)):
            continue
        test = ast.get_source_segment(text, node.test) or ""
        if "".join(test.split()) not in wanted:
            continue
        arm = getattr(node, b.cuda_arm)
        parts = arm if isinstance(arm, list) else [arm]
        found |= {first - 1 + n for p in parts for n in range(p.lineno, (p.end_lineno or p.lineno) + 1)}
    return found or None


class Branches:
    """The CUDA arms of the branches this torch has: code object -> offset ranges of each arm."""

    def __init__(self) -> None:
        self.arms: dict[int, list[tuple[int, int, str]]] = {}  # id(code) -> [(start, end, label)]
        self._codes: list[CodeType] = []  # keeps the ids theirs
        for b, fn in ((branch, _function(f)) for branch in branches().values() for f in branch.functions):
            code: CodeType | None = getattr(fn, "__code__", None)
            lines = _arm_lines(fn, b) if code is not None else None
            if code is None or not lines:
                continue
            ranges: list[tuple[int, int, str]] = []
            for start, end, line in code.co_lines():
                if line not in lines:
                    continue
                if ranges and ranges[-1][1] == start:  # one range per run of the arm's instructions
                    ranges[-1] = (ranges[-1][0], end, b.label)
                else:
                    ranges.append((start, end, b.label))
            if ranges:
                self.arms.setdefault(id(code), []).extend(ranges)
                self._codes.append(code)

    def holds(self, code: CodeType) -> bool:
        return id(code) in self.arms

    def at(self, code: CodeType, offset: int) -> str | None:
        """The label of the arm the instruction at ``offset`` of ``code`` is in, if any (called by the recorders
        with the op's Python stack live, which an arm taken by an optimizer's default reads)."""
        for start, end, label in self.arms.get(id(code), ()):
            if start <= offset < end:
                key = branches()[label].default_of
                return label if not key or _defaulted(key, sys._getframe(1)) else None
        return None

    def around(self, frame: FrameType | None = None) -> Branch | None:
        """The branch whose CUDA arm runs on the stack at ``frame`` (the caller's, by default): slow, for the
        rare calls that need it (the rehearsal's dtype checks)."""
        if not self.arms:
            return None
        f: FrameType | None = frame if frame is not None else sys._getframe(1)
        while f is not None:
            if id(f.f_code) in self.arms:
                label = self.at(f.f_code, f.f_lasti)
                if label is not None:
                    return branches()[label]
            f = f.f_back
        return None


# optimizers that pass a setting only to stand for its default on an accelerator: the tracer's own AdamW, which
# asks for foreach where the parameters are on the CPU or on meta (torch would pick the loop there)
stand_for_default: weakref.WeakSet[Any] = weakref.WeakSet()


def _defaulted(key: str, frame: FrameType | None) -> bool:
    """Whether the optimizer step running at ``frame`` leaves ``key`` of its param group None (torch chooses
    it per device): the ``group`` an optimizer's ``step`` loops over, in every release since 2.0; or is one that
    stands for that default (:data:`stand_for_default`)."""
    for _ in range(40):
        if frame is None:
            return False
        if frame.f_code.co_name == "step":
            if frame.f_locals.get("self") in stand_for_default:
                return True
            group = frame.f_locals.get("group")
            if isinstance(group, dict) and key in group:
                return group[key] is None
        frame = frame.f_back
    return False


@functools.cache
def installed() -> Branches:
    """The branches of the installed torch (found once per process)."""
    return Branches()
