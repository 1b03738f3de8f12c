"""Writes docs/compat.md: per vendor release in coverage_db, the PyTorch it builds against and what opaudit does
under that PyTorch, from the data (coverage_db's releases; the PyTorch each of opaudit's features needs, in
opaudit/auditing.py and opaudit/torchcompat.py) and from the compatibility runs (tests/compat/check.py, one
results file per torch in bench/results/compat/, which .ci/run reruns for its torch versions; python-3.X-torch-Y.json
are runs under another Python than CI's, with the interpreter they ran on).

    python docs/gen_compat.py           # write the page
    python docs/gen_compat.py --check   # exit 1 when the page is not what the data and the results give
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "compat"
PAGE = ROOT / "docs" / "compat.md"
sys.path.insert(0, str(ROOT))

from opaudit.auditing import OLDEST_TORCH  # noqa: E402
from opaudit.matrix import load_database  # noqa: E402
from opaudit.matrix.torchops import version_key  # noqa: E402

LEVELS = {
    "all": "every command",
    "none": f"opaudit does not run (it needs torch >= {OLDEST_TORCH[0]}.{OLDEST_TORCH[1]}); the audit of a trace "
            "made under a newer torch still answers for the release",
}


def level(torch_version: str) -> str:
    have = version_key(torch_version)[:2]
    return "none" if have < OLDEST_TORCH else "all"


def runs() -> list[dict]:
    """The compatibility runs, oldest torch first: CI's Python (torch-*.json), then the other Pythons
    (python-*.json), oldest Python first."""
    out = [json.loads(p.read_text(encoding="utf-8")) for p in RESULTS.glob("torch-*.json")]
    others = [json.loads(p.read_text(encoding="utf-8")) for p in RESULTS.glob("python-*.json")]
    return sorted(out, key=lambda r: version_key(r["torch"])) + \
        sorted(others, key=lambda r: (version_key(r["python"]), version_key(r["torch"])))


def other_pythons(checked: list[dict]) -> list[dict]:
    """The runs under another Python than CI's (those that say which interpreter they ran on)."""
    return [r for r in checked if r.get("interpreter")]


def render() -> str:
    db = load_database()
    checked = runs()
    # (a run of an older, smaller subset: said only while one is left)
    older = len({len(r["checks"]) for r in checked}) > 1
    by_line: dict[tuple[int, ...], list[dict]] = defaultdict(list)
    for r in checked:
        if not r.get("interpreter"):  # (CI's Python: the other Pythons are in their own table)
            by_line[version_key(r["torch"])[:2]].append(r)
    lines = [
        "# Which PyTorch",
        "",
        "<!-- written by docs/gen_compat.py from coverage_db and bench/results/compat/: do not edit -->",
        "",
        "opaudit runs under the PyTorch a team already has, and the vendors' plugins pin their own: what each "
        "command needs, and what was checked. `tests/compat/check.py VENV` runs the commands a user runs (lint, "
        "matrix, doctor, scan and trace on the CPU path, report, the CUDA path of scan, `run --simulate` of a "
        "CUDA training script and of DDP, `fix --verify` of its port to Ascend, `scan` of a small transformers "
        "model and `zoo` of two, `run --fallback` of a CNN's train step on the C++ test backend, and the audit "
        "against the strict rehearsal of a script on two targets) under a venv's torch and compares each exit code "
        "with what is promised below; `.ci/run` runs it under PyPI's torch 2.1.2 and 2.5.1 (with `numpy<2` and "
        "`pandas<3` for 2.1, built against NumPy 1, and transformers 4.55.4, the newest release that supports torch "
        "2.1)." + (" Runs of an older set of checks list fewer." if older else "") + " Below torch 2.4 the "
        "simulated devices use what that torch has, as the vendors' plugins for it did (opaudit/torchcompat.py).",
        "",
        "| torch | what opaudit does there |",
        "|---|---|",
        f"| < {OLDEST_TORCH[0]}.{OLDEST_TORCH[1]} | {LEVELS['none']} |",
        f"| >= {OLDEST_TORCH[0]}.{OLDEST_TORCH[1]} | {LEVELS['all']} |",
        "",
        "## The runs",
        "",
        "| torch | Python | checks as promised | the checks, with their time |",
        "|---|---|---|---|",
    ]
    for r in checked:
        if r.get("interpreter"):
            continue
        ok = sum(c["ok"] for c in r["checks"])
        detail = "; ".join(f"{c['check']} {'ok' if c['ok'] else 'FAILED'} ({c['seconds']} s)" for c in r["checks"])
        lines.append(f"| {r['torch']} | {r['python']} | {ok}/{len(r['checks'])} | {detail} |")
    others = other_pythons(checked)
    ci = sorted({".".join(r["python"].split(".")[:2]) for r in checked if not r.get("interpreter")})
    lines += [
        "",
        f"Python: CI runs {', '.join(ci)}; 3.10 to 3.13 are declared (the C++ recorder reads 3.11's frames "
        "directly and the public frame API elsewhere)."
        + (" The other Pythons were run by hand, each with a torch that PyPI has for it:" if others else
           " The other Pythons are not yet run."),
        "",
    ]
    if others:
        lines += ["| Python | torch | interpreter | checks as promised | the checks, with their time |",
                  "|---|---|---|---|---|"]
        for r in others:
            ok = sum(c["ok"] for c in r["checks"])
            detail = "; ".join(f"{c['check']} {'ok' if c['ok'] else 'FAILED'} ({c['seconds']} s)"
                               for c in r["checks"])
            lines.append(f"| {r['python']} | {r['torch']} | {r['interpreter']} | {ok}/{len(r['checks'])} | "
                         f"{detail} |")
        lines.append("")
    lines += [
        "## Per vendor release",
        "",
        "Each release of coverage_db, the torch it builds against, what opaudit does under that torch, and the "
        "run of the same torch line (major.minor) where there is one.",
        "",
    ]
    by_vendor: dict[str, list] = defaultdict(list)
    for e in db.entries:
        by_vendor[e.vendor].append(e)
    for vendor in sorted(by_vendor):
        lines += [f"### {vendor}", "", "| release | torch | opaudit there | checked |", "|---|---|---|---|"]
        for e in sorted(by_vendor[vendor], key=lambda e: e.order):
            torch_v = e.torch or "?"
            lv = level(torch_v) if e.torch else "none"
            seen = by_line.get(version_key(torch_v)[:2], []) if e.torch else []
            mark = ", ".join(f"torch {r['torch'].split('+')[0]}: {sum(c['ok'] for c in r['checks'])}/"
                             f"{len(r['checks'])} as promised" for r in seen) or "-"
            what = {"all": "every command", "no-sim": "no simulated device", "none": "does not run"}[lv]
            lines.append(f"| {e.key} | {torch_v} | {what} | {mark} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            print("docs/compat.md is stale: run python docs/gen_compat.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
