"""The tail of the transformers atlas: the model types that bench/results/zoo_hf.json did not trace for real (its
failures and the models it traced on meta only), rerun alone with `opaudit zoo --shrink`, train step.

    python bench/zoo_hf_tail.py [--jobs 1] [--timeout 300] [--zoo-json DIR/zoo.json]

Writes bench/results/zoo_hf_tail.json: each spec's status and mode before (zoo_hf.json) and after (this run), its
cut and the reason of a failure, the versions and the commit. The other model types are not rerun: the share of all
model types traced for real that it states counts them as zoo_hf.json measured them, and says so. --zoo-json takes
the zoo.json of a run made already (`opaudit zoo --from LIST --train --shrink --jobs 1 --no-cache --timeout 300`)
instead of running the zoo here (several: a later run's record of a spec replaces an earlier one's).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def main() -> None:
    import torch
    import transformers

    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--zoo-json", type=Path, nargs="+", default=None, help="the zoo.json of a run of the same specs, "
                    "made already; several: a spec's record from the last that has it (a rerun of some of them)")
    ap.add_argument("--results", type=Path, default=RESULTS / "zoo_hf_tail.json")
    args = ap.parse_args()

    full = json.loads((RESULTS / "zoo_hf.json").read_text(encoding="utf-8"))
    specs = sorted(set(full["failures"]) | set(full["on_meta"]))
    wall = None
    if args.zoo_json is not None:
        records = [r for path in args.zoo_json for r in json.loads(path.read_text(encoding="utf-8"))["models"]]
        options = {"jobs": args.jobs, "timeout_s": args.timeout, "runs": len(args.zoo_json)}  # as those runs used
    else:
        from opaudit.zoo.run import run_zoo

        t = time.perf_counter()
        records = run_zoo(specs, train=True, jobs=args.jobs, timeout=args.timeout, cache=None, shrink=True).records
        wall = round(time.perf_counter() - t, 1)
        options = {"jobs": args.jobs, "timeout_s": args.timeout}
    by_spec = {r["spec"]: r for r in records}
    missing = [s for s in specs if s not in by_spec]
    if missing:
        raise SystemExit(f"the run has no record of {', '.join(missing)}")

    def before(spec: str) -> dict:
        if spec in full["on_meta"]:
            return {"status": "ok", "mode": "meta", "why": full["on_meta"][spec]}
        return {"status": "failed", "mode": None, "why": full["failures"][spec][:300]}

    rows = []
    for spec in specs:
        r = by_spec[spec]
        cut = r.get("cut") or {}
        rows.append({"spec": spec, "before": before(spec),
                     "after": {"status": r["status"], "mode": r.get("mode"), "reason": r.get("reason"),
                               "cut": cut.get("level"), "config_fixes": sorted(r.get("config_fixes") or {}),
                               "why": (r.get("error") or r.get("mode_reason") or "")[:300],
                               "duration_s": r.get("duration_s")}})
    real = [x for x in rows if x["after"]["status"] == "ok" and x["after"]["mode"] == "real"]
    others = full["traced_real"]  # the model types zoo_hf.json traced for real, not rerun here
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip()
    result = {
        "what": "the model types bench/results/zoo_hf.json did not trace for real (failed or on meta only), rerun "
                "alone with opaudit zoo --shrink --train after the fixes of inputs, cuts and configurations",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "scipy": _version("scipy")},
        "commit": commit,
        "options": {**options, "shrink": True, "train": True},
        "wall_s": wall,
        "specs": len(specs),
        "traced_real": len(real),
        "after": dict(Counter(f"{x['after']['status']}/{x['after']['mode'] or x['after']['reason']}" for x in rows)),
        "cuts": dict(Counter(x["after"]["cut"] for x in real)),
        "failed_by_reason": dict(Counter(x["after"]["reason"] for x in rows if x["after"]["status"] != "ok")),
        "all_model_types": {
            "model_types": full["model_types"],
            "traced_real": others + len(real),
            "real_share": round((others + len(real)) / full["model_types"], 3),
            "note": f"the {others} model types zoo_hf.json traced for real are counted as it measured them (not "
                    f"rerun here), plus those of this rerun; a full rerun of the atlas (bench/zoo_hf.py) replaces it",
        },
        "goal_real_share": full["goals"]["real_share"],
        "models": rows,
    }
    args.results.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "models"}, indent=1))


def _version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
