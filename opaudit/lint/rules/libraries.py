"""OA7xx (and OA002), CUDA-only libraries: their imports and the uses of the names they bind.

- An import of a module a rule lists (the catalogue's ``modules``: apex, flash_attn, xformers,
  bitsandbytes, triton, cupy, pynvml, nvtx, ... and the vendors' transfer_to_* modules), in any scope.
- Compiled CUDA extension modules by their name (``selective_scan_cuda``, ``causal_conv1d_cuda``), also
  imported through ``importlib.import_module`` (OA714, heuristic); not a module of that name the linted
  project has as Python source (``ops_cuda.py`` beside the file or in a folder above it).
- Where a name such an import bound is used (``flash_attn_func(...)``, ``@triton.jit``, ``tl.load``): that is
  the code to port. Not: an annotation (unless a library decorator compiles the function), an
  availability test of the name, ``del``, or the library's pure-PyTorch reference of a kernel.

- A call of an installed package's function or class that picks CUDA for its caller (OA715): a device string,
  autocast's device type, ``pin_memory_device``, the NCCL backend as its default or in its body, read from the
  package's source (opaudit/lint/installed.py). ``fix`` passes the parameter that controls it, with the target's
  device; where none does, the finding says where the choice lives.

- A PyTorch Lightning ``Trainer`` or ``Fabric`` on a target Lightning has no accelerator for (OA716): what its
  ``accelerator`` does there ("gpu"/"cuda" raise, "auto" trains on the CPU); ``accelerator="cpu"`` is no finding.

Examples: rules/catalogue.toml [OA701] ... [OA716].
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache

import libcst as cst

from opaudit.lint import installed
from opaudit.lint.catalogue import version_at_least
from opaudit.lint.rules.extensions import extension_name
from opaudit.lint.walk import (
    FileCheck,
    argument,
    comma,
    dotted,
    equal,
    expr,
    file_state,
    imported_names,
    lookup,
    node_code,
    on,
    on_api,
    on_call,
    on_call_prefix,
    string_value,
)

COMPILED_EXTENSION = re.compile(r"[A-Za-z]\w*_cuda(?:_\w+)?")


@file_state
@dataclass
class Libraries:
    """The file's names bound by importing a CUDA-only library."""

    names: dict[str, str] = field(default_factory=dict)  # name -> its rule


@on(cst.Import, cst.ImportFrom)
def _visit_import(c: FileCheck, node: cst.Import | cst.ImportFrom) -> bool:
    """An import of a CUDA-only library (which claims the import: nothing else is said of it)."""
    _remember_library_names(c, node)
    names = imported_names(node)
    for name in names:
        code = _library_rule(c, name)
        if code is not None:
            rule = c.rules[code]
            heuristic = code == "OA714" and _named_like_an_extension(name)
            c.report(node, code, f"{rule.summary}: `{name}`", heuristic=heuristic)
            return True
    return False


def _named_like_an_extension(name: str) -> bool:
    """A top-level module named as compiled CUDA extensions are: selective_scan_cuda, causal_conv1d_cuda."""
    return not name.startswith("torch") and COMPILED_EXTENSION.fullmatch(name.split(".")[0]) is not None


def _compiled_extension(c: FileCheck, name: str) -> bool:
    """A compiled CUDA extension module by its name, unless the linted project has Python source of that
    name (its own ``ops_cuda.py``: a module that merely says what it is for)."""
    return _named_like_an_extension(name) and name.split(".")[0] not in project_modules(c.path)


def project_modules(path: str | None) -> frozenset[str]:
    """The top-level modules the linted file's project has as Python source (``name.py``, a package folder
    ``name/__init__.py``) in the file's folder and the folders above it, up to the project's root (the
    first holding .git, pyproject.toml, setup.py or setup.cfg). Empty when the file is not on disk (stdin)."""
    if path is None or not os.path.isfile(path):
        return frozenset()
    return _modules_from(os.path.dirname(os.path.abspath(path)))


@lru_cache(maxsize=256)
def _modules_from(folder: str) -> frozenset[str]:
    names: set[str] = set()
    while True:
        try:
            entries = os.listdir(folder)
        except OSError:
            entries = []
        for e in entries:
            if e.endswith(".py"):
                names.add(e[:-3])
            elif os.path.isfile(os.path.join(folder, e, "__init__.py")):
                names.add(e)
        if any(m in entries for m in (".git", "pyproject.toml", "setup.py", "setup.cfg")):
            break
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return frozenset(names)


def _library_rule(c: FileCheck, name: str) -> str | None:
    """The rule of the CUDA-only library that ``name`` (a module or a name in it) comes from."""
    parts = name.split(".")
    code = next((c.modules[".".join(parts[:n])] for n in range(len(parts), 0, -1)
                 if ".".join(parts[:n]) in c.modules), None)
    if code is None and "OA714" in c.selected and _compiled_extension(c, name):
        code = "OA714"
    return code


def _remember_library_names(c: FileCheck, node: cst.Import | cst.ImportFrom) -> None:
    """The names an import of a CUDA-only library binds, so that their uses are found too."""
    if isinstance(node, cst.ImportFrom) and (node.relative or node.module is None or
                                             isinstance(node.names, cst.ImportStar)):
        return
    for alias in node.names:  # type: ignore[union-attr]
        full = dotted(alias.name) or ""
        if isinstance(node, cst.ImportFrom):
            full = f"{dotted(node.module) or ''}.{full}"  # type: ignore[arg-type]
        code = _library_rule(c, full)
        if code is None:
            continue
        asname = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
        bound = asname or (full.rsplit(".", 1)[-1] if isinstance(node, cst.ImportFrom) else full.split(".")[0])
        c.state(Libraries).names[bound] = code


@on_call("importlib.import_module")
def _import_module(c: FileCheck, node: cst.Call, q: str) -> None:
    if c.on("OA714"):
        a = argument(node, 0, "name")
        name = string_value(a.value) if a is not None else None
        if name is not None and _compiled_extension(c, name):
            c.report(node, "OA714", f"{c.rules['OA714'].summary}: `{name}`", heuristic=True)
            extension_name(c, node)


def library_use(c: FileCheck, node: cst.CSTNode, q: str) -> bool:
    """A use of a name from a CUDA-only library (flash_attn_func(...), @triton.jit, tl.load, bnb.optim...):
    reported where it is used, since that is the code to port, unless a more specific rule owns it."""
    root = (dotted(node) or "").split(".")[0]
    code = c.state(Libraries).names.get(root)
    if code is None or lookup(c.api_exact, c.api_prefix, q) is not None:
        return False
    if not _runs_library_code(c, node, q):
        return True  # the name is there, but nothing of the library runs
    c.report(node, code, f"{c.rules[code].summary}: `{q}` used here",
             heuristic=code == "OA714" and _named_like_an_extension(q))
    return True


# a library's pure-PyTorch reference of its kernel (attention_ref, apply_rotary_emb_torch,
# multi_scale_deformable_attn_pytorch, a _ref module): it runs on any device
REFERENCE_IMPLEMENTATION = re.compile(r"(?:^|_)ref(?:erence)?$|(?<!_in)_(?:py)?torch$")


def _library_decorated(c: FileCheck, above: list[cst.CSTNode]) -> bool:
    """Whether the innermost function in ``above`` has a decorator from a CUDA-only library (its
    annotations are then read by that library's compiler)."""
    func = next((n for n in reversed(above) if isinstance(n, cst.FunctionDef)), None)
    if func is None:
        return False
    for d in func.decorators:
        target = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
        if (dotted(target) or "").split(".")[0] in c.state(Libraries).names:
            return True
    return False


def _runs_library_code(c: FileCheck, node: cst.CSTNode, q: str) -> bool:
    """Whether a use of a CUDA-only library's name runs its code. Not: a type annotation, an
    availability test of the name the import bound (``if flash_attn_func is None``, ``if not xops:``),
    ``del name``, or the library's pure-PyTorch reference of a kernel."""
    if any(REFERENCE_IMPLEMENTATION.search(part) for part in q.split(".")[1:]):
        return False
    for i in range(len(c.stack) - 1, -1, -1):
        if isinstance(c.stack[i], cst.Annotation):
            return _library_decorated(c, c.stack[:i])  # @triton.jit compiles `BLOCK: tl.constexpr`
        if isinstance(c.stack[i], cst.Del):
            return False
        if isinstance(c.stack[i], cst.BaseStatement):
            break
    child = node
    for parent in reversed(c.stack):
        if isinstance(parent, cst.Comparison):
            return not (isinstance(node, cst.Name) and len(parent.comparisons) == 1 and parent.left is child and
                        isinstance(parent.comparisons[0].operator, (cst.Is, cst.IsNot)) and
                        isinstance(parent.comparisons[0].comparator, cst.Name) and
                        parent.comparisons[0].comparator.value == "None")
        if isinstance(parent, (cst.If, cst.While, cst.Assert, cst.IfExp)):
            # (reading an attribute of the library runs its code: `if multi_tensor_applier.available:`)
            return getattr(parent, "test", None) is not child or not isinstance(node, cst.Name)
        if not (isinstance(parent, cst.BooleanOperation) or
                isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not)):
            return True
        child = parent
    return True


# -- OA715: an installed package's function that picks CUDA for its caller -------------------------------
@on_call_prefix("")
def _library_device(c: FileCheck, node: cst.Call, q: str) -> None:
    """A call of a function or class of an installed package (not torch, not the linted project, not a CUDA-only
    library, which OA7xx reports already) whose default or body picks CUDA. No finding where the call passes every
    parameter that controls the choice, or passes ``*args`` / ``**kwargs`` (what they hold is not known here)."""
    if not c.on("OA715") or c.target.keeps_cuda:
        return
    root = q.partition(".")[0]
    if installed.skipped(root) or root in project_modules(c.path) or _library_rule(c, q) is not None:
        return
    found = installed.callee(q)
    if found is None or not found.choices:
        return
    passed = installed.passed_names(node, found)
    if passed is None:
        return
    steered = [ch for ch in found.choices if ch.param is not None]
    open_ = [ch for ch in steered if ch.param not in passed]
    if steered and not open_:
        return  # the caller already sets what picks the device
    first: dict[str, installed.Choice] = {}  # parameter -> the choice it controls that says most (a default)
    for ch in open_:
        if ch.param not in first or ch.default and not first[ch.param].default:
            first[ch.param] = ch  # type: ignore[index]
    shown = [*first.values(), *(ch for ch in found.choices if ch not in first.values())]
    where = "; ".join(ch.where() for ch in shown[:3]) + (f"; and {len(shown) - 3} more" if len(shown) > 3 else "")
    summary = c.rules["OA715"].summary
    if not first:
        if all(ch.conditional for ch in found.choices):
            # every choice is on a path the library takes under a condition of its own (an option it was given,
            # amp_mode="amp"): said, and never a reason to fail, since the default path may not choose CUDA at all
            c.report(node, "OA715", f"{summary}: `{q}` at {where}; on a path it takes under a condition of its own",
                     suggestion=f"check when {shown[0].path}:{shown[0].line} runs; if it does, set the device "
                                "around the call yourself", severity="info")
            return
        c.report(node, "OA715", f"{summary}: `{q}` at {where}; no argument of it changes that",
                 suggestion=f"set the device around the call yourself, or patch {shown[0].path}:{shown[0].line} "
                            f"to take it as an argument")
        return
    texts = {p: _argument_text(c, p, ch) for p, ch in first.items()}
    names = ", ".join(f"`{p}`" for p in first)
    message = f"{summary}: `{q}` at {where}; unless the call passes {names}"
    if any(t is None for t in texts.values()):
        c.report(node, "OA715", message, suggestion=f"pass {names} for the target's device")
        return
    args = list(node.args)
    for p, text in texts.items():
        new = cst.Arg(expr(text or ""), keyword=cst.Name(p), equal=equal())
        if args and isinstance(args[-1].comma, cst.Comma):  # a trailing comma: the new argument takes it
            new = new.with_changes(comma=args[-1].comma)
            args[-1] = args[-1].with_changes(comma=args[-2].comma if len(args) > 1 else comma())
        elif args:
            args[-1] = args[-1].with_changes(comma=comma())
        args.append(new)
    safe = all(ch.default for ch in first.values())  # the parameter's default is the choice: passing it replaces it
    c.report(node, "OA715", message, node.with_changes(args=args), fix=None if safe else "unsafe")


def _argument_text(c: FileCheck, param: str, choice: installed.Choice) -> str | None:
    """What the call passes for ``param`` on the target, in the form of the choice it replaces: a backend name, a
    device string (its index kept), or ``torch.device(...)`` where the default is one. None: nothing here."""
    t = c.target
    value = choice.value or ""
    if "nccl" in value.lower() or "backend" in param.lower():
        if t.neutral:
            if c.acc is None or not version_at_least(c.min_torch, "2.6"):
                return None
            c.need_import("torch.distributed")
            return f"torch.distributed.get_default_backend_for_device({c.acc})"
        return f'"{t.dist_backend}"' if t.dist_backend else None
    made = re.search(r"\bdevice\(", value) is not None  # torch.device("cuda"): the function reads .type from it
    if t.neutral:
        if c.acc is None:
            return None
        return f"torch.device({c.acc_type})" if made else c.acc_type
    index = re.search(r"cuda:(\d+)", value)
    text = c.device_text(index.group(1) if index and "type" not in param else None)
    if not text:
        return None
    return f'torch.device("{text}")' if made else f'"{text}"'


# -- OA716: PyTorch Lightning's choice of device ----------------------------------------------------------
@on_api("OA716")
def _lightning(c: FileCheck, node: cst.CSTNode, q: str) -> None:
    """``Trainer(accelerator=...)`` / ``Fabric(accelerator=...)`` (the rule's ``targets`` are those Lightning has no
    accelerator for): one finding a call, saying what the accelerator it names does on the target."""
    call = c.parent
    if not isinstance(call, cst.Call) or call.func is not node:
        return
    # Fabric takes its accelerator first; a Trainer's arguments are keyword-only
    a = argument(call, 0, "accelerator") if q.endswith("Fabric") else \
        next((x for x in call.args if x.keyword is not None and x.keyword.value == "accelerator"), None)
    if a is None and any(x.star == "**" for x in call.args):
        return  # the accelerator may come in **kwargs: not known here
    value = string_value(a.value) if a is not None else "auto"
    device = c.target.device or c.target.name
    if value is not None and value.lower() == "cpu":
        return
    if value is None:
        what = (f"`accelerator={node_code(a.value) if a is not None else ''}` is chosen at run time: \"gpu\" or "
                f"\"cuda\" raise on {device}, \"auto\" trains on the CPU")
    elif value.lower() in ("gpu", "cuda"):
        means = "CUDA or MPS" if value.lower() == "gpu" else "CUDA"
        what = f'`accelerator="{value}"` means {means} to Lightning and raises on {device}'
    else:
        what = (f'`accelerator="{value}"` ' + ("(the default) " if a is None else "") +
                f"finds no CUDA, MPS or TPU on {device} and trains on the CPU without a word")
    c.report(call, "OA716", f"{c.rules['OA716'].summary}: `{q}`: {what}",
             suggestion=f"register a Lightning Accelerator for the {device} device and pass it as accelerator=, or "
                        "move the model and batches yourself")
