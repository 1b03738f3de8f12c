"""APIs matched by qualified name: every rule whose catalogue entry lists ``apis`` (most of OA1xx's probes,
OA3xx's ``torch.distributed`` and ``torch.cuda.nccl`` names, OA4xx memory, streams, events, graphs, RNG and
profiling, OA6xx's backend flags), and the imports of torch's CUDA modules.

How a matched name is rewritten is data: the rule's ``renames``, its ``replace`` / ``replace_neutral``
templates, the target table's [api] entries (rules/targets/<target>.toml), else ``torch.cuda.X`` mapped
onto the target's device module; otherwise it gets a suggestion (``suggest`` / ``suggest_neutral``) or is
reported. A rule whose match needs code of its own registers it with ``on_api`` (OA109, tensors.py).
Also here: ``.cuda_stream`` (OA410), the profiler's ``use_cuda=`` and CUDA sort keys (OA414), and the
passes over the capability probes (``torch.cuda.is_available()`` and friends: a probe is not ported while
the file still calls a CUDA-only API nothing replaces; the probes of one condition are ported together).

Examples: rules/catalogue.toml, the entries with ``apis``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from opaudit.lint.catalogue import Catalogue, Rule, Target, version_at_least
from opaudit.lint.rules.amp import AMP_DECORATORS, AMP_DEPRECATED, GPU_AUTOCAST, GRAD_SCALER_SINCE, custom_fwd
from opaudit.lint.rules.extensions import Extensions, extension_call
from opaudit.lint.rules.libraries import Libraries, library_use
from opaudit.lint.walk import (
    APIS,
    ATTRIBUTES,
    FileCheck,
    Report,
    argument,
    dotted,
    expr,
    file_state,
    getattr_name,
    imported_names,
    lookup,
    node_code,
    on,
    on_attribute,
    on_finish,
    on_keyword,
    string_value,
)

CUDA_MODULES = ("torch.cuda", "torch.backends.cudnn", "torch.backends.cuda")

# CUDA capability probes that are rewritten together when one condition holds several
PROBE_RULES = {"OA117", "OA120", "OA116", "OA118", "OA119", "OA003", "OA303", "OA612"}


# -- imports of torch's CUDA modules -----------------------------------------------------------------
@on(cst.Import, cst.ImportFrom)
def _visit_import(c: FileCheck, node: cst.Import | cst.ImportFrom) -> None:
    names = imported_names(node)
    if isinstance(node, cst.ImportFrom) and isinstance(node.names, cst.ImportStar) and names:
        module = names[0]
        if module.startswith("torch.cuda") and c.on("OA418"):
            c.report(node, "OA418", f"`from {module} import *` hides which CUDA APIs the file uses")
    cuda_module = next((n for n in names if _cuda_module(n)), None)
    if cuda_module is not None:
        code = lookup(c.api_exact, c.api_prefix, cuda_module)
        if code in ("OA306", "OA416") and c.on(code):
            c.report(node, code, f"{c.rules[code].summary}: `{cuda_module}`")
            return
        if c.on("OA419"):
            shown = cuda_module
            c.report(node, "OA419", f"{c.rules['OA419'].summary}: `{shown}`")
            imports = c.state(CudaImports)
            if imports.active and not isinstance(node.names, cst.ImportStar):  # (a star's names are not known)
                imports.modules.append((c.plan.reports[-1], cuda_module))
    if isinstance(node, cst.ImportFrom) and not node.relative and node.module is not None and \
            not isinstance(node.names, cst.ImportStar):
        # `from torch.utils.cpp_extension import CUDA_HOME` and friends: the imported object is an API
        module = dotted(node.module) or ""
        for a in node.names:
            q = f"{module}.{dotted(a.name)}"
            code = lookup(c.api_exact, c.api_prefix, q)
            if code in ("OA507", "OA801", "OA306", "OA410", "OA416") and c.on(code):
                c.report(a, code, f"{c.rules[code].summary}: `{q}`")


@file_state
@dataclass
class CudaImports:
    """The file's imports of CUDA-only torch modules (OA419) and the uses of what they import: where every finding
    on those uses is info (``cudnn.benchmark = True``), so is the import's, which loads on every torch build (the
    engine decides, with the info codes of the run: ``Report.uses``)."""

    active: bool  # the file has such an import (its uses are noted from the start of the walk)
    modules: list[tuple[Report, str]] = field(default_factory=list)  # the import's finding, the module
    uses: list[tuple[str, frozenset[int]]] = field(default_factory=list)  # qualname, ids of the use and above it

    @classmethod
    def start(cls, c: FileCheck, module: cst.Module, source: bytes) -> CudaImports:
        return cls("OA419" in c.selected and _CUDA_IMPORT.search(source) is not None)


_CUDA_IMPORT = re.compile(rb"\bimport[ \t]+torch\.(?:cuda|backends)|\bfrom[ \t]+torch\.(?:cuda|backends)|"
                          rb"\bfrom[ \t]+torch[ \t]+import[ \t][^\n]*\bcuda\b")


@on_finish
def _import_uses(c: FileCheck) -> None:
    imports = c.state(CudaImports)
    for report, module in imports.modules:
        report.uses = [ids for q, ids in imports.uses if q == module or q.startswith(module + ".")]


def _amp_class_named(c: FileCheck, node: cst.Attribute | cst.Name, q: str) -> bool:
    """torch.cuda.amp's GradScaler or autocast class named, not called (an annotation, an isinstance test):
    torch.amp's class is the same class for every device type, where the device module's own (torch.npu.amp's) may
    not be reachable by that path (RT-DETR's ``-> torch.cuda.amp.grad_scaler.GradScaler``, evaluated when its class
    is defined). A call is amp.py's (OA201, OA202: the device type goes in its arguments)."""
    new = AMP_DEPRECATED[q]
    code = "OA201" if new == "torch.amp.autocast" else "OA202"
    if not c.on(code) or c.target.keeps_cuda or (code == "OA202" and not version_at_least(c.min_torch,
                                                                                          GRAD_SCALER_SINCE)):
        return False
    c.report(node, code, f"{c.rules[code].summary}: `{q}` -> `{new}`", c.renamed(node, new))
    return True


def _cuda_module(name: str) -> bool:
    """Whether an imported name is (or is under) a CUDA-only torch module: torch.cuda, torch.cuda.amp,
    torch.backends.cudnn, torch.backends.cuda."""
    return any(name == m or name.startswith(m + ".") for m in CUDA_MODULES)


# -- names and attributes -----------------------------------------------------------------------------
# (type() against sets: isinstance on LibCST's node classes, which are ABCs, is slow on this hot path)
_BINDING_PARENTS = frozenset({cst.AssignTarget, cst.For, cst.AsName, cst.CompFor})
# the enclosing chain (or, for `.attr`, the chain this name ends) is the one to check; names of imports,
# parameters, defs and classes are not uses
_NOT_USE_PARENTS = frozenset({cst.Attribute, cst.ImportAlias, cst.AsName, cst.Param, cst.FunctionDef, cst.ClassDef,
                              cst.ImportFrom})


def _is_maximal_chain(c: FileCheck, node: cst.CSTNode) -> bool:
    parent = c.parent
    kind = type(parent)
    if kind in _NOT_USE_PARENTS:
        return False
    if type(node) is cst.Name and kind in _BINDING_PARENTS:
        return False  # a name being bound, not used
    if kind is cst.Arg and parent.keyword is node:  # type: ignore[union-attr]
        return False
    return True


@on(cst.Name, cst.Attribute)
def _visit_chain(c: FileCheck, node: cst.Attribute | cst.Name) -> None:
    imports = c.state(CudaImports)
    if imports.active and _is_maximal_chain(c, node):
        used = c.qualname(node)
        if used is not None and _cuda_module(used):
            imports.uses.append((used, frozenset((id(node), *(id(n) for n in c.stack)))))
    if isinstance(c.parent, cst.Decorator) and id(node) not in c.handled:
        q = c.qualname(node)
        if q in AMP_DECORATORS:
            c.handled.add(id(node))
            custom_fwd(c, node, q, [])
            return
    if id(node) in c.handled or not _is_maximal_chain(c, node):
        if isinstance(node, cst.Attribute) and id(node) not in c.handled:
            _attribute_syntax(c, node)
        return
    if c.state(Extensions).names and isinstance(node, cst.Attribute) and extension_call(c, node):
        return
    if isinstance(node, cst.Attribute):
        _attribute_syntax(c, node)
    q = c.qualname(node)
    if q is None:
        return
    if c.state(Libraries).names and library_use(c, node, q):
        return
    if q in AMP_DEPRECATED and _amp_class_named(c, node, q):
        return
    if q == "torch.cuda" and c.on("OA418") and isinstance(c.parent, (cst.Assign, cst.AnnAssign)):
        c.report(node, "OA418", "an alias of torch.cuda hides which CUDA APIs the file uses")
        return
    code = lookup(c.api_exact, c.api_prefix, q)
    if code is None:
        return
    if code == "OA302" and isinstance(c.parent, (cst.Comparison, cst.ComparisonTarget)):
        c.report(node, "OA304", f"{c.rules['OA304'].summary}: `{q}`")  # what the comparison guards is a judgement
        return
    if code in ("OA003", "OA612") and _in_text(c, node):
        # the CUDA or cuDNN version in a log line or a message steers nothing, and reads None off CUDA (a
        # `cudnn.version()` without cuDNN is None too): nothing to port, nothing that keeps a port from running
        return
    if code == "OA122" and (_class_tested(c, node) or _unwrap_data_parallel(c, node, q)):
        # isinstance(model, nn.DataParallel): a test of what a model is, on every build; nothing runs on CUDA
        return
    rule = c.rules[code]
    own = APIS.get(code)
    if own is not None:  # a rule whose match needs code of its own
        own(c, node, q)
        return
    if code == "OA118" and q.endswith(".get_device_properties"):
        lacking = [a for a in _properties_read(c, node) if not _has_property(c.target, a)]
        if lacking:
            c.report(node, code, f"{rule.summary}: `{q}(...).{lacking[0]}` is a CUDA property "
                     f"({c.target.title} answers no such field; not rewritten)")
            return
    canonical = rule.renames.get(q, q)
    # a rename out of CUDA's namespace is the replacement on every target; one within it is then mapped
    new = canonical if canonical != q and not canonical.startswith("torch.cuda.") else _api_target(c, rule, canonical)
    message = f"{rule.summary}: `{q}`"
    if new:
        message += f" -> `{new}`"
        call = c.parent
        if new.endswith(")") and isinstance(call, cst.Call) and call.func is node and not call.args:
            c.need_import("torch")  # the replacement is a whole call (is_backend_available(...))
            c.report(call, code, message, expr(new))
        elif new.endswith(")"):
            c.report(node, code, message, suggestion=new)
        elif rule.fix in ("safe", "unsafe"):
            c.report(node, code, message, c.renamed(node, new))
        else:
            c.report(node, code, message, suggestion=new)
        return
    suggestion = rule_suggestion(c, rule) or c.target.device_module_form(canonical, c.min_torch)
    if rule.fix in ("safe", "unsafe") and c.target.keeps_cuda:
        return  # ROCm: torch.cuda is HIP; nothing to change
    if rule.fix in ("safe", "unsafe"):
        message += f" (no equivalent on {c.target.name})" if not c.target.neutral else \
            f" (no neutral equivalent for torch >= {c.min_torch})"
    c.report(node, code, message, suggestion=suggestion)


@file_state
@dataclass
class Unwrapped:
    """The names the file binds to an unwrapped ``nn.DataParallel(...)`` (OA122) and the reads of ``X.module`` on
    a name, each reported as it is met and kept (rewritten to ``X``) only where X is such a name."""

    active: bool  # the file names DataParallel
    names: set[str] = field(default_factory=set)
    reads: list[tuple[str, Report]] = field(default_factory=list)

    @classmethod
    def start(cls, c: FileCheck, module: cst.Module, source: bytes) -> Unwrapped:
        return cls("OA122" in c.selected and b"DataParallel" in source)


def _holder(c: FileCheck, node: cst.CSTNode) -> str | None:
    """The name a value is kept in: ``self.net`` as written (one attribute of the objects of the file's classes,
    whatever method binds or reads it), any other as the walk's scopes qualify it."""
    d = dotted(node)
    if d is None or isinstance(node, cst.Call):
        return None
    return d if d.startswith("self.") else c.name_key(node)


def _bound_to(c: FileCheck, call: cst.Call) -> str | None:
    """The name ``call`` (the walk's parent node) is assigned to, through method calls on it
    (``nn.DataParallel(m).cuda()``)."""
    child: cst.CSTNode = call
    for parent in reversed(c.stack[:-1]):
        if isinstance(parent, cst.Assign):
            return _holder(c, parent.targets[0].target) if len(parent.targets) == 1 and parent.value is child \
                else None
        if isinstance(parent, cst.Attribute) and parent.value is child or \
                isinstance(parent, cst.Call) and parent.func is child:
            child = parent
            continue
        return None
    return None


@on_attribute("module")
def _module_read(c: FileCheck, node: cst.Attribute) -> None:
    """``X.module`` where X may hold an unwrapped DataParallel: X itself (kept at the end of the walk only if the
    file binds X to one)."""
    state = c.state(Unwrapped)
    if not state.active or not c.target.device or c.target.neutral or c.target.keeps_cuda:
        return
    parent = c.parent
    if isinstance(parent, (cst.AssignTarget, cst.AugAssign, cst.Del)) or \
            isinstance(parent, cst.AnnAssign) and parent.target is node:
        return  # `x.module = ...`: the program's own attribute
    key = _holder(c, node.value)
    if key is None:
        return
    before = len(c.plan.reports)
    # info: part of the unwrap's rewrite (with it, the wrapper's `.module` is gone), not a CUDA use of its own
    c.report(node, "OA122", "`.module` of an unwrapped nn.DataParallel: the module itself", node.value,
             severity="info")
    if len(c.plan.reports) > before:
        state.reads.append((key, c.plan.reports[-1]))


@on_finish
def _module_reads(c: FileCheck) -> None:
    state = c.state(Unwrapped)
    dropped = {id(r) for key, r in state.reads if key not in state.names}
    if dropped:
        c.plan.reports[:] = [r for r in c.plan.reports if id(r) not in dropped]


def _unwrap_data_parallel(c: FileCheck, node: cst.CSTNode, q: str) -> bool:
    """``nn.DataParallel(module, ...)`` on a vendor's device: the module itself (unsafe). DataParallel spreads a
    batch through ``torch._C._scatter``, which only CUDA builds of torch have (the vendors' plugins sit on builds
    without CUDA), so the wrapper fails at its first forward pass on the device; the module on one device is what
    the vendors' guides port it to (several devices: DistributedDataParallel). What the wrapper added goes with
    it: ``.module`` of the result and the ``module.`` prefix of its state_dict keys (a checkpoint saved by the
    CUDA program loads with that prefix stripped)."""
    t = c.target
    call = c.parent
    if t.neutral or t.keeps_cuda or not t.device or not isinstance(call, cst.Call) or call.func is not node:
        return False
    module = argument(call, 0, "module")
    if module is None:
        return False
    key = _bound_to(c, call)
    if key is not None:
        c.state(Unwrapped).names.add(key)
    c.report(call, "OA122", f"{c.rules['OA122'].summary}: `{q}(...)` -> the module it wraps, on one {t.device} "
             "device (its `.module` and the `module.` prefix of its state_dict keys go with the wrapper)",
             module.value)
    return True


def _class_tested(c: FileCheck, node: cst.CSTNode) -> bool:
    """Whether ``node`` (the chain being visited) is a class tested against, not used: the class argument of
    ``isinstance`` / ``issubclass`` (or an element of a tuple there), or what ``type(x)`` is compared with."""
    stack = c.stack
    i = len(stack) - 1
    while i >= 1 and type(stack[i]) is cst.Element and type(stack[i - 1]) is cst.Tuple:
        node, i = stack[i - 1], i - 2
    if i < 1:
        return False
    parent, above = stack[i], stack[i - 1]
    if type(parent) is cst.Arg and type(above) is cst.Call:
        func = above.func  # type: ignore[attr-defined]
        args = above.args  # type: ignore[attr-defined]
        return isinstance(func, cst.Name) and func.value in ("isinstance", "issubclass") and \
            c.qualname(func) is None and not any(func.value in names for names in c.shadows) and \
            len(args) == 2 and args[1] is parent and parent.keyword is None and not parent.star  # type: ignore[attr-defined]
    if type(parent) is cst.ComparisonTarget and type(above) is cst.Comparison:
        operands = [above.left, *(t.comparator for t in above.comparisons)]  # type: ignore[attr-defined]
    elif type(parent) is cst.Comparison:
        operands = [parent.left, *(t.comparator for t in parent.comparisons)]  # type: ignore[attr-defined]
    else:
        return False
    return any(o is node for o in operands) and any(_is_type_call(c, o) for o in operands)


def _is_type_call(c: FileCheck, node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "type" and \
        len(node.args) == 1 and c.qualname(node.func) is None


_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "exception", "log", "write"})


def _in_text(c: FileCheck, node: cst.CSTNode) -> bool:
    """Whether ``node`` (or its own call: ``cudnn.version()``) only goes into text: a part of an f-string or of a
    string literal's ``.format(...)`` or ``%`` (``"CUDA: {}".format(torch.version.cuda)``), or an argument of
    ``print``, a logger's or a stream's ``write`` (``print(f"CUDA {torch.version.cuda}")``)."""
    child = node
    for above in reversed(c.stack):
        if isinstance(above, cst.Call) and above.func is child:
            child = above
            continue
        if isinstance(above, cst.FormattedStringExpression):
            return True
        if isinstance(above, cst.Call):
            f = above.func
            if isinstance(f, cst.Attribute) and f.attr.value == "format" and isinstance(f.value, cst.BaseString):
                return True
            return (isinstance(f, cst.Name) and f.value == "print") or \
                (isinstance(f, cst.Attribute) and f.attr.value in _LOG_METHODS)
        if isinstance(above, cst.BinaryOperation) and isinstance(above.operator, cst.Modulo) and \
                isinstance(above.left, cst.BaseString) and above.left is not child:
            return True
        if isinstance(above, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return False
        child = above
    return False


@on(cst.Call)
def _visit_getattr(c: FileCheck, node: cst.Call) -> None:
    """``getattr(torch, "cuda")``: the attribute written dynamically."""
    if getattr_name(node) is not None and _is_maximal_chain(c, node):
        _visit_chain(c, node)  # type: ignore[arg-type]


def _attribute_syntax(c: FileCheck, node: cst.Attribute) -> None:
    """Attributes matched by name whatever the receiver (``.is_cuda``: tensors.py)."""
    for handler in ATTRIBUTES.get(node.attr.value, ()):
        handler(c, node)


@on_attribute("cuda_stream")
def _cuda_stream(c: FileCheck, node: cst.Attribute) -> None:
    if c.on("OA410"):
        c.report(node, "OA410", "`.cuda_stream` is a raw CUDA stream handle", heuristic=True)


# the profiler that takes the device by name (use_device=), as torch.autograd.profiler.profile does since torch 2.1
_PROFILER_WITH_DEVICE = ("torch.autograd.profiler.profile", "torch.autograd.profile")


def _profiler_call(node: cst.Call, q: str | None) -> bool:
    """A call of torch's profilers (torch.autograd.profiler.profile, torch.profiler.profile), or, where the callee
    is not resolved, of something named ``profile``: the program's own ``use_cuda=`` (a loss, a model, a data
    loader taking the flag) is its own business."""
    if q is not None:
        return q.startswith(("torch.autograd.profile", "torch.profiler."))  # (and torch.autograd.profiler.*)
    func = node.func
    return (func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)) == "profile"


@on_keyword("use_cuda")
def _use_cuda(c: FileCheck, node: cst.Call, q: str | None, a: cst.Arg) -> None:
    if not c.on("OA414") or not _profiler_call(node, q):
        return
    t = c.target
    replacement = None
    if q in _PROFILER_WITH_DEVICE and t.device and t.profiler_device_min_torch and \
            version_at_least(c.min_torch, t.profiler_device_min_torch):
        # use_cuda=X profiles the device where X holds: use_device names the target's device then, else nothing
        device = cst.SimpleString(f'"{t.device}"')
        flag = a.value
        value: cst.BaseExpression = device if isinstance(flag, cst.Name) and flag.value == "True" else \
            cst.Name("None") if isinstance(flag, cst.Name) and flag.value == "False" else \
            cst.IfExp(test=flag, body=device, orelse=cst.Name("None"))
        replacement = a.with_changes(keyword=cst.Name("use_device"), value=value)
    # (torch.profiler.profile takes no use_device: its activities name the device, as the target's note says)
    takes_device = q is None or q in _PROFILER_WITH_DEVICE
    c.report(a, "OA414", "`use_cuda=` asks the profiler for CUDA activity", replacement,
             suggestion=f'use_device="{t.device}"' if replacement is None and t.device and takes_device else None)


@on_keyword("sort_by")
def _sort_by(c: FileCheck, node: cst.Call, q: str | None, a: cst.Arg) -> None:
    if c.on("OA414") and (string_value(a.value) or "").startswith("cuda"):
        c.report(a.value, "OA414", "profiler sort key names CUDA time")


def _api_target(c: FileCheck, rule: Rule, qualname: str) -> str | None:
    t = c.target
    if t.neutral and rule.replace_neutral:
        if not version_at_least(c.min_torch, rule.neutral_min_torch or t.accelerator_min_torch) or c.acc is None:
            return None
        return rule.replace_neutral.format(acc=c.acc)
    if not t.neutral and rule.replace:
        fields = {"module": t.module, "device": t.device, "dist_const": t.dist_const,
                  "dist_available": t.dist_available, "package": t.package, "dist_backend": t.dist_backend}
        used = re.findall(r"{(\w+)}", rule.replace)
        if t.keeps_cuda or any(not fields.get(u) for u in used):
            return None
        return rule.replace.format(**fields)
    if rule.fix not in ("safe", "unsafe") and qualname not in t.api:
        return None
    return t.api_replacement(qualname, c.min_torch)


def written_names(target: Target, catalogue: Catalogue, min_torch: str) -> set[str]:
    """The dotted names ``fix`` can write for ``target`` in place of an API a rule matches by name (the
    target table's [api] values, the rules' templates, torch.cuda.X mapped onto the target's module): each
    must exist in the target's runtime, which the rehearsal's stand-ins answer (rules/targets/ [surface])."""
    import types

    c: Any = types.SimpleNamespace(target=target, min_torch=min_torch, acc=target.accelerator_expr(min_torch))
    out = {new for new, _ in target.api.values() if new and "(" not in new}
    handled = {*AMP_DEPRECATED, *AMP_DECORATORS, *GPU_AUTOCAST}
    for rule in catalogue.rules.values():
        if rule.targets and target.name not in rule.targets or rule.fix not in ("safe", "unsafe"):
            continue
        if rule.code == "OA109":
            continue  # writes torch.empty / torch.tensor calls (_typed_tensor), never a name of the target's module
        for api in rule.apis:
            if api.endswith(".*") or api in handled:
                continue
            canonical = rule.renames.get(api, api)
            new = canonical if canonical != api and not canonical.startswith("torch.cuda.") else \
                _api_target(c, rule, canonical)
            if new and "(" not in new:
                out.add(new)
    return out


def rule_suggestion(c: FileCheck, rule: Rule) -> str | None:
    t = c.target
    if t.neutral:
        return rule.suggest_neutral.format(acc=c.acc or "torch.accelerator.current_accelerator()") \
            if rule.suggest_neutral else None
    if rule.suggest and t.module:
        return rule.suggest.format(module=t.module, device=t.device, package=t.package)
    return None


# -- the capability probes ----------------------------------------------------------------------------
@file_state
@dataclass
class _Module:
    """The file's module, for the passes after the walk that look past a report's own nodes."""

    module: cst.Module

    @classmethod
    def start(cls, c: FileCheck, module: cst.Module, source: bytes) -> _Module:
        return cls(module)


@on_finish
def _stuck_probes(c: FileCheck) -> None:
    """While a file still calls a CUDA-only API that nothing replaces, its CUDA probes stay CUDA probes:
    a rewritten ``torch.cuda.is_available()`` would send the target down a path that fails there
    (a guarded call, an early return, a flag stored for later), so those fixes become suggestions.
    A probe that only guards a block of its own (``if torch.cuda.is_available(): torch.cuda.synchronize()``:
    no assignment, return or jump in it, no stuck call in it nor in a function of the file it calls) sends the
    target nowhere near the stuck call, and is ported."""
    cuda_only = {c for c, r in c.rules.items() if any(a.startswith("torch.cuda.") for a in r.apis)}
    cuda_only |= {"OA003", "OA801", "OA802", "OA803"}
    stuck = [r for r in c.plan.reports if r.replacement is None and r.code in cuda_only
             and r.code not in ("OA117", "OA106")]
    probes = [r for r in c.plan.reports if r.code in ("OA117", "OA106") and r.replacement is not None]
    if not stuck or not probes:
        return
    guards = _Guards(c.state(_Module).module, stuck)
    for report in probes:
        if guards.own_block(report) or report.replacement is None:
            continue
        report.suggestion = node_code(report.replacement)
        report.replacement = None
        report.message += f" (not rewritten: the file still calls a CUDA-only API ({stuck[0].code}); port " \
                          "that first)"


class _Guards:
    """Which probes of a file with stuck CUDA calls (``_stuck_probes``) only guard a block of their own."""

    # statements that bind a name, leave the block or the function: the probe's answer reaches further
    _ESCAPES = (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.NamedExpr, cst.Return, cst.Raise, cst.Yield,
                cst.Break, cst.Continue, cst.Global, cst.Nonlocal, cst.Del, cst.Import, cst.ImportFrom,
                cst.FunctionDef, cst.ClassDef, cst.For, cst.While, cst.Try, cst.AsName)

    def __init__(self, module: cst.Module, stuck: list[Report]):
        self.stuck = stuck
        functions: dict[str, list[cst.FunctionDef]] = {}
        todo: list[cst.CSTNode] = [module]
        while todo:
            node = todo.pop()
            if isinstance(node, cst.FunctionDef):
                functions.setdefault(node.name.value, []).append(node)
            todo.extend(node.children)
        # the file's functions that call a stuck API, or call (by name or as a method) one that does
        self.tainted = {name for name, defs in functions.items()
                        if any(id(d) in r.ancestors for d in defs for r in stuck)}
        grew = True
        while grew:
            grew = False
            for name, defs in functions.items():
                if name not in self.tainted and any(self._calls_tainted(d) for d in defs):
                    self.tainted.add(name)
                    grew = True

    def _calls_tainted(self, node: cst.CSTNode) -> bool:
        todo: list[cst.CSTNode] = [node]
        while todo:
            n = todo.pop()
            if isinstance(n, cst.Call):
                f = n.func
                name = f.value if isinstance(f, cst.Name) else f.attr.value if isinstance(f, cst.Attribute) else None
                if name in self.tainted:
                    return True
            todo.extend(n.children)
        return False

    def own_block(self, probe: Report) -> bool:
        guard = probe.statement
        if not isinstance(guard, cst.If) or id(guard.test) not in probe.ancestors and probe.node is not guard.test:
            return False
        if any(id(guard) in r.ancestors or r.node is guard for r in self.stuck):
            return False
        todo: list[cst.CSTNode] = [guard.body, *([guard.orelse] if guard.orelse is not None else [])]
        while todo:
            n = todo.pop()
            if isinstance(n, self._ESCAPES):
                return False
            todo.extend(n.children)
        return not self._calls_tainted(guard)


@on_finish
def _conjunctions(c: FileCheck) -> None:
    """``torch.cuda.is_available() and torch.cuda.is_bf16_supported()`` is one question: its probes are
    rewritten together (the strictest fix class of them) or not at all. Half a port would answer it
    for two devices at once (bf16 silently becoming fp16)."""
    groups: dict[int, list[Report]] = {}
    for r in c.plan.reports:
        if r.conjunction is not None and r.code in PROBE_RULES:
            groups.setdefault(r.conjunction, []).append(r)
    for members in groups.values():
        if len(members) < 2:
            continue
        classes = {r.fix or c.rules[r.code].fix for r in members}
        if any(r.replacement is None for r in members):
            for r in members:
                if r.replacement is not None:
                    r.suggestion, r.replacement = node_code(r.replacement), None
                    r.message += " (not rewritten: another probe in the same condition has no rewrite)"
        elif len(classes) > 1:
            strictest = "unsafe" if "unsafe" in classes else "safe"
            for r in members:
                r.fix = strictest
                r.message += " (rewritten with the other probes of its condition)"



@on_finish
def _probes_with_their_uses(c: FileCheck) -> None:
    """A probe is ported with the CUDA uses of its file: where one of them is rewritten only with
    ``--unsafe-fixes``, so is the probe. Without it, ``fix`` leaves both, and the program keeps its CPU path,
    instead of a rewritten ``cuda = torch.npu.is_available()`` sending the device down an ``if cuda:`` whose
    ``model.cuda()`` is still there (Torch not compiled with CUDA enabled)."""
    probes = [r for r in c.plan.reports if r.code in ("OA117", "OA106") and r.replacement is not None
              and (r.fix or c.rules[r.code].fix) == "safe"]
    if not probes:
        return
    # environment variables (OA5xx) and backend flags (OA6xx) left as they are change nothing off CUDA
    unsafe = next((r for r in c.plan.reports if r.replacement is not None and r.code not in PROBE_RULES
                   and r.code != "OA106" and not r.code.startswith(("OA5", "OA6"))
                   and c.rules[r.code].severity != "info" and (r.fix or c.rules[r.code].fix) == "unsafe"), None)
    if unsafe is None:
        return
    for r in probes:
        r.fix = "unsafe"
        r.message += f" (rewritten with the CUDA uses of its file, one of which needs --unsafe-fixes: {unsafe.code})"


# fields of CUDA's device properties that a target whose table says nothing (device_properties) is not assumed to have
CUDA_PROPERTIES = frozenset({"major", "minor", "multi_processor_count", "gcnArchName", "is_integrated",
                             "is_multi_gpu_board", "max_threads_per_multi_processor", "warp_size",
                             "regs_per_multiprocessor", "L2_cache_size", "uuid"})


def _has_property(target: Target, name: str) -> bool:
    """Whether the target's get_device_properties(...) answers ``name`` with a value (rules/targets/ device_properties;
    where the table says nothing, every field but CUDA's own)."""
    if target.neutral or target.keeps_cuda:
        return name not in CUDA_PROPERTIES
    if target.device_properties:
        return name in target.device_properties
    return name not in CUDA_PROPERTIES


def _properties_read(c: FileCheck, node: cst.CSTNode) -> list[str]:
    """The fields read from ``torch.cuda.get_device_properties(...)``'s result: an attribute of the call itself, or
    of the name it is assigned to, in that name's scope (``props = ...; props.major``)."""
    if len(c.stack) < 2 or not isinstance(c.parent, cst.Call) or c.parent.func is not node:
        return []
    above = c.stack[-2]
    if isinstance(above, cst.Attribute) and above.value is c.parent:
        return [above.attr.value]
    if isinstance(above, cst.Assign) and above.value is c.parent and len(above.targets) == 1 and \
            isinstance(above.targets[0].target, cst.Name):
        name = above.targets[0].target.value
        scope = next((n for n in reversed(c.stack) if isinstance(n, (cst.FunctionDef, cst.Lambda))), c.stack[0])
        out: list[str] = []
        todo: list[cst.CSTNode] = [scope]
        while todo:
            n = todo.pop()
            if isinstance(n, cst.Attribute) and isinstance(n.value, cst.Name) and n.value.value == name and \
                    n.attr.value not in out:
                out.append(n.attr.value)
            todo.extend(n.children)
        return out
    return []
