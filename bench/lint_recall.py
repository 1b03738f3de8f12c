"""Recall of `opaudit lint` on hand-labelled lines of public files (bench/lint_recall_dev.toml): the share
of labelled lines with at least one finding, and the findings on lines nobody labelled.

    python bench/lint_recall.py --root /path/to/checkouts [--target ascend] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import tomllib

from opaudit.lint import Settings, lint_source

LABELS = Path(__file__).with_name("lint_recall_dev.toml")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True, help="folder holding one checkout per project (its `dir`)")
    ap.add_argument("--target", default="ascend")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    labels = tomllib.loads(LABELS.read_text())["file"]
    settings = Settings(target=args.target, select=("ALL",))
    total = found = extra = 0
    missed: list[str] = []
    for entry in labels:
        path = Path(args.root) / entry["dir"] / entry["path"]
        lines = {f.line for f in lint_source(path.read_bytes(), settings, str(path)).findings}
        want = set(entry["lines"])
        total += len(want)
        found += len(want & lines)
        extra += len(lines - want)
        missed += [f"{entry['dir']}/{entry['path']}:{n}" for n in sorted(want - lines)]
    result = {"labelled_lines": total, "found": found, "recall": round(found / total, 3),
              "lines_with_unlabelled_findings": extra, "missed": missed}
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
