"""What to scan: a model file following the convention, or ``file.py:factory``.

The convention (docs/cli.md)::

    def get_model() -> torch.nn.Module            # required (or name a factory: model.py:make)
    def get_inputs() -> Tensor | tuple | dict      # required unless the factory returns (model, inputs)
    def get_loss(output, inputs) -> Tensor         # optional: default is the model's own loss, else a sum
    def get_optimizer(params) -> Optimizer         # optional: default AdamW (foreach on the CUDA path)

Factories are called with no arguments, possibly twice (first on the meta device, to measure the
model), so they should build, not load: random weights are what a trace needs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from opaudit.errors import InputError, UserCodeError, describe_exception, user_frames

CONVENTION = ("get_model", "get_inputs", "get_loss", "get_optimizer")


class UserExit(Exception):
    """The user's code called sys.exit() where opaudit needed a result."""

    def __init__(self, code: Any):
        super().__init__(f"the code called sys.exit({code!r})")
        self.code = code


def guarded(fn: Callable) -> Callable:
    """``fn`` with SystemExit turned into an exception that carries the user's frames."""

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SystemExit as e:
            raise UserExit(e.code) from e

    call.__name__ = getattr(fn, "__name__", "factory")
    return call


@dataclass
class ModelSpec:
    path: Path
    factory: str
    make_model: Callable[[], Any]  # returns a module, or a (module, inputs) pair
    make_inputs: Callable[[], Any] | None  # get_inputs, when the file defines it
    loss_fn: Callable[[Any, Any], Any] | None
    optimizer: Callable[[Any], Any] | None

    @property
    def source(self) -> dict[str, Any]:
        return {"kind": "model", "path": str(self.path), "factory": self.factory}


def split_target(target: str) -> tuple[str, str | None]:
    """``"model.py:make"`` -> ``("model.py", "make")``; a bare path -> ``(path, None)``."""
    head, sep, tail = target.rpartition(":")
    if sep and tail.isidentifier() and head:
        return head, tail
    return target, None


def import_file(path: Path) -> ModuleType:
    """Import a .py file by path. Its folder goes first on sys.path, and stays there, as for
    ``python file.py``: its factories may import sibling modules when they are called."""
    name = "_opaudit_user_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"{path} cannot be imported as Python (expected a .py file)")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(name, None)
        raise UserCodeError(f"{e.filename or path}, line {e.lineno}: {e.msg}",
                            details=(e.text or "").rstrip() or None) from None
    except SystemExit as e:
        sys.modules.pop(name, None)
        raise UserCodeError(f"importing {path.name} called sys.exit({e.code!r})", details=user_frames(e)) from None
    except Exception as e:
        sys.modules.pop(name, None)
        raise UserCodeError(f"importing {path.name} failed: {describe_exception(e)}", details=user_frames(e)) from None
    return module


def load_model_file(target: str) -> ModelSpec:
    """Import ``target`` (``model.py`` or ``model.py:factory``) and find its factories."""
    file, factory = split_target(target)
    path = Path(file).expanduser()
    if not path.exists():
        raise InputError(f"model file not found: {file}")
    if path.is_dir():
        raise InputError(f"{file} is a folder; give the model file (a .py file with get_model())")
    module = import_file(path.resolve())
    names = {n: getattr(module, n) for n in CONVENTION if callable(getattr(module, n, None))}
    name = factory or "get_model"
    fn = getattr(module, name, None)
    if not callable(fn):
        available = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                           and getattr(v, "__module__", None) == module.__name__)
        where = f"{path.name} has no function {name}()"
        hint = ("define get_model() and get_inputs() in it (see docs/cli.md), or name a factory: "
                f"opaudit scan {file}:FACTORY")
        if available:
            hint += f"; functions defined there: {', '.join(available)}"
        raise InputError(where, hint=hint)

    loss = names.get("get_loss")
    opt = names.get("get_optimizer")
    get_inputs = names.get("get_inputs")
    factory_fn = guarded(fn)

    def make_model():
        result = factory_fn()
        if get_inputs is None and not (isinstance(result, tuple) and len(result) == 2):
            raise InputError(f"{path.name} has no get_inputs(), and {name}() returned only a model",
                             hint="define get_inputs() returning a tensor, a tuple of arguments or a dict of "
                                  f"keyword arguments, or return (model, inputs) from {name}()")
        return result

    return ModelSpec(path=path, factory=name, make_model=make_model,
                     make_inputs=guarded(get_inputs) if get_inputs else None,
                     loss_fn=guarded(loss) if loss else None, optimizer=guarded(opt) if opt else None)
