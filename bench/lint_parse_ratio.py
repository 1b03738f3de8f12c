"""Lint time over LibCST's parse time, in one process on one core: what the linter adds to the parse.

The files: the first N (default 100) .py files of the installed transformers, in sorted order, that
mention ``cuda`` or ``nccl`` (every one of them is parsed: none is skipped by the pre-filter). Each
round parses every file with ``libcst.parse_module``, then lints every file with
``opaudit.lint.lint_source`` (target ascend, default rules; the parse included), and the best round of
each counts. Times are the process's CPU time (``time.process_time``), which a machine shared with
other jobs disturbs far less than wall time. With ``--against DIR`` (another checkout of opaudit) the
same measure runs, in a fresh process per round and checkout, alternately for this checkout and that
one, so that both see the same machine state; compare ratios measured in the same run.

    python bench/lint_parse_ratio.py --rounds 2 --against /path/to/other/checkout

Writes ``bench/results/lint_parse_ratio.json``'s ``latest`` entry (the earlier entries are kept).
Goal: lint <= 1.5x parse.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULT = HERE / "results" / "lint_parse_ratio.json"


def corpus(limit: int) -> list[Path]:
    import transformers

    root = Path(transformers.__file__).parent
    out = []
    for p in sorted(root.rglob("*.py")):
        text = p.read_bytes()
        if b"cuda" in text or b"nccl" in text:
            out.append(p)
            if len(out) == limit:
                break
    return out


def measure(limit: int) -> dict:
    """One round in this process: parse every file, then lint every file."""
    import libcst as cst

    from opaudit.lint import Settings, lint_source

    sources = [p.read_bytes() for p in corpus(limit)]
    settings = Settings(target="ascend")
    lint_source(sources[0], settings)  # imports, the catalogue and the target table, once
    t0 = time.process_time()
    for s in sources:
        cst.parse_module(s)
    parse_s = time.process_time() - t0
    t0 = time.process_time()
    findings = sum(len(lint_source(s, settings).findings) for s in sources)
    lint_s = time.process_time() - t0
    import opaudit

    return {"files": len(sources), "parse_s": parse_s, "lint_s": lint_s, "findings": findings,
            "opaudit": str(Path(opaudit.__file__).parent)}


def _round(checkout: Path, limit: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, __file__, "--one", str(limit)], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def _commit(checkout: Path) -> str:
    r = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


def _dump(value: object, indent: int = 0) -> str:
    """JSON with one line for each object or list that fits in 120 characters (as the file is kept)."""
    flat = json.dumps(value, ensure_ascii=False)
    if len(flat) + indent <= 120 or not isinstance(value, (dict, list)):
        return flat
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k)}: {_dump(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + _dump(v, indent + 1) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=100, help="how many files (default 100)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per checkout; the best counts (default 2)")
    ap.add_argument("--against", type=Path, help="another checkout of opaudit, measured alternately")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(measure(args.one)))
        return
    checkouts = [ROOT] + ([args.against.resolve()] if args.against else [])
    load_before = os.getloadavg()
    rounds: dict[str, list[dict]] = {str(c): [] for c in checkouts}
    for _ in range(args.rounds):
        for c in checkouts:
            rounds[str(c)].append(_round(c, args.limit))
    load_after = os.getloadavg()
    runs = []
    for c in checkouts:
        rs = rounds[str(c)]
        parse_s, lint_s = min(r["parse_s"] for r in rs), min(r["lint_s"] for r in rs)
        runs.append({"checkout": "this" if c == ROOT else str(c), "commit": _commit(c), "files": rs[0]["files"],
                     "findings": rs[0]["findings"], "parse_s": round(parse_s, 2), "lint_s": round(lint_s, 2),
                     "ratio": round(lint_s / parse_s, 3),
                     "rounds": [[round(r["parse_s"], 2), round(r["lint_s"], 2)] for r in rs]})
    latest = {"command": "python bench/lint_parse_ratio.py " + " ".join(sys.argv[1:]),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
              "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in load_after], "runs": runs}
    data = json.loads(RESULT.read_text()) if RESULT.exists() else {}
    data["latest"] = latest
    RESULT.write_text(_dump(data) + "\n")
    for r in runs:
        print(f"{r['checkout']} ({r['commit']}): {r['files']} files, {r['findings']} findings, parse {r['parse_s']} s, "
              f"lint {r['lint_s']} s, ratio {r['ratio']}")
    print(f"load average {latest['load_average_before']} -> {latest['load_average_after']} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
