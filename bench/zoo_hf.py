"""The transformers atlas: every model type transformers builds from its default configuration with a task
head (`opaudit zoo --all hf`), train step, against the newest release of every vendor.

    python bench/zoo_hf.py [--jobs 2] [--timeout 300] [--limit N] [--mode auto] [--shrink | --layers N] [--cache DIR]

--shrink cuts each configuration until the model runs for real (opaudit zoo --shrink: layers, widths, heads,
experts, vocabulary; opaudit/zoo/shrink.py); the published atlas is made with --shrink. --layers N only cuts the
layers (opaudit.zoo.specs.with_layers: at most N layers, one of each kind a hybrid has).

Writes reports/examples/zoo-hf.html and zoo-hf.csv (the published atlas) and bench/results/zoo_hf.json:
how many model types were traced, the failures by reason, the wall time with --jobs, and the wall time
of a rerun from the cache (a fresh cache folder is made for the first run, so it is cold).
Goals: >= 95 % of model types traced for real on the CUDA path (not on meta), <= 15 minutes on 2 cores, a
cached rerun <= 1 minute. Run it with opaudit's ``hf`` extra installed (``pip install -e '.[hf]'``: scipy, which
some model types' own code imports; without it Inkling's cut does not build).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"real_share": 0.95, "wall_s": 900.0, "cached_rerun_s": 60.0}


def main() -> None:
    import torch
    import transformers

    from opaudit.zoo import report
    from opaudit.zoo.run import run_zoo
    from opaudit.zoo.specs import all_specs, with_layers

    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--mode", default="auto")
    ap.add_argument("--limit", type=int, default=None, help="only the first N model types (a quick look)")
    ap.add_argument("--layers", type=int, default=None, help="override the layer counts the configuration has "
                    "(num_hidden_layers, encoder_layers, ...) to at most N: a faster atlas of the same op kinds")
    ap.add_argument("--shrink", action="store_true", help="opaudit zoo --shrink: each configuration cut until the "
                    "model runs for real (the published atlas)")
    ap.add_argument("--cache", type=Path, default=None, help="a cache folder to keep (default: a fresh one, removed)")
    ap.add_argument("--conditions", default=None, help="what the machine shared with the run, recorded as said")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "examples")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results" / "zoo_hf.json")
    args = ap.parse_args()

    specs = all_specs("hf")[: args.limit]
    if args.layers is not None:
        specs = [with_layers(s, args.layers) for s in specs]
    commit = measured_commit()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="opaudit-zoo-bench-"))
    load_before = os.getloadavg()
    done = Counter()

    def progress(record: dict) -> None:
        done[record["status"]] += 1
        n = sum(done.values())
        if n % 10 == 0 or n == len(specs):
            print(f"{n}/{len(specs)} ({done['ok']} traced) {time.strftime('%H:%M:%S')}", flush=True)

    try:
        t = time.perf_counter()
        first = run_zoo(specs, train=True, mode=args.mode, jobs=args.jobs, timeout=args.timeout, cache=cache,
                        on_result=progress, shrink=args.shrink)
        wall = time.perf_counter() - t
        load_after = os.getloadavg()
        t = time.perf_counter()
        missed: list[str] = []  # a rerun from the cache traces only what the cache has no record of: which
        again = run_zoo(specs, train=True, mode=args.mode, jobs=args.jobs, timeout=args.timeout, cache=cache,
                        shrink=args.shrink, on_begin=missed.append)
        rerun = time.perf_counter() - t
    finally:
        if args.cache is None:
            shutil.rmtree(cache, ignore_errors=True)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "zoo-hf.csv").write_text(report.csv_text(first), encoding="utf-8")
    (args.out / "zoo-hf.html").write_text(report.html_text(first, title="opaudit zoo: every transformers model "
                                                           "type, train step, newest release of every vendor"),
                                          encoding="utf-8")
    ok = [r for r in first.records if r["status"] == "ok"]
    real = [r for r in ok if r["mode"] == "real"]
    reasons = Counter(r["reason"] for r in first.failed)
    verdicts = {t: dict(Counter(x["verdict"] for r in ok for x in r["targets"] if x["target"] == t))
                for t in first.targets}
    result = {
        "what": "opaudit zoo --all hf --train: every transformers model type with a task head, default "
                "configuration, against the newest release of every vendor",
        "machine": {"cpus": os.cpu_count(), "load_before": [round(x, 1) for x in load_before],
                    "load_after": [round(x, 1) for x in load_after], "python": platform.python_version()},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "commit": commit,
        "options": {"jobs": args.jobs, "timeout_s": args.timeout, "mode": args.mode, "limit": args.limit,
                    "layers": args.layers, "shrink": args.shrink},
        "model_types": len(specs),
        "traced": len(ok),
        "traced_share": round(len(ok) / max(1, len(specs)), 3),
        "traced_real": len(real),
        "real_share": round(len(real) / max(1, len(specs)), 3),
        "modes": dict(Counter(r["mode"] for r in ok)),
        "cuts": dict(Counter((r.get("cut") or {}).get("level") for r in ok)),
        "failed_by_reason": dict(reasons.most_common()),
        "wall_s": round(wall, 1),
        "cached_rerun_s": round(rerun, 2),
        "cached_rerun_hits": again.cached,
        "cached_rerun_traced": {r["spec"]: {"status": r["status"], "reason": r.get("reason"),
                                            "duration_s": r.get("duration_s")}
                                for r in again.records if r["spec"] in missed},
        "first_run_cached": first.cached,  # > 0: the first run resumed a kept cache, its wall time is not cold
        "verdicts_by_target": verdicts,
        "failures": {r["spec"]: r["error"] for r in first.failed},
        "goals": GOALS,
        "on_meta": {r["spec"]: r.get("mode_reason") for r in ok if r["mode"] != "real"},
        "met": {"real_share": len(real) / max(1, len(specs)) >= GOALS["real_share"],
                "wall_s": wall <= GOALS["wall_s"], "cached_rerun_s": rerun <= GOALS["cached_rerun_s"]},
    }
    if args.conditions:
        result["conditions"] = args.conditions
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k not in ("failures", "verdicts_by_target")}, indent=1))


def measured_commit() -> str | None:
    """The commit measured (None outside a git checkout), with ``+`` where opaudit's own files (its code and its
    data) differ from it: the results and reports a bench writes are not what it measures."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "opaudit", "rules", "coverage_db"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+" if dirty else "")


if __name__ == "__main__":
    main()
