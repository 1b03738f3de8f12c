"""Terminal views of the coverage database: release lists, one release, diffs, coverage shares."""

from __future__ import annotations

from collections import Counter

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from opaudit.matrix import Database, Matrix, Support, provenance
from opaudit.matrix.coverage import Coverage, Diff, compatibility

_STATUS_STYLE = {"native": "green", "composite": "cyan", "cpu_fallback": "yellow", "opaudit_fallback": "yellow",
                 "missing": "bold red", "version_skew": "magenta",
                 "unknown": "dim"}


def status_text(s: Support) -> Text:
    t = Text(s.status, style=_STATUS_STYLE.get(s.status, ""))
    if s.via:
        t.append(f" via {s.via}", style="dim")
    return t


def render_list(db: Database, console: Console, vendors: list[str] | None = None) -> None:
    """One line per release, oldest first per vendor; the vendor's default (newest published) is starred."""
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    wide = console.width >= 140  # the other op lists only where they fit beside the rest
    t.add_column("target", no_wrap=True)
    t.add_column("PyTorch", no_wrap=True, min_width=7)
    t.add_column("native", justify="right", no_wrap=True, min_width=6)
    if wide:
        t.add_column("other lists", overflow="fold", ratio=2)
    t.add_column("also", overflow="ellipsis", no_wrap=True, ratio=1)
    for vendor in vendors or db.vendors:
        rels = db.by_vendor.get(vendor, [])
        default = db.newest(vendor) if rels else None
        for e in rels:
            counts = dict(e.counts)
            other = ", ".join(f"{k} {v:,}" for k, v in counts.items() if k != "native")
            native = f"{counts.get('native', 0):,}" + ("" if e.exact else " ≤")
            also = [e.vendor_release] if e.vendor_release else []
            also += [a for a in e.aliases if a not in also][:2]
            label = Text(e.key, style="bold" if e is default else "")
            if e is default:
                label.append(" *", style="green")
            if e.prerelease:
                label.append(" (pre)", style="dim")
            t.add_row(label, e.torch, native, *([other] if wide else []), ", ".join(also))
        t.add_section()
    console.print(t)
    console.print("* the release a vendor alone names (its newest published one); (pre) a development snapshot or "
                  "pre-release; ≤ the list is an upper bound", style="dim")


def render_compatibility(db: Database, console: Console) -> None:
    """The releases built for each PyTorch line: a table with a column per vendor where the terminal is wide enough
    for each release name whole, else stacked (a PyTorch line, then a row per vendor, its releases wrapped between
    names), as at 80 columns."""
    import textwrap

    table = compatibility(db)
    vendors = [v for v in db.vendors if v not in ("cuda", "cpu", "mps")]
    lines = sorted(table, key=lambda s: tuple(int(x) for x in s.split(".")))
    widest = {v: max([len(v)] + [len(n) for line in lines for n in table[line].get(v, [])]) for v in vendors}
    if 8 + sum(w + 2 for w in widest.values()) <= console.width:
        t = Table(title="releases built for each PyTorch line", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False)
        t.add_column("PyTorch", no_wrap=True)
        for v in vendors:
            t.add_column(v, min_width=widest[v])
        for line in lines:
            t.add_row(line, *["\n".join(table[line].get(v, [])) for v in vendors])
        console.print(t)
        return
    console.print(Text("releases built for each PyTorch line", style="bold"))
    name_w = max(len(v) for v in vendors) + 2
    for line in lines:
        console.print(Text(f"PyTorch {line}", style="bold"))
        for v in vendors:
            names = table[line].get(v, [])
            if not names:
                continue
            wrapped = textwrap.wrap(", ".join(names), width=max(20, console.width - name_w - 2),
                                    break_long_words=False, break_on_hyphens=False)
            for i, text in enumerate(wrapped):
                console.print(f"  {(v if i == 0 else ''):<{name_w}}{text}", soft_wrap=True)


def render_release(matrix: Matrix, console: Console, ops: list[str] | None = None) -> None:
    r = matrix.release
    console.print(Text(r.key, style="bold"), Text(f"  {r.package} for PyTorch {r.torch}", style="dim"))
    facts = [f"device type {r.device_type}", f"dispatch key {r.dispatch_key}"]
    if r.import_name:
        facts.append(f"import {r.import_name}")
    if r.vendor_release:
        facts.append(f"vendor release {r.vendor_release}")
    console.print("  " + " · ".join(facts))
    if r.aliases:
        console.print(f"  also known as {', '.join(r.aliases)}", style="dim")
    console.print(f"  data: {'exact' if r.exact else 'UPPER BOUND or approximate'}: {r.accuracy}",
                  style="" if r.exact else "yellow")
    fb = r.fallback
    if fb.exists:
        state = "on by default" if fb.default_on else "off by default"
        switch = f"; {fb.switch}" if fb.switch else ""
        console.print(f"  CPU fallback: {state}{switch}" + (f" ({fb.note})" if fb.note else ""))
    else:
        console.print("  CPU fallback: none" + (f" ({fb.note})" if fb.note else ""))
    counts = ", ".join(f"{k} {len(v):,}" for k, v in sorted(r.ops.items()))
    console.print(f"  ops: {counts}")
    if matrix.torch_ops is None:
        console.print(f"  no PyTorch {r.torch} op table is staged: composites cannot be resolved", style="yellow")
    for n in r.notes:
        console.print(f"  note: {n}", style="dim")
    for src in r.sources:
        console.print(f"  source: {src.repo} {src.path} @ {src.commit or '?'} (sha256 {src.sha256[:12]})", style="dim")
    if provenance.described(r):
        console.print(f"  provenance: {provenance.page_path()} (the public origin of each source above and of "
                      "each fact a note cites as coverage_db/SOURCES.md#...)", style="dim")
    for c in r.all_caveats():
        if c.op == "*":
            console.print(f"  caveat for every op: {c.describe()}", style="yellow")
    specific = Counter(c.kind for c in r.all_caveats() if c.op != "*")
    if specific:
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(specific.items()))
        console.print(f"  {sum(specific.values())} dtype caveats of single ops or APIs ({kinds})"
                      + (" (--op shows those of an op)" if not ops else ""))
    if ops:
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        t.add_column("op")
        t.add_column("status")
        t.add_column("note", overflow="fold")
        for op in ops:
            s = matrix.resolve(op)
            note = s.note + (f" [leaves: {', '.join(s.leaves)}]" if s.leaves else "")
            t.add_row(op, status_text(s), note)
            for c in matrix.caveats(op):
                if c.op == "*":
                    continue
                t.add_row("", Text("caveat", style="yellow"), c.describe())
        console.print(t)


def render_diff(diffs: list[Diff], console: Console, a: str, b: str) -> None:
    if not diffs:
        console.print(f"{a} and {b} list the same ops")
        return
    for d in diffs:
        console.print(Text(f"{d.category}: +{len(d.gained)} -{len(d.lost)}", style="bold"))
        if d.gained:
            console.print(Text(f"  only in {b}: " + ", ".join(d.gained), style="green"))
        if d.lost:
            console.print(Text(f"  only in {a}: " + ", ".join(d.lost), style="red"))


def render_coverage(rows: list[Coverage], console: Console) -> None:
    t = Table(title="share of PyTorch's CUDA kernels registered natively", box=box.SIMPLE_HEAD, show_edge=False,
              pad_edge=False)
    for col, justify in (("target", "left"), ("PyTorch", "left"), ("covered", "right"), ("CUDA ops", "right"),
                         ("share", "right")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for c in rows:
        share = f"{c.share:.1%}" + ("" if c.exact else " (bound)")
        t.add_row(c.key, c.torch, f"{c.covered:,}", f"{c.cuda:,}", share)
    console.print(t)
