"""The terminal view of a trace: a header with how it was taken, and the op table by phase.

A view of ``Trace.to_pandas()``: grouping happens on that frame, so this table and every other
format agree.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from opaudit.tracing import branches
from opaudit.tracing.schema import PHASES, Trace

_PHASE_STYLE = {"forward": "cyan", "backward": "magenta", "optimizer": "green"}



def _short(values, limit: int) -> str:
    values = [v for v in values if v]
    if not values:
        return ""
    shown = ", ".join(values[:limit])
    return shown + (f" +{len(values) - limit}" if len(values) > limit else "")


def display_name(op: str) -> str:
    """``aten::view.default`` -> ``view``; ``aten::add.Tensor`` -> ``add.Tensor``; other namespaces kept."""
    return op.removeprefix("aten::").removesuffix(".default")


def op_table(trace: Trace, *, top: int | None = None):
    """One row per (phase, within, kind, op): calls, dtype signatures, modules and lines, most called first.

    Ops run inside a device-selected composite follow its ``choice`` row (``within`` set); ``top``
    limits the top-level rows per phase (a choice keeps its inner rows).
    """
    import pandas as pd

    df = trace.to_pandas()
    if df.empty:
        return df
    for col in ("module", "source", "within"):
        df[col] = df[col].fillna("")

    def ranked(g, col):
        s = g.groupby(col)["calls"].sum().sort_values(ascending=False, kind="stable")
        return [str(k) for k in s.index if k != ""]

    rows = []
    for (phase, within, kind, op), g in df.groupby(["phase", "within", "kind", "op"], sort=False):
        rows.append({"phase": phase, "within": within, "kind": kind, "op": op, "calls": int(g["calls"].sum()),
                     "dtypes": ranked(g, "dtypes"), "modules": ranked(g, "module"), "sources": ranked(g, "source")})
    table = pd.DataFrame(rows)
    ordered = []
    for phase in PHASES:
        in_phase = table[table["phase"] == phase]
        outer = in_phase[in_phase["within"] == ""].sort_values(["calls", "op"], ascending=[False, True], kind="stable")
        if top is not None:
            outer = outer.head(top)
        for r in outer.itertuples(index=False):
            ordered.append(r._asdict())
            if r.kind == "choice":
                inner = in_phase[in_phase["within"] == r.op].sort_values(["calls", "op"], ascending=[False, True],
                                                                         kind="stable")
                ordered.extend(x._asdict() for x in inner.itertuples(index=False))
        # inner ops whose choice was called in another phase (the backward of an attention, say):
        # under a heading row of their own, which has no calls
        shown = set(outer["op"]) if len(outer) else set()
        orphans = in_phase[(in_phase["within"] != "") & ~in_phase["within"].isin(shown)]
        for within, inner in orphans.groupby("within", sort=True):
            heading = "branch" if branches.of(within) else "choice"  # a device branch of torch's Python: always here
            ordered.append({"phase": phase, "within": "", "kind": heading, "op": within, "calls": None,
                            "dtypes": [], "modules": [], "sources": []})
            inner = inner.sort_values(["calls", "op"], ascending=[False, True], kind="stable")
            ordered.extend(x._asdict() for x in inner.itertuples(index=False))
    return pd.DataFrame(ordered, columns=table.columns)


def render_trace(trace: Trace, console: Console, *, top: int | None = None) -> None:
    m = trace.meta
    what = m.source.get("path") or m.source.get("model") or m.source.get("spec") or "code"
    if m.source.get("factory") and m.source.get("factory") != "get_model":
        what += f":{m.source['factory']}"
    distinct = len(trace.ops())
    head = Text()
    head.append(f"{what}", style="bold")
    head.append(f"  mode {m.mode}", style="yellow")
    head.append(f" ({m.mode_reason})" if m.mode_reason else "")
    console.print(head)
    device = f"device {m.device}" + (" (simulated)" if m.simulated else "")
    details = [f"torch {m.torch_version}", device, f"phases {', '.join(m.phases) or '-'}"]
    if m.optimizer:
        details.append(f"optimizer {m.optimizer}")
    if m.amp:
        scaler = ", GradScaler" if m.amp.get("grad_scaler") else ""
        details.append(f"amp {m.amp['dtype']} ({m.amp['policy']} policy{scaler})")
    if m.steps:
        details.append(f"{m.steps} forward/backward, {m.optimizer_steps} optimizer steps")
    console.print("  " + " · ".join(details), style="dim")
    console.print(f"  {m.total_calls:,} op calls, {distinct} distinct ops"
                  + (f", {len(trace.custom_ops)} custom" if trace.custom_ops else ""), style="dim")
    if m.status != "complete":
        console.print(f"  trace {m.status}: {m.error}", style="bold red" if m.status == "partial" else "yellow")
    for w in m.warnings:
        console.print(f"  warning: {w}", style="yellow")
    if m.scalar_guesses:
        n = sum(m.scalar_guesses.values())
        console.print(f"  {n} .item() value(s) guessed on {m.mode} tensors at "
                      f"{_short(sorted(m.scalar_guesses), 3)} (see docs/trace-format.md)", style="yellow")

    rows = op_table(trace, top=top)
    if len(rows) == 0:
        console.print("no ops recorded", style="yellow")
        return
    for phase, group in rows.groupby("phase", sort=False):
        calls = trace.calls(phase=phase)
        distinct_here = len(trace.ops(phase))
        style = "bold " + _PHASE_STYLE.get(phase, "")
        console.print(Text(f"{phase}: {calls:,} calls, {distinct_here} ops", style=style))
        console.print(_phase_table(group, console.width))


def _phase_table(rows, width: int) -> Table:
    import pandas as pd

    # fixed widths, fitted to the terminal: rich would otherwise squeeze the calls column away
    op_w = min(44, max(20, max(len(display_name(o)) + 12 for o in rows["op"])), max(20, width // 3))
    dtypes_w = 24 if width >= 110 else 16
    rest = width - op_w - 7 - dtypes_w - 8  # 8: the gaps between columns
    with_source = rest >= 30
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    t.add_column("op", no_wrap=True, width=op_w, overflow="ellipsis")
    t.add_column("calls", justify="right", no_wrap=True, width=7)
    t.add_column("dtypes", no_wrap=True, overflow="ellipsis", width=dtypes_w)
    t.add_column("modules", no_wrap=True, overflow="ellipsis", width=rest // 2 if with_source else max(rest, 10))
    if with_source:
        t.add_column("source", no_wrap=True, overflow="ellipsis", width=rest - rest // 2)
    current_choice = None
    for r in rows.itertuples():
        if r.kind in ("choice", "branch"):
            current_choice = r.op
        name = display_name(r.op)
        if r.within:
            op = Text("  └ " if r.within == current_choice else f"  └ ({display_name(r.within)}) ", style="dim")
            op.append(name)
        else:
            op = Text(name)
        if r.kind == "choice":
            op.stylize("bold blue")
            op.append(" [choice]", style="blue")
        elif r.kind == "branch":
            op.stylize("bold magenta")
            op.append(" [device branch]", style="magenta")
        elif r.kind == "custom":
            op.stylize("bold yellow")
            op.append(" [custom]", style="yellow")
        elif r.kind == "api":
            op.stylize("dim")
            op.append(" [api]", style="dim")
        cells: list[Text | str] = [op, "" if pd.isna(r.calls) else f"{int(r.calls):,}", _short(r.dtypes, 2),
                                   _short(r.modules, 2)]
        if with_source:
            cells.append(_short(r.sources, 1))
        t.add_row(*cells)
    return t
