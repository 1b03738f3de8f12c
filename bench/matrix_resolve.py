"""Loading release matrices, and resolving a Llama-7B-shaped train-step trace against all of them.

    python bench/matrix_resolve.py [--rounds 5] [--out bench/results/matrix_resolve.json]

Each round runs in a fresh process (nothing cached): it loads one release's matrix (the newest
Ascend, with its PyTorch op table), then every release of every vendor, and resolves every distinct
op of the trace against each. The baseline, measured in the same process, is reading the same files
without parsing them. Goals: one release <= 100 ms; the whole trace against every release <= 1 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"load_one_ms": 100.0, "resolve_all_s": 1.0}

CHILD = r"""
import json, sys, time
from pathlib import Path
import opaudit
from opaudit.matrix import load_database, load_matrix
trace = opaudit.load_trace(sys.argv[1])
ops = sorted({r.op for r in trace.records})
db = load_database()
t = time.perf_counter()
for e in db.entries:
    (db.root / e.file).read_bytes()
for p in (db.root / "pytorch").glob("*.tsv"):
    p.read_bytes()
read_s = time.perf_counter() - t
t = time.perf_counter()
one = load_matrix("ascend", db=db)
one.resolve(ops[0])
load_one = time.perf_counter() - t
t = time.perf_counter()
statuses = 0
for e in db.entries:
    m = load_matrix(e.key, db=db)
    for op in ops:
        m.resolve(op)
        statuses += 1
resolve_all = time.perf_counter() - t
print(json.dumps({"load_one_ms": load_one * 1e3, "resolve_all_s": resolve_all, "read_files_s": read_s,
                  "releases": len(db.entries), "ops": len(ops), "resolved": statuses}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "matrix_resolve.json"))
    args = ap.parse_args()
    trace_file = ROOT / "bench" / "results" / ".llama7b-train.json"
    subprocess.run([sys.executable, "-m", "opaudit", "scan", "examples/hf_models.py:llama_7b", "--train", "-q",
                    "--json", str(trace_file)], check=True, cwd=ROOT, capture_output=True)
    runs = []
    for _ in range(args.rounds):
        out = subprocess.run([sys.executable, "-c", CHILD, str(trace_file)], check=True, capture_output=True, text=True,
                             cwd=ROOT).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    trace_file.unlink()
    med = {k: statistics.median(r[k] for r in runs) for k in ("load_one_ms", "resolve_all_s", "read_files_s")}
    result = {
        "benchmark": "matrix_resolve",
        "rounds": args.rounds,
        "python": platform.python_version(),
        "releases": runs[0]["releases"],
        "distinct_ops": runs[0]["ops"],
        "resolved": runs[0]["resolved"],
        "load_one_ms": round(med["load_one_ms"], 1),
        "resolve_all_s": round(med["resolve_all_s"], 3),
        "read_files_s": round(med["read_files_s"], 4),
        "resolve_all_over_reading": round(med["resolve_all_s"] / med["read_files_s"], 1),
        "goals": GOALS,
    }
    result["ok"] = {k: result[k] <= v for k, v in GOALS.items()}
    print(json.dumps(result, indent=1))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
