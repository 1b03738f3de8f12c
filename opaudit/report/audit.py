"""Views of an Audit: the terminal summary, JSON (versioned, audit.schema.json), CSV and Markdown.

Each reads ``Audit.frame`` / ``Audit.verdicts`` only, so every format states the same numbers.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from opaudit import __version__
from opaudit.auditing import Audit, OpGroup, Verdict, host_summary, short, skew_span, source_name
from opaudit.report.matrix import _STATUS_STYLE

SCHEMA = "opaudit-audit"
SCHEMA_VERSION = 1
_VERDICT_STYLE = {"runs": "green", "cpu_fallback": "yellow", "uncertain": "dim", "fails": "bold red",
                  "version_skew": "magenta"}


def _verdict_text(v: Verdict) -> Text:
    return Text(v.summary, style=_VERDICT_STYLE.get(v.verdict, ""))


def _where(modules: tuple[str, ...], sources: tuple[str, ...]) -> str:
    parts = []
    if modules:  # "" is the model itself (or no module: a loss, an optimizer step)
        parts.append((modules[0] or "(top level)") + (f" +{len(modules) - 1}" if len(modules) > 1 else ""))
    if sources:
        parts.append(sources[0] + (f" +{len(sources) - 1}" if len(sources) > 1 else ""))
    return " · ".join(parts)


# -- terminal --------------------------------------------------------------------------------------


def _worst_first(df: Any) -> dict[str, list[Any]]:
    """The rows of a frame by target, each target's worst status first, then most calls (ties in frame order):
    one stable sort of the whole frame orders each target's rows as sorting them apart would."""
    out: dict[str, list[Any]] = {}
    for r in df.sort_values(["status", "calls"], ascending=[False, False], kind="stable").itertuples():
        out.setdefault(r.target, []).append(r)
    return out


def render_audit(a: Audit, console: Console, *, top: int = 12) -> None:
    """Per selected target: the verdict; for those that fail or fall back, the ops, where they are issued, and
    what to do; then the oldest release of each vendor that runs the trace."""
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title="Will it run?", title_justify="left")
    t.add_column("target", no_wrap=True)
    t.add_column("PyTorch", no_wrap=True)
    t.add_column("verdict", overflow="fold")
    for v in a.selected_verdicts:
        t.add_row(v.target, v.torch, _verdict_text(v))
    console.print(t)
    host = host_summary(a)
    if host:
        console.print(Text(host, style="dim"), overflow="fold")
    df = a.frame
    df = df[df["selected"] & df["status"].isin(["missing", "cpu_fallback", "unknown", "version_skew"])
            & (df["kind"] != "choice")]
    by_target = _worst_first(df)
    for v in a.selected_verdicts:
        if v.verdict == "runs" and not v.advice:
            continue
        rows = by_target.get(v.target, [])
        console.print(Text(f"{v.target}: ", style="bold") + _verdict_text(v))
        switch = a.matrices[v.target].release.fallback.switch
        if len(rows):
            for r in rows[:top]:
                line = Text("  ")
                line.append(f"{r.status:<12}", style=_STATUS_STYLE.get(str(r.status), ""))
                line.append(f" {short(r.op)}", style="bold")
                within = f", in {short(r.within)}" if isinstance(r.within, str) else ""
                line.append(f" [{r.phase}{within}] ×{r.calls:,}")
                console.print(line, overflow="fold")
                where = _where(r.modules, r.sources)
                note = r.note.replace(f" ({switch})", "") if switch else r.note  # said once, in the advice
                for extra in (f"at {where}" if where else "", note):
                    if extra:
                        console.print(Text(f"{'':15}{extra}", style="dim"), overflow="fold")
            if len(rows) > top:
                console.print(f"  … {len(rows) - top} more (see the HTML or CSV report)", style="dim")
        for advice in v.advice:
            console.print(f"  → {advice}", style="cyan", markup=False, highlight=False)
    oldest = a.oldest_running()
    if len(a.verdicts) > len(a.selected):
        o = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left",
                  title=f"Oldest release that runs it ({len(a.verdicts)} releases checked)")
        o.add_column("vendor", no_wrap=True)
        o.add_column("natively")
        o.add_column("with CPU fallback")
        o.add_column("run it", justify="right", no_wrap=True)
        o.add_column("PyTorch too old")
        asked = {v.vendor for v in a.selected_verdicts}  # the vendors of the targets asked for (all by default)

        def release(vendor: str, target: str | None) -> Text | str:
            # the row names the vendor: a release alone fits 80 columns, and wraps whole, never mid-name
            return target.removeprefix(f"{vendor}@") if target else Text("none", style="red")

        for vendor, rels in a.landscape().items():
            if vendor not in asked:
                continue
            n = sum(v.runs for v in rels)
            o.add_row(vendor, release(vendor, oldest[vendor]["native"]), release(vendor, oldest[vendor]["runs"]),
                      f"{n}/{len(rels)}", Text(skew_span(oldest[vendor]["version_skew"]), style="magenta"))
        console.print(o)


# -- JSON ------------------------------------------------------------------------------------------


def _group_json(g: OpGroup) -> dict[str, Any]:
    return {"op": g.op, "kind": g.kind, "phase": g.phase, "within": g.within, "calls": g.calls,
            "dtypes": list(g.dtypes), "modules": list(g.modules), "sources": list(g.sources)}


def _ran(g: OpGroup | None) -> dict[str, Any] | None:
    """An op as a target's own trace ran it (Audit.traced): its calls and dtypes, None where it is not called."""
    return None if g is None else {"calls": g.calls, "dtypes": list(g.dtypes)}


def _failing(g: OpGroup) -> dict[str, Any]:
    """The calls of an op that fail on a target where its others do not (Audit.failing)."""
    return {"calls": g.calls, "dtypes": list(g.dtypes), "modules": list(g.modules), "sources": list(g.sources)}


def to_json(a: Audit) -> dict[str, Any]:
    """The audit as a versioned document (opaudit/report/audit.schema.json)."""
    selected = a.selected
    ops = []
    for i, g in enumerate(a.groups):
        ops.append({
            **_group_json(g),
            "results": {k: {"status": a.results[k][i].status, "via": a.results[k][i].via,
                            "note": a.results[k][i].note, "caveats": list(a.caveats[k][i]),
                            **({"ran": _ran(a.traced[k][i])} if k in a.traced else {}),
                            **({"failing": _failing(a.failing[k][i])} if i in a.failing.get(k, {}) else {})}
                        for k in selected},
        })
    used_sources = {s for g in (*a.groups, *a.host) for s in g.sources}
    used_modules = {m for g in (*a.groups, *a.host) for m in g.modules}
    return {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "opaudit_version": __version__,
        "trace": asdict(a.trace.meta),
        "statuses": ["native", "composite", "cpu_fallback", "opaudit_fallback", "missing", "unknown"],
        "targets": [a.verdicts[k].to_json() for k in selected],
        "landscape": [{k: v.to_json()[k] for k in ("target", "vendor", "release", "torch", "order", "exact",
                                                   "prerelease", "verdict", "summary", "ops")}
                      for rels in a.landscape().values() for v in rels],
        "oldest_running": a.oldest_running(),
        "ops": ops,
        "host_ops": [_group_json(g) for g in a.host],
        "modules": {m: t for m, t in sorted(a.trace.modules.items()) if m in used_modules},
        "sources": {s: c for s, c in sorted(a.trace.sources.items()) if s in used_sources},
        **({"fallback": [s.to_json() for s in a.fallback]} if a.fallback else {}),
    }


def json_text(a: Audit) -> str:
    return json.dumps(to_json(a), indent=1) + "\n"


# -- CSV -------------------------------------------------------------------------------------------


def csv_text(a: Audit) -> str:
    """One row per op x phase x selected target (``where`` device), then one per op x phase that ran on host
    tensors only (``where`` host, no target: held to none); list cells joined with "; ".

    The rows of ``Audit.frame`` (its selected targets), written from the audit's own lists: the cells of an op
    are the same on every target's row, so each is quoted once and the rows are joined from those pieces."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="")

    def piece(cells: list[Any]) -> str:  # cells as the writer quotes them, with a separator after them
        if cells == [""]:  # (alone on a row, the writer quotes an empty cell; within one, it is empty)
            return ","
        buf.seek(0)
        buf.truncate()
        w.writerow(cells)
        return buf.getvalue() + ","

    joined: dict[tuple, str] = {}  # the same module and source lists recur

    def cell(x: Any) -> Any:
        if isinstance(x, tuple):
            if x not in joined:
                joined[x] = "; ".join(x)
            return joined[x]
        return "" if x is None else x

    cols = ["target", "vendor", "release", "torch", "op", "kind", "phase", "within", "status", "via", "note",
            "calls", "dtypes", "modules", "sources", "caveats", "where"]
    out = [piece(cols)[:-1] + "\n"]
    ops = [piece([g.op, g.kind, g.phase, cell(g.within)]) for g in a.groups]
    pieces: dict[int, str] = {}  # a group's calls, dtypes, modules and lines, once per group object

    def use(g: OpGroup) -> str:
        text = pieces.get(id(g))
        if text is None:
            text = pieces[id(g)] = piece([g.calls, cell(g.dtypes), cell(g.modules), cell(g.sources)])
        return text

    results: dict[tuple, str] = {}
    caveats: dict[tuple, str] = {}
    for key in a.matrices:  # the frame's order: every audited target, selected first
        v = a.verdicts[key]
        if not v.selected:
            continue
        target = piece([key, v.vendor, v.release, v.torch])
        for op, g, s, cav in zip(ops, a.rows(key), a.results[key], a.caveats[key], strict=True):
            r = (s.status, s.via, s.note)
            res = results.get(r)
            if res is None:
                res = results[r] = piece([s.status, cell(s.via), cell(s.note)])
            c = tuple(cav)
            cv = caveats.get(c)
            if cv is None:
                cv = caveats[c] = piece([cell(c)]) + "device\n"
            out.append(target + op + res + use(g) + cv)
    for g in a.host:
        out.append(piece(["", "", "", "", g.op, g.kind, g.phase, cell(g.within), "", "", "", g.calls, cell(g.dtypes),
                          cell(g.modules), cell(g.sources), "", "host"])[:-1] + "\n")
    return "".join(out)


# -- Markdown --------------------------------------------------------------------------------------


def _md(text: str) -> str:
    """Text safe inside a Markdown table cell: no pipes, no markup, no line breaks."""
    out = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    for ch in "<>*_`[]":
        out = out.replace(ch, "\\" + ch)
    return out


def _code(text: str) -> str:
    """An inline code span inside a Markdown table cell (backslashes are literal in code spans)."""
    return "`" + str(text).replace("`", "'").replace("|", "\\|").replace("\n", " ") + "`"


def markdown_text(a: Audit, *, top: int = 15) -> str:
    """For a pull-request comment: the verdicts, then the ops to look at per target."""
    m = a.trace.meta
    src = source_name(a.trace)
    distinct = len({g.op for g in a.groups if g.kind != "api"})
    lines = [f"### opaudit: will {_code(src)} run?", "",
             f"{distinct} distinct ops ({', '.join(m.phases)}), traced in {m.mode} mode "
             f"on {m.device}{' (simulated on the CPU)' if m.simulated else ''}, torch {m.torch_version}.", "",
             "| target | PyTorch | verdict |", "| --- | --- | --- |"]
    icon = {"runs": "✅", "cpu_fallback": "⚠️", "uncertain": "❔", "fails": "❌", "version_skew": "⏫"}
    for v in a.selected_verdicts:
        lines.append(f"| {_code(v.target)} | {v.torch} | {icon[v.verdict]} {_md(v.summary)} |")
    host = host_summary(a)
    if host:
        lines += ["", _md(host) + "."]
    df = a.frame
    df = df[df["selected"] & df["status"].isin(["missing", "cpu_fallback", "version_skew"]) & (df["kind"] != "choice")]
    by_target = _worst_first(df)
    for v in a.selected_verdicts:
        rows = by_target.get(v.target, [])
        if not len(rows) and not v.advice:
            continue
        lines += ["", f"<details><summary><code>{_md(v.target)}</code>: {_md(v.summary)}</summary>", ""]
        if len(rows):
            lines += ["| status | op | phase | calls | where |", "| --- | --- | --- | --- | --- |"]
            for r in rows[:top]:
                lines.append(f"| {r.status} | {_code(short(r.op))} | {r.phase} | {r.calls:,} | "
                             f"{_md(_where(r.modules, r.sources))} |")
            if len(rows) > top:
                lines.append(f"\n{len(rows) - top} more in the full report.")
        if v.advice:
            lines.append("")
            lines += [f"- {_md(x)}" for x in v.advice]
        lines += ["", "</details>"]
    oldest = a.oldest_running()
    if len(a.verdicts) > len(a.selected):
        lines += ["", f"Oldest release that runs it ({len(a.verdicts)} releases checked):", "",
                  "| vendor | natively | with CPU fallback | PyTorch too old |", "| --- | --- | --- | --- |"]
        for vendor, o in oldest.items():
            lines.append(f"| {vendor} | {_md(o['native'] or 'none')} | {_md(o['runs'] or 'none')} | "
                         f"{_md(skew_span(o['version_skew']))} |")
    for st in a.fallback:
        lines += ["", f"Fallback on {_code(st.target)} ({st.kind}):", "",
                  "| op | path | calls | moved | ms |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| {_code(o.op)} | {o.path} | {o.calls:,} | {o.bytes:,} B | {o.seconds * 1e3:.1f} |"
                  for o in st.fallen_back()[:top]] or ["| (none: every op ran on the device) | | | | |"]
    return "\n".join(lines) + "\n"
