"""Recall and precision of `opaudit lint` on the held-out set of real files (bench/heldout/).

    python bench/lint_heldout.py --corpus /work/ext/heldout [--target neutral] [--select CODES]
                                 [--out bench/results/lint_heldout.json] [--misses]

The corpus is re-created with bench/heldout/corpus.py; each file's sha256 must match labels.toml
(a file that differs or is missing is an error: the labels describe those exact bytes). The linter
runs through its library API with the settings `opaudit lint` uses by default (target `neutral`, the
default rule selection) unless told otherwise.

Per category of bench/heldout/GUIDE.md, overall and per project:
- recall: labelled lines on which at least one finding lies (the line is within the finding's first to
  last line: a finding on a call spread over lines counts for the line of its `"nccl"` argument), over
  labelled lines;
- unlabelled share: findings none of whose lines carries a label, over all findings;
- also how many hit lines were found by a rule of the category's own catalogue group (`same_group`),
  which is informative, not a goal.
Goals: recall >= 0.95, unlabelled share <= 0.05. --misses prints every missed labelled line and every
finding on an unlabelled line (with the source line), for whoever works on the linter's rules -
never to change a label.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "heldout"))

from corpus import LABELS, load_labels, local_path  # noqa: E402

from opaudit.lint import Finding, Settings, run  # noqa: E402

# The guide's categories and the catalogue group each one corresponds to.
CATEGORIES = {
    "device": ("OA0", "OA1"),
    "amp": ("OA2",),
    "distributed": ("OA3",),
    "runtime": ("OA4",),
    "env": ("OA5",),
    "backends": ("OA6",),
    "library": ("OA7",),
    "extension": ("OA8",),
}
GOAL_RECALL = 0.95
GOAL_UNLABELLED = 0.05


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


class Tally:
    """Counts for one slice (all files, or one project)."""

    def __init__(self) -> None:
        self.labelled: Counter[str] = Counter()
        self.hit: Counter[str] = Counter()
        self.same_group: Counter[str] = Counter()
        self.findings = 0
        self.unlabelled = 0
        self.unlabelled_codes: Counter[str] = Counter()

    def summary(self) -> dict[str, Any]:
        total_l, total_h = sum(self.labelled.values()), sum(self.hit.values())
        return {
            "labelled_lines": total_l,
            "hit_lines": total_h,
            "recall": _ratio(total_h, total_l),
            "findings": self.findings,
            "findings_on_unlabelled_lines": self.unlabelled,
            "unlabelled_share": _ratio(self.unlabelled, self.findings),
            "per_category": {
                cat: {"labelled": self.labelled[cat], "hit": self.hit[cat],
                      "recall": _ratio(self.hit[cat], self.labelled[cat]), "same_group": self.same_group[cat]}
                for cat in CATEGORIES if self.labelled[cat]
            },
            "unlabelled_by_code": dict(self.unlabelled_codes.most_common()),
        }


def score(corpus: Path, settings: Settings, jobs: int | None = None) -> tuple[dict[str, Any], list[str]]:
    """Lint the corpus and score it against the labels: the results and the detail lines for --misses."""
    entries = load_labels()
    paths, bad = [], []
    for e in entries:
        p = local_path(corpus, e)
        if not p.is_file():
            bad.append(f"missing: {p}")
        elif hashlib.sha256(p.read_bytes()).hexdigest() != e["sha256"]:
            bad.append(f"sha256 differs from labels.toml: {p}")
        paths.append(p)
    if bad:
        raise SystemExit("the corpus does not match the labels (re-create it with bench/heldout/corpus.py):\n  "
                         + "\n  ".join(bad))
    t0 = time.perf_counter()
    result = run(paths, settings, jobs=jobs)
    seconds = time.perf_counter() - t0
    if result.errors:
        raise SystemExit("the linter could not read or parse: " + "; ".join(result.errors))
    by_path: dict[str, list[Finding]] = defaultdict(list)
    for f in result.findings:
        by_path[str(Path(f.path).resolve())].append(f)

    overall, projects = Tally(), defaultdict(Tally)
    files_out, detail = [], []
    for e, p in zip(entries, paths, strict=True):
        labels = {int(x["line"]): x for x in e["lines"]}
        findings = by_path.get(str(p.resolve()), [])
        source = p.read_text(encoding="utf-8", errors="replace").splitlines()
        proj = projects[e["project"]]
        hits = 0
        for line, lab in labels.items():
            on = [f for f in findings if f.line <= line <= f.end_line]
            cat = lab["category"]
            for t in (overall, proj):
                t.labelled[cat] += 1
            if on:
                hits += 1
                same = any(f.code[:3] in CATEGORIES[cat] for f in on)
                for t in (overall, proj):
                    t.hit[cat] += 1
                    t.same_group[cat] += same
            else:
                detail.append(f"MISS {cat:11} {e['project']}/{e['path']}:{line}: {source[line - 1].strip()[:110]}")
        unl = 0
        for f in findings:
            for t in (overall, proj):
                t.findings += 1
            if not any(n in labels for n in range(f.line, f.end_line + 1)):
                unl += 1
                for t in (overall, proj):
                    t.unlabelled += 1
                    t.unlabelled_codes[f.code] += 1
                detail.append(f"UNLABELLED {f.code} {e['project']}/{e['path']}:{f.line}: "
                              f"{source[f.line - 1].strip()[:110]}")
        files_out.append({"project": e["project"], "path": e["path"], "labelled_lines": len(labels),
                          "hit_lines": hits, "findings": len(findings), "findings_on_unlabelled_lines": unl})

    summary = overall.summary()
    results = {
        "benchmark": "lint_heldout",
        "labels": str(LABELS.relative_to(ROOT)),
        "settings": {"target": settings.target, "select": list(settings.select), "ignore": list(settings.ignore),
                     "extend_select": list(settings.extend_select), "min_torch": settings.min_torch},
        "files": len(entries),
        "projects": len(projects),
        "lint_seconds": round(seconds, 2),
        "goals": {"recall": GOAL_RECALL, "unlabelled_share": GOAL_UNLABELLED},
        "met": {"recall": (summary["recall"] or 0) >= GOAL_RECALL,
                "unlabelled_share": (summary["unlabelled_share"] or 0) <= GOAL_UNLABELLED},
        "overall": summary,
        "per_project": {name: t.summary() for name, t in sorted(projects.items(), key=lambda kv: kv[0].lower())},
        "per_file": files_out,
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
    }
    return results, detail


def _print(results: dict[str, Any]) -> None:
    o = results["overall"]
    print(f"{results['files']} files, {results['projects']} projects, target {results['settings']['target']}")
    print(f"{'category':12} {'labelled':>8} {'hit':>5} {'recall':>7} {'same group':>10}")
    for cat, c in o["per_category"].items():
        print(f"{cat:12} {c['labelled']:8d} {c['hit']:5d} {c['recall']:7.1%} {c['same_group']:10d}")
    print(f"{'all':12} {o['labelled_lines']:8d} {o['hit_lines']:5d} {o['recall']:7.1%}")
    print(f"findings {o['findings']}, on unlabelled lines {o['findings_on_unlabelled_lines']} "
          f"({o['unlabelled_share']:.1%}); by code: {o['unlabelled_by_code']}")
    print(f"{'project':42} {'recall':>7} {'unlabelled':>10}")
    for name, p in results["per_project"].items():
        rec = "-" if p["recall"] is None else f"{p['recall']:.1%}"
        unl = "-" if p["unlabelled_share"] is None else f"{p['unlabelled_share']:.1%}"
        print(f"{name:42} {rec:>7} {unl:>10}  ({p['hit_lines']}/{p['labelled_lines']} lines, {p['findings']} findings)")
    print(f"goals: recall >= {GOAL_RECALL:.0%} {'met' if results['met']['recall'] else 'NOT met'}, "
          f"unlabelled <= {GOAL_UNLABELLED:.0%} {'met' if results['met']['unlabelled_share'] else 'NOT met'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True, help="the folder bench/heldout/corpus.py wrote")
    ap.add_argument("--target", default="neutral")
    ap.add_argument("--select", default="", help="comma-separated codes or prefixes (default: the default rules)")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "lint_heldout.json")
    ap.add_argument("--misses", action="store_true", help="print each missed labelled line and unlabelled finding")
    args = ap.parse_args(argv)
    select = tuple(s for s in args.select.split(",") if s)
    results, detail = score(args.corpus, Settings(target=args.target, select=select), jobs=args.jobs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    _print(results)
    if args.misses:
        print("\n".join(sorted(detail)))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
