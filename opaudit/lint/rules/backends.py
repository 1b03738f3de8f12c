"""OA6xx, backend flags, attention kernels, compile: what selects CUDA kernels or CUDA graphs.

- ``torch.backends.cuda.sdp_kernel(...)`` -> ``torch.nn.attention.sdpa_kernel([...])`` with the enabled
  backends (OA607);
- ``torch.compile`` with CUDA graphs (``mode="reduce-overhead"`` / ``"max-autotune"``,
  ``backend="cudagraphs"``, ``options={"triton.cudagraphs": True}``: OA609) or with inductor, whose
  kernels are Triton's (OA610).

``if torch.backends.cudnn.is_available(): torch.backends.cudnn.deterministic = True``: the probe (OA612) that guards
only flags that do nothing off CUDA is info like them.

The backend flags matched by name (``torch.backends.cudnn.*``, ``torch.backends.cuda.matmul.*``) are the
catalogue's ``apis``: apis.py. Examples: rules/catalogue.toml [OA601] ... [OA612].
"""

from __future__ import annotations

import libcst as cst

from opaudit.lint.catalogue import version_at_least
from opaudit.lint.walk import FileCheck, Report, argument, expr, node_code, on_call, on_finish, string_value

SDP_FLAGS = {"enable_flash": "FLASH_ATTENTION", "enable_math": "MATH", "enable_mem_efficient": "EFFICIENT_ATTENTION",
             "enable_cudnn": "CUDNN_ATTENTION"}


@on_call("torch.backends.cuda.sdp_kernel")
def _sdp_kernel(c: FileCheck, node: cst.Call, q: str) -> None:
    if c.on("OA607"):
        c.handled.add(id(node.func))
        c.report(node, "OA607", f"{c.rules['OA607'].summary}: `{q}`", _sdpa_kernel(c, node))


def _sdpa_kernel(c: FileCheck, node: cst.Call) -> cst.BaseExpression | None:
    if not version_at_least(c.min_torch, "2.3"):
        return None
    flags = {k: True for k in SDP_FLAGS}
    for a in node.args:
        if a.keyword is None or a.keyword.value not in SDP_FLAGS or not isinstance(a.value, cst.Name) \
                or a.value.value not in ("True", "False"):
            return None  # only literal flags can be translated
        flags[a.keyword.value] = a.value.value == "True"
    # every flag defaults to True, enable_cudnn included: a backend is allowed unless turned off
    backends = [f"torch.nn.attention.SDPBackend.{SDP_FLAGS[k]}" for k, on in flags.items() if on]
    func = c.renamed(node.func, "torch.nn.attention.sdpa_kernel")
    return expr(f"{node_code(func)}([{', '.join(backends)}])")


@on_call("torch.compile")
def _compile(c: FileCheck, node: cst.Call, q: str) -> None:
    if not (c.on("OA609") or c.on("OA610")):
        return
    mode = argument(node, 99, "mode")
    backend = argument(node, 99, "backend")
    options = argument(node, 99, "options")
    graphs = (mode is not None and string_value(mode.value) in ("reduce-overhead", "max-autotune")) or \
        (backend is not None and string_value(backend.value) == "cudagraphs") or \
        (options is not None and isinstance(options.value, cst.Dict) and any(
            isinstance(e, cst.DictElement) and string_value(e.key) == "triton.cudagraphs" and
            isinstance(e.value, cst.Name) and e.value.value == "True" for e in options.value.elements))
    if graphs:
        c.report(node, "OA609", c.rules["OA609"].summary)
    if backend is None or string_value(backend.value) == "inductor":
        c.report(node, "OA610", c.rules["OA610"].summary)



@on_finish
def _cudnn_guards(c: FileCheck) -> None:
    """``torch.backends.cudnn.is_available()`` (OA612) as the test of an ``if`` whose every statement sets a flag
    that is info (cuDNN's own, which do nothing off CUDA): False on the target skips flags that would change
    nothing there, so the probe is info too (and an import of cudnn used only by them is, engine.py)."""
    probes = [r for r in c.plan.reports if r.code == "OA612" and r.severity != "info"
              and isinstance(r.statement, cst.If) and r.statement.orelse is None
              and (id(r.statement.test) in r.ancestors or r.node is r.statement.test)]
    if not probes:
        return
    by_statement: dict[int, list[Report]] = {}
    for r in c.plan.reports:
        if r.statement is not None:
            by_statement.setdefault(id(r.statement), []).append(r)

    def info(r: Report) -> bool:
        return (r.severity or c.rules[r.code].severity) == "info"

    for r in probes:
        assert isinstance(r.statement, cst.If)  # (probes holds only those)
        body = r.statement.body.body
        if body and all(isinstance(s, cst.SimpleStatementLine) and by_statement.get(id(s)) and
                        all(info(u) for u in by_statement[id(s)]) for s in body):
            r.severity = "info"
            r.message += " (it only guards flags that do nothing off CUDA: False there skips them, as they " \
                         "would change nothing)"
