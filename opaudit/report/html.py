"""The self-contained HTML report: one file, inline CSS, JS and SVG, no network request of any kind.

The page is rendered from reports/audit.html.j2 (jinja2, autoescaped). Everything the page shows
comes from the Audit: summary cards and the heat map are rendered here; the op table, the module tree
and the source lines are drawn by the page's script from one embedded JSON payload (strings
deduplicated, statuses as indices), so a trace checked against every release stays small.
"""

from __future__ import annotations

import json
from typing import Any

from opaudit import __version__
from opaudit.auditing import VERDICTS, Audit, host_summary, skew_span, source_name
from opaudit.data import data_dir
from opaudit.fallback.stats import PATH_TEXT
from opaudit.matrix.matrix import STATUSES

TEMPLATE = "audit.html.j2"
VERDICT_COLOURS = {"runs": "#2e9d58", "cpu_fallback": "#e0a526", "uncertain": "#a3a9b3", "fails": "#d6453d",
                   "version_skew": "#7b5cc4"}
STATUS_COLOURS = {"native": "#2e9d58", "composite": "#4a90c8", "cpu_fallback": "#e0a526",
                  "opaudit_fallback": "#c07ad6", "missing": "#d6453d", "version_skew": "#7b5cc4",
                  "unknown": "#a3a9b3"}


def payload(a: Audit) -> dict[str, Any]:
    """What the page's script draws from: ops, per selected target their results, strings once."""
    strings: dict[str, int] = {"": 0}

    def s(text: str | None) -> int:
        return strings.setdefault(text or "", len(strings))

    groups = [[s(g.op), s(g.kind), s(g.phase), s(g.within), g.calls, [s(x) for x in g.dtypes],
               [s(x) for x in g.modules], [s(x) for x in g.sources]] for g in a.groups]
    status_index = {st: i for i, st in enumerate(STATUSES)}
    results = {k: [[status_index[r.status], s(r.via), s(r.note), s("\n".join(c))]
                   for r, c in zip(a.results[k], a.caveats[k], strict=True)] for k in a.selected}
    targets = [{"key": v.target, "vendor": v.vendor, "release": v.release, "torch": v.torch, "verdict": v.verdict,
                "summary": v.summary, "advice": v.advice, "exact": v.exact} for v in a.selected_verdicts]
    used_modules = {m for g in a.groups for m in g.modules}
    used_sources = {x for g in a.groups for x in g.sources}
    return {
        "statuses": list(STATUSES),
        "colours": STATUS_COLOURS,
        "targets": targets,
        "groups": groups,
        "results": results,
        "modules": {m: t for m, t in a.trace.modules.items() if m in used_modules},
        "code": {x: c for x, c in a.trace.sources.items() if x in used_sources},
        "strings": list(strings),
    }


def script_json(data: Any) -> str:
    """JSON that is safe inside a <script> element whatever the strings hold (</script>, <!--)."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").replace(
        "\u2028", "\\u2028").replace("\u2029", "\\u2029")


def heatmap(a: Audit) -> dict[str, Any]:
    """Vendor rows x release cells, each coloured by its verdict (oldest release left)."""
    rows = []
    cell, gap, label_w = 13, 2, 92
    land = a.landscape()
    width = label_w + max((len(r) for r in land.values()), default=0) * (cell + gap) + 10
    for i, (vendor, rels) in enumerate(land.items()):
        cells = [{"x": label_w + j * (cell + gap), "colour": VERDICT_COLOURS[v.verdict],
                  "title": f"{v.target} (PyTorch {v.torch}): {v.summary}" + (" [pre-release]" if v.prerelease else ""),
                  "selected": v.selected, "key": v.target, "verdict": v.verdict, "prerelease": v.prerelease}
                 for j, v in enumerate(rels)]
        rows.append({"vendor": vendor, "y": 4 + i * (cell + gap + 3), "cells": cells})
    return {"rows": rows, "cell": cell, "width": width, "height": 8 + len(rows) * (cell + gap + 3)}


def html_text(a: Audit, *, title: str | None = None, lint: Any = None) -> str:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(data_dir("reports"))),
                             autoescape=jinja2.select_autoescape(["html", "j2"], default=True),
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    m = a.trace.meta
    src = source_name(a.trace)
    counts = {p: len({g.op for g in a.groups if g.phase == p and g.kind not in ("choice", "api")}) for p in m.phases}
    return env.get_template(TEMPLATE).render(
        title=title or f"opaudit: {src}",
        source=src,
        meta=m,
        phase_counts=counts,
        distinct_ops=len({g.op for g in a.groups if g.kind not in ("choice", "api")}),
        verdicts=a.selected_verdicts,
        verdict_names=VERDICTS,
        verdict_colours=VERDICT_COLOURS,
        status_colours=STATUS_COLOURS,
        heat=heatmap(a),
        oldest=a.oldest_running(),
        skew_span=skew_span,
        landscape=a.landscape(),
        released=len(a.verdicts),
        data_json=script_json(payload(a)),
        version=__version__,
        lint=lint,
        fallback=a.fallback,
        path_text=PATH_TEXT,
        host=sorted(a.host, key=lambda g: -g.calls),
        host_text=host_summary(a) or "",
    )
