"""OA1xx, device strings: "cuda", "cuda:N" and device strings built at run time, where a device goes.

- Device positions (``torch.device("cuda")``, ``.to("cuda")``, ``device=``, ``map_location=``, autocast's
  device type, a device mesh's type): the string is rewritten for the target (OA102, OA103, OA104,
  OA111, OA203, OA305, OA417), and so are the branches of ``"cuda" if ... else "cpu"`` and ``or``.
- A literal outside a device position (OA103, unsafe): in an assignment, a return, a default, a dict
  value, ``choices=``; a table keyed by device type (OA105); the availability idiom
  ``"cuda" if torch.cuda.is_available() else "cpu"`` (OA106).
- Probes of a device string (OA105): ``"cuda" in device``, ``device.startswith("cuda")``,
  ``device_type == "cuda"``, ``"cuda" in str(device)``. A substring test, a test of ``str(...)`` or of an
  attribute ``.device`` alone does not tell a device (``"cuda" in log_line``): such a probe is rewritten only
  where the name holds a device string or a ``torch.device``, goes where a device goes, or is a parameter.
- ``torch.load`` without ``map_location`` (OA112), ``torch.device(0)`` and ``torch.cuda.current_device()``
  as a device (OA107), ``pin_memory("cuda")`` (OA417).
- The data flow (``on_finish``): a probe goes with the device strings it tests, and a string kept in a name
  is a device string where the name reaches a device position.

Examples: rules/catalogue.toml, [OA101] ... [OA120] (each is a test, tests/lint/test_catalogue.py);
the flow: tests/lint/test_dataflow.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

import libcst as cst

from opaudit.lint.walk import (
    FileCheck,
    Report,
    argument,
    comma,
    comparison_operands,
    expr,
    file_state,
    node_code,
    on,
    on_call,
    on_finish,
    on_keyword,
    on_method,
    on_string,
    parameter_names,
    rebinds,
    string_value,
    subtree,
    with_value,
    without_arg,
)

DEVICE = re.compile(r"cuda(?::(\d+))?")
# a chip's name with an index maybe (br100, mlu370, ascend910b:0): letters, then digits, as no device type is spelled
CHIP = re.compile(r"([A-Za-z][A-Za-z_]*\d+[A-Za-z0-9_]*)(?::(\d+))?")
# the device types of PyTorch's backends (c10/core/DeviceType.h) and of the vendors' plugins (vendors.toml)
BACKEND_TYPES = frozenset({"cpu", "cuda", "mkldnn", "opengl", "opencl", "ideep", "hip", "fpga", "maia", "xla", "vulkan",
                           "metal", "xpu", "mps", "meta", "hpu", "ve", "lazy", "ipu", "mtia", "privateuseone"})
DEVICE_KWARGS = {"device", "device_type", "pin_memory_device", "output_device", "map_location", "device_id"}
# callee -> (index of its positional device argument, the rule that owns a "cuda" there)
DEVICE_ARGS = {
    "torch.device": (0, "OA102"),
    "torch.set_default_device": (0, "OA103"),
    "torch.Generator": (0, "OA103"),
    "torch.get_device_module": (0, "OA103"),
    "torch.load": (1, "OA103"),
    "torch.autocast": (0, "OA203"),
    "torch.amp.autocast": (0, "OA203"),
    "torch.amp.GradScaler": (0, "OA203"),
    "torch.get_autocast_dtype": (0, "OA203"),
    "torch.set_autocast_dtype": (0, "OA203"),
    "torch.is_autocast_enabled": (0, "OA203"),
    "torch.set_autocast_enabled": (0, "OA203"),
    "torch.distributed.device_mesh.init_device_mesh": (0, "OA305"),
    "torch.distributed.init_device_mesh": (0, "OA305"),
    "torch.distributed.device_mesh.DeviceMesh": (0, "OA305"),
    "torch.distributed.DeviceMesh": (0, "OA305"),
}
TYPE_POSITIONS = {"OA203"}  # positions that take a device *type* (no index)

DEVICE_TYPES = {"cpu", "cuda", "mps", "xpu", "npu", "mlu", "musa", "hpu", "meta", "xla", "supa"}


@file_state
@dataclass
class Devices:
    """The file's device strings followed through names: `device = "cuda"` ... `"cuda" in device`."""

    values: list[tuple[str, Report]] = field(default_factory=list)  # (name, the report of a CUDA string it is assigned)
    probes: list[tuple[str, Report, cst.CSTNode | None]] = field(default_factory=list)  # (name, report, its rewrite)
    probed_parameters: set[str] = field(default_factory=set)  # the names of probes that are their function's parameters
    # the reports of probes that alone do not tell a device: a substring test ("cuda" in x), a test of str(x)
    weak: set[int] = field(default_factory=set)
    names: set[str] = field(default_factory=set)  # names passed where a device goes
    # the reports of probes that are the test of an `if` or a conditional expression: the id of the branch the test
    # selects when true (`x.cuda() if self.device.type == "cuda" else x`)
    guards: dict[int, int] = field(default_factory=dict)


# -- device positions ----------------------------------------------------------------------------------
@on_call("torch.load", "torch.cuda.set_device", "torch.cuda.device", *DEVICE_ARGS)
def _call(c: FileCheck, node: cst.Call, q: str) -> None:
    if q == "torch.device" and node.args and isinstance(node.args[0].value, cst.Integer) and \
            node.args[0].keyword is None:
        c.report(node, "OA107", c.rules["OA107"].summary)
    if q == "torch.load" and c.on("OA112") and argument(node, 1, "map_location") is None:
        c.report(node, "OA112", c.rules["OA112"].summary, suggestion=node_code(node.with_changes(
            args=[*node.args[:-1], node.args[-1].with_changes(comma=comma()),
                  cst.Arg(cst.SimpleString('"cpu"'), keyword=cst.Name("map_location"),
                          equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                                whitespace_after=cst.SimpleWhitespace("")))])) if node.args else None)
    if q in ("torch.cuda.set_device", "torch.cuda.device") and node.args:
        key = c.name_key(node.args[0].value)
        if key is not None:
            c.state(Devices).names.add(key)
    if q in DEVICE_ARGS:
        index, code = DEVICE_ARGS[q]
        keyword = {"torch.device": "type", "torch.load": "map_location", "torch.Generator": "device"}.get(q)
        if q in ("torch.autocast", "torch.amp.autocast", "torch.amp.GradScaler"):
            keyword = "device_type" if q != "torch.amp.GradScaler" else "device"
        a = argument(node, index, keyword)
        if a is not None:
            type_only = code in TYPE_POSITIONS or code == "OA305"
            if q == "torch.device":
                positional = [x for x in node.args if x.keyword is None]
                type_only = len(positional) > 1 or any(x.keyword is not None and x.keyword.value in ("index", "type")
                                                       for x in node.args)
                if c.target.neutral and not type_only:
                    m = DEVICE.fullmatch(string_value(a.value) or "")
                    if m is not None and m.group(1) is not None and c.acc is not None:
                        # torch.device("cuda:1") -> torch.device(ACC.type, 1), not a device inside a device
                        c.handled.add(id(a.value))
                        c.report(node, code, f"{c.rules[code].summary}: '{m.group(0)}'",
                                 expr(f"{node_code(node.func)}({c.acc}.type, {m.group(1)})"))
                        return
                    type_only = True
            device_string(c, a.value, code, type_only=type_only, call=node, plain=q == "torch.device")
            if q == "torch.device":
                _device_kept(c, node, a.value)


def _device_kept(c: FileCheck, node: cst.Call, string: cst.CSTNode) -> None:
    """``device = torch.device("cuda") if ... else torch.device("cpu")``: the name holds a device (as one used
    where a device goes does), and the string goes with the probes of the name (``"cuda" in str(device)``)."""
    key = c.assigned_name(node)
    if key is None:
        return
    st = c.state(Devices)
    st.names.add(key)
    if c.plan.reports and c.plan.reports[-1].node is string:
        st.values.append((key, c.plan.reports[-1]))


@on_method("to")
def _to(c: FileCheck, node: cst.Call, func: cst.Attribute) -> None:
    if c.qualname(func.value) is not None:
        return
    a = argument(node, 0, "device")
    if a is not None and isinstance(a.value, cst.Call) and c.qualname(a.value.func) == "torch.cuda.current_device":
        c.report(a, "OA107", c.rules["OA107"].summary)
    if a is not None:
        device_string(c, a.value, "OA103", call=node)


@on_method("pin_memory", "is_pinned")
def _pin_memory(c: FileCheck, node: cst.Call, func: cst.Attribute) -> None:
    name = func.attr.value
    if not c.on("OA417"):
        return
    a = argument(node, 0, "device")
    if a is not None and string_value(a.value) is not None and DEVICE.fullmatch(string_value(a.value) or ""):
        c.handled.add(id(a.value))
        args = [x for x in node.args if x is not a]
        c.report(node, "OA417", f"`.{name}(\"cuda\")`: the device argument is deprecated",
                 suggestion=node_code(node.with_changes(args=args)))


@on_method("startswith")
def _startswith(c: FileCheck, node: cst.Call, func: cst.Attribute) -> None:
    if not c.on("OA105"):
        return
    a = argument(node, 0)
    if a is not None and string_value(a.value) in ("cuda", "cuda:"):
        c.handled.add(id(a.value))
        probed, weak = _probe_operand(func.value)
        # a value with a startswith method is a string already (a tensor's .device has none): `opt.device` then
        # holds a device string; only str(...) of something leaves the doubt
        weak = weak and isinstance(func.value, cst.Call)
        _compare_suggestion(c, a.value, probed, weak=weak)


@on_keyword(*DEVICE_KWARGS)
def _device_keyword(c: FileCheck, node: cst.Call, q: str | None, a: cst.Arg) -> None:
    assert a.keyword is not None
    k = a.keyword.value
    if isinstance(a.value, cst.Call) and c.qualname(a.value.func) == "torch.cuda.current_device":
        c.report(a, "OA107", c.rules["OA107"].summary)
    if k == "map_location" and isinstance(a.value, (cst.Dict, cst.Lambda)):
        _map_location(c, a.value)
        return
    if k == "pin_memory_device" and c.target.neutral and DEVICE.fullmatch(string_value(a.value) or ""):
        # pinning follows the current accelerator; the argument (a string) is deprecated
        c.handled.add(id(a.value))
        c.report(node, "OA417", f"{c.rules['OA417'].summary}: pin_memory_device=", without_arg(node, a))
        return
    code = "OA203" if (q or "").startswith(("torch.autocast", "torch.amp.", "torch.random.fork_rng")) else \
        "OA417" if k == "pin_memory_device" else "OA305" if q in DEVICE_ARGS and \
        DEVICE_ARGS[q][1] == "OA305" else "OA103"
    device_string(c, a.value, code, type_only=k == "device_type" or code == "OA305",
                   string_only=k == "pin_memory_device")


def _map_location(c: FileCheck, value: cst.Dict | cst.Lambda) -> None:
    """map_location dicts: the keys name where a checkpoint was saved; only values are device positions."""
    if isinstance(value, cst.Dict):
        for el in value.elements:
            if isinstance(el, cst.DictElement):
                c.handled.add(id(el.key))
                device_string(c, el.value, "OA111", string_only=True)  # torch.load wants strings here
    elif c.on("OA111") and not _keeps_on_cpu(value):
        c.report(value, "OA111", "a map_location function that moves storages to CUDA")


def _keeps_on_cpu(function: cst.Lambda) -> bool:
    """``lambda storage, loc: storage`` (or ``storage.cpu()``, ``storage.to("cpu")``): torch.load hands the function
    each storage as read, on the CPU, and this one keeps it there; nothing is moved to CUDA."""
    params = function.params.posonly_params or function.params.params
    if not params:
        return False
    storage = params[0].name.value
    body = function.body
    if isinstance(body, cst.Call) and isinstance(body.func, cst.Attribute) and (
            body.func.attr.value == "cpu" and not body.args or body.func.attr.value == "to" and len(body.args) == 1
            and body.args[0].keyword is None and string_value(body.args[0].value) == "cpu"):
        body = body.func.value
    return isinstance(body, cst.Name) and body.value == storage


def chip_name(s: str) -> re.Match[str] | None:
    """``s`` as a chip's name in a device position (``br100``, ``mlu370:1``), or None: a device type of PyTorch or
    of a vendor's plugin (``npu``, ``musa``) is no chip."""
    m = CHIP.fullmatch(s)
    return m if m is not None and m.group(1).lower() not in BACKEND_TYPES | _plugin_types() else None


@cache
def _plugin_types() -> frozenset[str]:
    from opaudit.matrix.vendors import vendors

    return frozenset(v.device_type for v in vendors().values())


def device_string(c: FileCheck, value: cst.BaseExpression, code: str, *, type_only: bool = False,
                   string_only: bool = False, call: cst.Call | None = None, plain: bool = False) -> None:
    """A device position holding "cuda", "cuda:N", a device string built at run time, or such strings in
    the branches of a conditional (``"cuda" if use_cuda else "cpu"``) or of ``or``.

    ``type_only``: the position takes a device type (no index); ``string_only``: it takes a string (the
    neutral form is then built from ``ACC.type``, not a torch.device)."""
    if isinstance(value, (cst.Name, cst.Attribute)):
        key = c.name_key(value)
        if key is not None:
            c.state(Devices).names.add(key)  # a name used as a device: the strings it holds are device strings
        return
    if id(value) in c.handled:
        return
    t = c.target
    s = string_value(value)
    if s is not None:
        m = DEVICE.fullmatch(s) or chip_name(s)
        if not m:
            return
        if m.re is CHIP:  # a chip's name where a device type goes: the target's device type is the port
            if not c.on("OA123"):
                return
            code = "OA123"
        c.handled.add(id(value))
        if t.keeps_cuda and code != "OA123":
            return
        new: cst.CSTNode | None = None
        index = m.group(1) if m.re is DEVICE else m.group(2)
        if t.neutral:
            if c.acc is not None and (string_only or type_only):
                inner = _other_quote(value)
                acc_type = f"{c.acc}.type" if plain else c.acc_type
                new = expr(acc_type) if index is None or type_only else \
                    _fstring(value, [cst.FormattedStringExpression(expr(c.acc_type_quoted(inner))),
                                     cst.FormattedStringText(f":{index}")])
            elif c.acc is not None:
                new = expr(c.device_expr(index) or "")
        else:
            text = c.device_text(index, type_only=type_only)
            new = with_value(value, text) if text and isinstance(value, cst.SimpleString) else None
        c.report(value, code, f"{c.rules[code].summary}: '{s}'", new)
        return
    if isinstance(value, cst.IfExp):
        if _availability_idiom(c, value) is None:
            device_string(c, value.body, code, type_only=type_only, string_only=string_only)
            device_string(c, value.orelse, code, type_only=type_only, string_only=string_only)
        return  # else the availability idiom (OA106) is looked at on its own
    if isinstance(value, cst.BooleanOperation):
        device_string(c, value.left, code, type_only=type_only, string_only=string_only)
        device_string(c, value.right, code, type_only=type_only, string_only=string_only)
        return
    _dynamic_device(c, value, safe=True, code=code if code == "OA111" else "OA104")


def _other_quote(like: cst.CSTNode) -> str:
    """A quote character that can appear inside the (f-)string ``like`` (before Python 3.12, an f-string's
    expressions cannot use its own quote)."""
    quote = getattr(like, "quote", None) or getattr(like, "start", '"')[-1:]
    return "'" if '"' in quote else '"'


def _fstring(like: cst.CSTNode, parts: list) -> cst.FormattedString:
    """An f-string with the quotes of ``like`` (a string literal)."""
    quote = like.quote if isinstance(like, cst.SimpleString) else '"'
    return cst.FormattedString(parts=parts, start="f" + quote, end=quote)


DYNAMIC_MODULO = re.compile(r"cuda:%[dis]")
DYNAMIC_FORMAT = re.compile(r"cuda:\{\w*\}")


def _dynamic_text(value: cst.CSTNode) -> tuple[cst.CSTNode, str] | None:
    """The literal part of a device string built at run time, and its text. Only the exact forms count:
    f"cuda:{i}", "cuda:" + s, "cuda:%d" % i, "cuda:{}".format(i); f"cuda:{rank} ready" is log text."""
    if isinstance(value, cst.FormattedString) and len(value.parts) == 1 and \
            isinstance(value.parts[0], cst.FormattedStringText) and DEVICE.fullmatch(value.parts[0].value):
        return value.parts[0], value.parts[0].value  # f"cuda": an f-string with nothing to format
    if isinstance(value, cst.FormattedString) and len(value.parts) == 2 and \
            isinstance(value.parts[0], cst.FormattedStringText) and value.parts[0].value == "cuda:" and \
            isinstance(value.parts[1], cst.FormattedStringExpression):
        return value.parts[0], "cuda:"
    if isinstance(value, cst.BinaryOperation) and isinstance(value.left, cst.SimpleString):
        s = string_value(value.left) or ""
        if (isinstance(value.operator, cst.Add) and s == "cuda:") or \
                (isinstance(value.operator, cst.Modulo) and DYNAMIC_MODULO.fullmatch(s)):
            return value.left, s
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "format" \
            and isinstance(value.func.value, cst.SimpleString):
        s = string_value(value.func.value) or ""
        if DYNAMIC_FORMAT.fullmatch(s):
            return value.func.value, s
    return None


def _dynamic_device(c: FileCheck, value: cst.CSTNode, *, safe: bool, code: str = "OA104") -> None:
    found = _dynamic_text(value)
    if found is None or not c.on(code):
        return
    part, text = found
    c.handled.add(id(value))
    c.handled.add(id(part))
    t = c.target
    if t.keeps_cuda:
        return
    new: cst.CSTNode | None = None
    rest = text[len("cuda"):]
    if t.device:
        if isinstance(part, cst.FormattedStringText):
            new = part.with_changes(value=t.device + rest)
        elif isinstance(part, cst.SimpleString):
            new = with_value(part, t.device + rest)
    elif t.neutral and c.acc is not None:
        # in a device position the string is used at once, as "cuda:N" was; elsewhere it may be kept at import
        acc_type = expr(f"{c.acc}.type" if safe else c.acc_type_quoted(_other_quote(value)))
        if isinstance(part, cst.FormattedStringText) and isinstance(value, cst.FormattedString):
            new = value.with_changes(parts=[cst.FormattedStringExpression(acc_type),
                                            part.with_changes(value=rest), *value.parts[1:]])
            part = value
        elif isinstance(part, cst.SimpleString):  # ACC.type + ":" (parenthesised where % or .format follows)
            joined = cst.BinaryOperation(left=acc_type, operator=cst.Add(), right=with_value(part, rest))
            if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
                joined = joined.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            new = joined
    message = f"{c.rules[code].summary}: `{node_code(value)}`"
    if safe:
        c.report(part, code, message, new)
    else:
        key = c.assigned_name(value)
        if key is None:
            whole = value.deep_replace(part, new) if new is not None and part is not value else new
            c.report(part, code, message + " (outside a device position: check it)",
                     suggestion=node_code(whole) if whole is not None else None)
            return
        # kept in a name (device = f"cuda:{rank}"): rewritten as the name's other device strings are
        c.report(part, code, message + " (outside a device position: check it)", new, heuristic=True, fix="unsafe")
        if c.plan.reports and c.plan.reports[-1].node is part:
            c.state(Devices).values.append((key, c.plan.reports[-1]))


def device_arg_text(c: FileCheck, *, type_only: bool) -> str | None:
    """The expression (as code) a device-type argument takes on the target: '"npu"' or the neutral form."""
    if c.target.neutral:
        return c.device_expr(None, type_only=type_only)
    text = c.device_text(None, type_only=type_only)
    return None if text is None else repr(text).replace("'", '"')


# -- literals outside a device position ---------------------------------------------------------------
@on_string
def _string(c: FileCheck, node: cst.SimpleString, s: str) -> bool:
    """A "cuda" / "cuda:N" literal that no device position claimed: in an assignment, a default, a list."""
    parent = c.parent
    if not DEVICE.fullmatch(s) or not c.on("OA103") or c.target.keeps_cuda:
        return False
    if _device_table(c, node, parent):
        return False
    if not holds_a_device(c, node, parent):
        holder, above = value_holder(c, node)  # device_type = "cuda" if "cuda" in device else "cpu"
        if holder is node or not isinstance(above, (cst.Assign, cst.AnnAssign)):
            return False
    new: cst.CSTNode | None = None
    m = DEVICE.fullmatch(s)
    assert m is not None
    if c.target.neutral:  # it stays a string: it may be compared, concatenated or parsed later
        if c.acc is not None:
            new = expr(c.acc_type) if m.group(1) is None else \
                _fstring(node, [cst.FormattedStringExpression(expr(c.acc_type_quoted(_other_quote(node)))),
                                cst.FormattedStringText(f":{m.group(1)}")])
    elif c.target.device:
        new = with_value(node, c.device_text(m.group(1)) or "")
    c.report(node, "OA103", f"{c.rules['OA103'].summary}: '{s}' (outside a device position)", new, heuristic=True,
             fix="unsafe")
    key = c.assigned_name(node)
    if key is not None and c.plan.reports and c.plan.reports[-1].node is node:
        c.state(Devices).values.append((key, c.plan.reports[-1]))
    return True


def value_holder(c: FileCheck, node: cst.CSTNode) -> tuple[cst.CSTNode, cst.CSTNode | None]:
    """The outermost conditional or and/or whose value ``node`` can be (not its test), and what holds it."""
    depth = len(c.stack)
    child = node
    while depth > 0 and isinstance(c.stack[depth - 1], (cst.IfExp, cst.BooleanOperation)) and \
            getattr(c.stack[depth - 1], "test", None) is not child:
        child = c.stack[depth - 1]
        depth -= 1
    return child, c.stack[depth - 1] if depth > 0 else None


def _device_table(c: FileCheck, node: cst.SimpleString, parent: cst.CSTNode | None) -> bool:
    """A "cuda" key of a dict keyed by device type ({"cuda": torch.bfloat16, "cpu": torch.float32}): a lookup
    by the target's device type finds no entry. Reported, since what the entry should be is a judgement."""
    if not isinstance(parent, cst.DictElement) or parent.key is not node or len(c.stack) < 2:
        return False
    table = c.stack[-2]
    keys = {string_value(e.key) for e in getattr(table, "elements", ()) if isinstance(e, cst.DictElement)}
    if len(keys & DEVICE_TYPES) < 2:
        return False
    t = c.target
    if not t.keeps_cuda:
        what = f"an entry for '{t.device}'" if t.device else "an entry for the accelerator's device type"
        c.report(node, "OA105", f"a table keyed by device type has 'cuda' but no {what}: a lookup by the "
                 "device's type will miss it", suggestion=None)
    return True


def holds_a_device(c: FileCheck, node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
    """Whether a "cuda" literal outside a device position still names the device to use: the value of an
    assignment or a return, a parameter's default, `default=` (argparse) or a `choices=` entry, a dict
    value. An argument of any other call (os.path.join(root, "cuda")), a key, an index or a comparison
    does not."""
    if isinstance(parent, (cst.Assign, cst.AnnAssign, cst.Return, cst.Param)):
        return True
    if isinstance(parent, cst.Arg):
        return parent.keyword is not None and parent.keyword.value in ("default", "device", "devices")
    if isinstance(parent, cst.DictElement):
        return parent.value is node
    if isinstance(parent, cst.Element) and len(c.stack) >= 3:
        holder = c.stack[-3]  # Element <- List/Tuple <- Arg
        return isinstance(holder, cst.Arg) and holder.keyword is not None and holder.keyword.value == "choices"
    return False


@on(cst.FormattedString)
def _visit_fstring(c: FileCheck, node: cst.FormattedString) -> None:
    if isinstance(node, cst.FormattedString) and all(isinstance(p, cst.FormattedStringText) for p in node.parts):
        return  # f"cuda" with nothing to format: a device string only where a device goes (print(f"cuda") is text)
    if id(node) not in c.handled:
        _dynamic_device(c, node, safe=False)


@on(cst.BinaryOperation)
def _visit_binop(c: FileCheck, node: cst.BinaryOperation) -> None:
    if id(node) not in c.handled and _dynamic_text(node) is not None:
        _dynamic_device(c, node, safe=False)


# -- probes of a device string ----------------------------------------------------------------------
def _compare_suggestion(c: FileCheck, string: cst.CSTNode, probed: cst.CSTNode | None = None, *,
                        weak: bool = False) -> None:
    s = string_value(string) or ""
    t = c.target
    if t.keeps_cuda:
        return
    new: cst.CSTNode | None = None
    if t.neutral:
        # no rewrite: on a host without accelerator the neutral device type is "cpu", and a probe that was
        # false there ("cuda" in device) would turn true
        suggestion: str | None = c.acc_type if c.acc else "torch.accelerator.current_accelerator().type"
    else:
        suggestion = repr(t.device + s[len("cuda"):]) if t.device else None
        if t.device and isinstance(string, cst.SimpleString):
            new = with_value(string, t.device + s[len("cuda"):])
    c.report(string, "OA105", f"{c.rules['OA105'].summary}: '{s}'", suggestion=suggestion)
    key = c.name_key(probed) if probed is not None else None
    if key is not None and c.plan.reports and c.plan.reports[-1].node is string:
        c.state(Devices).probes.append((key, c.plan.reports[-1], new))
        if weak:
            c.state(Devices).weak.add(id(c.plan.reports[-1]))
        if _a_parameter(c, probed):
            c.state(Devices).probed_parameters.add(key)
        parent = c.stack[-1] if c.stack else None
        if isinstance(parent, (cst.If, cst.IfExp)) and parent.test is c.current:
            c.state(Devices).guards[id(c.plan.reports[-1])] = id(parent.body)


def _a_parameter(c: FileCheck, probed: cst.CSTNode | None) -> bool:
    """Whether ``probed`` is a parameter of the function the comparison is in (``device_type`` in
    ``def configure_optimizers(..., device_type): ... device_type == "cuda"``), and not rebound in it."""
    if not isinstance(probed, cst.Name):
        return False
    function = next((n for n in reversed(c.stack) if isinstance(n, (cst.FunctionDef, cst.Lambda))), None)
    if function is None:
        return False
    if probed.value not in parameter_names(function):
        return False
    if isinstance(function, cst.Lambda):
        return True
    return not rebinds(function, probed.value)


def _probed(node: cst.Comparison, string: cst.CSTNode) -> tuple[cst.CSTNode | None, bool]:
    """The value a one-operator comparison tests against a device string: ``device`` in ``"cuda" in device``,
    ``"cuda" in str(device)`` or ``device_type == "cuda"``; and whether the test alone does not tell that it holds
    a device (a substring test, or one of ``str(...)``: ``"cuda" in log_line`` is text)."""
    if len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, (
            cst.Equal, cst.NotEqual, cst.In, cst.NotIn, cst.Is, cst.IsNot)):
        return None, False
    left, right = node.left, node.comparisons[0].comparator
    other = right if left is string else left if right is string else None
    probed, weak = _probe_operand(other)
    return probed, weak or isinstance(node.comparisons[0].operator, (cst.In, cst.NotIn))


def _probe_operand(other: cst.CSTNode | None) -> tuple[cst.CSTNode | None, bool]:
    """The name a probe tests (``device`` of ``device`` or ``str(device)``), or None; and whether the test alone
    does not tell that the name holds a device: one of ``str(...)``, or of an attribute ``.device`` (``args.device``
    or a tensor's). A tensor's device type (``x.device.type``) is no probe: any accelerator may be meant."""
    through_str = isinstance(other, cst.Call) and isinstance(other.func, cst.Name) and other.func.value == "str" \
        and len(other.args) == 1 and other.args[0].keyword is None and not other.args[0].star
    if through_str:
        assert isinstance(other, cst.Call)
        other = other.args[0].value
    if isinstance(other, cst.Attribute) and other.attr.value == "type":
        # `device.type` of a name: a test of the name's device (weak: ported only where the name holds one, as
        # `device = torch.device("cuda" ...)`); a tensor's `x.device.type` (or any other attribute's) stays a
        # judgement
        # (and `self.device.type`: an attribute of the program's own object, which nn.Module does not have)
        held = other.value
        own = isinstance(held, cst.Attribute) and isinstance(held.value, cst.Name) and held.value.value == "self"
        return (held, True) if isinstance(held, cst.Name) or own else (None, through_str)
    weak = through_str or isinstance(other, cst.Attribute) and other.attr.value == "device"
    return (other if isinstance(other, (cst.Name, cst.Attribute)) else None), weak


@on(cst.Comparison)
def _visit_comparison(c: FileCheck, node: cst.Comparison) -> None:
    for op in comparison_operands(node):
        s = string_value(op)
        if s is None:
            continue
        if DEVICE.fullmatch(s) or s == "cuda:":
            c.handled.add(id(op))
            if c.on("OA105"):
                probed, weak = _probed(node, op)
                _compare_suggestion(c, op, probed, weak=weak)


def _availability_idiom(c: FileCheck, node: cst.IfExp) -> tuple[cst.SimpleString, cst.SimpleString] | None:
    """("cuda" branch, other branch) of ``"cuda" if torch.cuda.is_available() else "cpu"``, or of
    ``"cpu" if not torch.cuda.is_available() else "cuda"``; None for any other conditional."""
    test, negated = node.test, False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, True
    if not isinstance(test, cst.Call) or c.qualname(test.func) != "torch.cuda.is_available":
        return None
    device, other = (node.orelse, node.body) if negated else (node.body, node.orelse)
    if not isinstance(device, cst.SimpleString) or not isinstance(other, cst.SimpleString):
        return None
    if not DEVICE.fullmatch(string_value(device) or "") or string_value(other) is None:
        return None
    return device, other


@on(cst.IfExp)
def _visit_ifexp(c: FileCheck, node: cst.IfExp) -> None:
    """"cuda" if torch.cuda.is_available() else "cpu": the availability idiom."""
    idiom = _availability_idiom(c, node)
    if idiom is None:
        return
    device, other = idiom
    c.handled.add(id(device))
    c.handled.add(id(other))
    t = c.target
    if t.keeps_cuda:
        return
    m = DEVICE.fullmatch(string_value(device) or "")
    assert m is not None
    if t.neutral:
        if c.acc is None or m.group(1) is not None:  # an explicit index has no one-line neutral form
            c.report(node, "OA106", c.rules["OA106"].summary)
            return
        c.handled.update(id(n) for n in subtree(node.test))
        acc = c.acc.replace("()", "(check_available=True)")
        c.report(node, "OA106", c.rules["OA106"].summary, expr(f'{acc} or torch.device("{string_value(other)}")'))
        return
    c.report(device, "OA106", c.rules["OA106"].summary, with_value(device, c.device_text(m.group(1)) or ""))


@on(cst.Assign)
def _visit_assign(c: FileCheck, node: cst.Assign) -> None:
    """``name = torch.autocast`` (or ``autocast if cond else nullcontext``): calls of ``name`` take a device
    type as the original does."""
    if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
        return
    values = [node.value.body, node.value.orelse] if isinstance(node.value, cst.IfExp) else [node.value]
    for v in values:
        q = c.qualname(v) if isinstance(v, (cst.Name, cst.Attribute)) else None
        if q in DEVICE_ARGS:
            c.callable_aliases[node.targets[0].target.value] = q
            return


# -- the data flow -------------------------------------------------------------------------------------
@on_finish
def _device_flow(c: FileCheck) -> None:
    """Device-type probes go with the device strings they test. ``device = "cuda"``, ``device_type =
    "cuda" if "cuda" in device else "cpu"`` and ``if device_type == "cuda":`` are one group: rewritten
    together (a probe left as it was would now be false: no autocast, no fused optimizer, no pinned
    memory), as a safe fix when one of its names reaches a device position (``.to(device)``,
    ``device_type=device_type``), else with --unsafe-fixes."""
    if not c.state(Devices).probes and not c.state(Devices).values:
        return
    parent: dict[str, str] = {}

    def find(k: str) -> str:
        while parent.get(k, k) != k:
            k = parent[k]
        return k

    def union(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    by_statement: dict[int, list[str]] = {}
    for name, r in c.state(Devices).values:
        find(name)
        by_statement.setdefault(id(r.statement), []).append(name)
    for name, r, _ in c.state(Devices).probes:
        find(name)
        for other in by_statement.get(id(r.statement), []):
            union(name, other)  # device_type = "cuda" if "cuda" in device else "cpu"
    groups: dict[str, list[tuple[Report, cst.CSTNode | None, bool]]] = {}
    for name, r in c.state(Devices).values:
        groups.setdefault(find(name), []).append((r, r.replacement, False))
    for name, r, new in c.state(Devices).probes:
        groups.setdefault(find(name), []).append((r, new, True))
    st = c.state(Devices)
    reached = {find(n) for n in st.names if n in parent or find(n) in groups}
    probed_other = {find(name) for name, _, _ in st.probes if name not in st.probed_parameters}
    parameter_roots = {find(name) for name in st.probed_parameters} - probed_other
    # a probe whose branch moves something to CUDA with a rewrite (`x.cuda() if self.device.type == "cuda" else x`)
    # goes with that rewrite: left alone, it would be false on the target and the ported move would never run
    moves = [r for r in c.plan.reports if r.code == "OA101" and r.replacement is not None]
    guarding = {find(name) for name, r, _ in st.probes
                if id(r) in st.guards and any(st.guards[id(r)] in m.ancestors or id(m.node) == st.guards[id(r)]
                                              for m in moves)}
    for root, members in groups.items():
        if not any(probe for _, _, probe in members):
            if root in reached:  # a device string kept in a name that is used as a device
                for r, new, _ in members:
                    if new is not None:
                        r.fix = "safe"
            continue
        # a parameter's value comes from its callers, whose device strings the port rewrites (in this file or
        # another): the probe follows them, and left alone it would turn false on the target
        parameters = all(probe for _, _, probe in members) and root in parameter_roots
        if all(probe and id(r) in st.weak for r, _, probe in members) and root not in reached and not parameters \
                and root not in guarding:
            # substring tests and tests of str(...) alone, of a name that holds no device string and goes where no
            # device goes: "cuda" in log_line is text
            for r, _, _ in members:
                r.message += " (not rewritten: nothing shows that the value tested holds a device)"
            continue
        if any(new is None for _, new, _ in members):
            for r, _, _ in members:
                if r.replacement is not None:
                    r.suggestion, r.replacement = node_code(r.replacement), None
                r.message += " (not rewritten: a device string it goes with has no rewrite here)"
            continue
        cls = "safe" if root in reached or parameters or root in guarding else "unsafe"
        for r, new, probe in members:
            r.replacement, r.fix, r.suggestion = new, cls, None
            if probe:
                r.message += " (ported with the device strings it tests)"

