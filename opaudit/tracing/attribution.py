"""Who issued an op: the module (a wrapped ``nn.Module.__call__``) and the user's source line (frame walk).

Backward ops are attributed through autograd sequence numbers by the recorder; this file supplies
the forward side that those numbers point back to.
"""

from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import torch
from torch import nn

from opaudit.tracing.branches import installed as installed_branches

_USER, _INTERNAL, _OPTIMIZER, _BACKWARD, _OPAUDIT = 0, 1, 2, 3, 4
_BRANCH = 8  # a flag on a code's kind: the code holds a device branch's CUDA arm (branches.py); never on _USER

# what SourceLocator.locate says about the frames it passed on the way to the user's line
HINT_NONE, HINT_OPTIMIZER, HINT_BACKWARD = 0, _OPTIMIZER, _BACKWARD
_BACKWARD_FUNCTIONS = frozenset({"backward", "grad", "_make_grads", "_engine_run_backward"})


def _in_site_packages(path: str) -> bool:
    return f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path


def _dir_of(module) -> str:
    return str(Path(module.__file__).resolve().parent) + os.sep


class ModuleStack:
    """The path of the module whose forward is running, kept while ``nn.Module.__call__`` is wrapped.

    Paths are the ``named_modules()`` names of ``root`` (``""`` is the root itself). A module the
    tracer was not told about is named from the module that called it, or, at top level, by its
    class name (a loss module, or any model of a script traced with ``opaudit trace``).
    """

    def __init__(self, root: nn.Module | None = None):
        self.stack: list[str] = []
        self.types: dict[str, str] = {}
        self._paths: dict[int, tuple[nn.Module, str]] = {}
        self._by_path: dict[str, nn.Module] = {}
        self._param_owner: dict[int, str] | None = None
        self._original: Callable[..., Any] | None = None
        if root is not None:
            for name, m in root.named_modules():
                self._remember(m, name)

    def _remember(self, module: nn.Module, path: str) -> str:
        self._paths[id(module)] = (module, path)
        self._by_path.setdefault(path, module)
        self.types.setdefault(path, type(module).__qualname__)
        self._param_owner = None
        return path

    def _name(self, module: nn.Module) -> str:
        if self.stack:
            parent_path = self.stack[-1]
            parent = self._by_path.get(parent_path)
            if parent is not None:
                for name, child in parent.named_modules():
                    if child is module and name:
                        return self._remember(module, f"{parent_path}.{name}" if parent_path else name)
            base = f"{parent_path}.<{type(module).__name__}>" if parent_path else f"<{type(module).__name__}>"
        else:
            base = type(module).__name__
        path, n = base, 1
        while path in self._by_path:
            n += 1
            path = f"{base}#{n}"
        for name, m in module.named_modules():  # its children get names under it at once
            if id(m) not in self._paths:
                self._remember(m, f"{path}.{name}" if name else path)
        return path

    def install(self) -> None:
        """Wrap ``nn.Module.__call__`` until :meth:`remove`.

        A wrapper, not global forward hooks: any global hook sends every module call down the slow
        path of ``Module._call_impl``, which costs more than the bookkeeping itself.
        """
        paths, stack, name = self._paths, self.stack, self._name
        original = self._original = nn.Module.__call__

        def __call__(module, *args, **kwargs):
            entry = paths.get(id(module))
            stack.append(entry[1] if entry is not None and entry[0] is module else name(module))
            try:
                return original(module, *args, **kwargs)
            finally:
                stack.pop()

        setattr(nn.Module, "__call__", __call__)  # noqa: B010 (a class attribute, set and restored)

    def remove(self) -> None:
        if self._original is not None:
            setattr(nn.Module, "__call__", self._original)  # noqa: B010
            self._original = None
        self.stack.clear()

    def owner_of(self, param: torch.Tensor) -> str | None:
        """The path of the module that holds ``param`` (for AccumulateGrad in backward); None for a
        leaf tensor that no known module holds (an input that requires grad)."""
        if self._param_owner is None:  # (re)built once after each newly named module
            owner: dict[int, str] = {}
            for module, path in list(self._paths.values()):
                for p in module.parameters(recurse=False):
                    owner.setdefault(id(p), path)
            self._param_owner = owner
        return self._param_owner.get(id(param))


class SourceLocator:
    """The first frame outside torch (and opaudit, and the standard library): the user's line.

    One dict lookup per frame: each code object is classified once. Frames of ``torch.optim``,
    the grad scalers and ``clip_grad`` mark the op as part of the optimizer step, and those of
    ``torch.autograd.backward`` as part of the backward pass.
    """

    def __init__(self):
        import opaudit

        opaudit_dir = _dir_of(opaudit)
        self._internal = (_dir_of(torch), opaudit_dir)
        # opaudit's driver calls the model, the default loss and the optimizer: a walk that reaches it
        # found no user line (the recorder's own frames, by contrast, sit under every op: skipped)
        self._driver = os.path.join(opaudit_dir, "tracing", "run.py")
        # the command line sits above the user's script: a walk that reaches it found no user line either (typer's
        # and click's frames above it are no one's code)
        self._cli = os.path.join(opaudit_dir, "cli") + os.sep
        stdlib = []
        for key in ("stdlib", "platstdlib"):
            p = sysconfig.get_paths().get(key)
            if p:
                stdlib.append(str(Path(p).resolve()) + os.sep)
        self._stdlib = tuple(stdlib)
        tdir = _dir_of(torch)
        self._optimizer = (
            os.path.join(tdir, "optim") + os.sep,
            os.path.join(tdir, "amp", "grad_scaler.py"),
            os.path.join(tdir, "cuda", "amp", "grad_scaler.py"),
            os.path.join(tdir, "nn", "utils", "clip_grad.py"),
        )
        # torch.autograd.backward seeds the gradient (ones_like) before the engine runs a node
        self._autograd = (
            os.path.join(tdir, "autograd") + os.sep,
            os.path.join(tdir, "_tensor.py"),
        )
        # keyed by id(code): hashing a code object hashes its bytecode, far too slow for every op;
        # the code objects are kept in _codes so that their ids stay theirs
        self._kind: dict[int, int] = {}
        self._codes: dict[int, CodeType] = {}
        self.branches = installed_branches()

    def _classify(self, code: CodeType) -> int:
        fn = code.co_filename
        if fn.startswith("<frozen"):
            kind = _INTERNAL
        else:
            full = os.path.realpath(fn) if os.path.isabs(fn) else fn
            if full.startswith(self._optimizer):
                kind = _OPTIMIZER
            elif full.startswith(self._autograd) and code.co_name in _BACKWARD_FUNCTIONS:
                kind = _BACKWARD
            elif full == self._driver or full.startswith(self._cli):
                kind = _OPAUDIT
            elif full.startswith(self._internal):
                kind = _INTERNAL
            elif full.startswith(self._stdlib) and not _in_site_packages(full):
                kind = _INTERNAL
            else:
                kind = _USER
        if kind != _USER and self.branches.holds(code):
            kind |= _BRANCH
        self._kind[id(code)] = kind
        self._codes[id(code)] = code
        return kind

    def kind_of(self, code: CodeType) -> int:
        """The kind of a code object (classified once per process)."""
        kind = self._kind.get(id(code))
        return self._classify(code) if kind is None else kind

    def locate(self, frame: FrameType | None) -> tuple[tuple[int, int] | None, int, str | None]:
        """(id of the code, instruction offset) of the first user frame at or above ``frame``, a phase hint, and
        the device branch (branches.py) whose CUDA arm torch runs on the way, if any.

        The offset, not the line: reading ``f_lineno`` decodes the line table on every op, while
        :func:`line_of` does it once per distinct location when the trace is built.

        The hint is HINT_OPTIMIZER or HINT_BACKWARD when the nearest torch frame on the way belongs
        to an optimizer step or to ``torch.autograd.backward``, else HINT_NONE.
        """
        kinds = self._kind
        hint = HINT_NONE
        branch = None
        while frame is not None:
            code = frame.f_code
            kind = kinds.get(id(code))
            if kind is None:
                kind = self._classify(code)
            if kind == _USER:
                return (id(code), frame.f_lasti), hint, branch
            if kind & _BRANCH:
                kind ^= _BRANCH
                if branch is None:
                    branch = self.branches.at(code, frame.f_lasti)
            if kind == _OPAUDIT:  # opaudit's own driver called it (default loss, optimizer): no user line
                return None, hint, branch
            if (kind == _OPTIMIZER or kind == _BACKWARD) and hint == HINT_NONE:
                hint = kind
            frame = frame.f_back
        return None, hint, branch


    def resolve(self, loc: tuple[int, int]) -> tuple[str, int]:
        """(file, line) of a location returned by :meth:`locate`."""
        code = self._codes[loc[0]]
        return code.co_filename, line_of(code, loc[1])


def line_of(code: CodeType, offset: int) -> int:
    """The source line of the instruction at byte ``offset`` of ``code``."""
    for start, end, line in code.co_lines():
        if start <= offset < end and line is not None:
            return line
    return code.co_firstlineno


@functools.cache
def source_locator() -> SourceLocator:
    """The process-wide locator: its per-code cache outlives one recording."""
    return SourceLocator()


def user_line() -> str | None:
    """The first user line on the stack ("train.py:42"), as the tracer finds it."""
    loc = source_locator()
    found, _, _ = loc.locate(sys._getframe(0))  # (frames above 0 may not exist on an autograd device thread)
    if found is None:
        return None
    path, line = loc.resolve(found)
    return f"{display_path(path)}:{line}"


@functools.cache
def _site_dirs() -> tuple[str, ...]:
    dirs = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # pragma: no cover - old virtualenv
        pass
    return tuple(sorted({os.path.realpath(d) + os.sep for d in dirs}, key=len, reverse=True))


def display_path(filename: str) -> str:
    """``filename`` as reports show it: relative to site-packages for installed packages, else to the working
    directory when below it (``train.py``), else absolute. The rehearsal's statistics show lines the same way."""
    if not os.path.isabs(filename):
        return filename
    full = os.path.realpath(filename)
    for d in _site_dirs():  # first: a virtual environment may well sit below the working directory
        if full.startswith(d):
            return full[len(d):]
    cwd = os.path.realpath(os.getcwd()) + os.sep
    if full.startswith(cwd):
        return full[len(cwd):]
    return full
