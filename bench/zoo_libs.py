"""The diffusers and timm zoos, traced for real: every model class diffusers exports (`opaudit zoo --all diffusers
--shrink`) and every architecture timm registers (`--all timm --shrink`), train step, against the newest release
of every vendor.

    python bench/zoo_libs.py [--library diffusers|timm ...] [--jobs 2] [--timeout 300] [--limit N]
                             [--sample families:N]

``--sample families:N`` measures a deterministic sample instead of the whole library: the first N models
(alphabetically) of each family, a family being the module that registers the model (timm's model files,
diffusers' classes are each their own); the results name the sample's rule and every model in it, and count
only it.

Writes bench/results/zoo_<library>.json: how many models were traced, how many of them for real (not on meta),
the failures by reason with each model's error, the cut each model was traced with, the wall time with --jobs,
and the wall time of a rerun from the cache. Goals: >= 90 % of each library's models traced for real, those
that need torchvision named as such.
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
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"real_share": 0.90}


def version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def grouped(failed: list[dict]) -> list[dict]:
    groups: dict[tuple[str, str], list[str]] = {}
    for r in failed:
        key = (r["reason"], (r.get("error") or "")[:400].replace(r["spec"], "<model>"))
        groups.setdefault(key, []).append(r["spec"])
    return [{"reason": reason, "error": error, "models": models}
            for (reason, error), models in sorted(groups.items(), key=lambda kv: -len(kv[1]))]


def family_of(library: str, spec: str) -> str:
    """The module that registers a model: timm's model file (``timm.models.resnet``); a diffusers class is its own."""
    if library == "timm":
        from timm.models import _registry

        return _registry._model_to_module.get(spec.removeprefix("timm:"), "?")
    return spec


def sampled(library: str, specs: list[str], sample: str | None) -> list[str]:
    """``families:N``: the first N specs, alphabetically, of each family (:func:`family_of`), in that order."""
    if not sample:
        return specs
    rule, _, n = sample.partition(":")
    if rule != "families" or not n.isdigit() or int(n) < 1:
        raise SystemExit(f"--sample {sample}: expected families:N (N >= 1)")
    families: dict[str, list[str]] = {}
    for spec in sorted(specs):
        families.setdefault(family_of(library, spec), []).append(spec)
    return [s for family in sorted(families) for s in families[family][: int(n)]]


def run(library: str, args: argparse.Namespace) -> dict:
    import torch

    from opaudit.errors import InputError
    from opaudit.zoo.run import run_zoo
    from opaudit.zoo.shrink import cut_text
    from opaudit.zoo.specs import all_specs

    load_before = os.getloadavg()
    try:
        every = all_specs(library)
    except InputError as e:  # the library itself is missing: said, not run
        return {"library": library, "error": e.message, "hint": e.hint, "models": 0}
    try:
        specs = sampled(library, every, args.sample)[: args.limit]
    except ImportError as e:  # timm does not import here: its families are not known, the whole list is kept
        print(f"{library}: no sample ({e}); every model", flush=True)
        specs = every[: args.limit]
    cache = args.cache or Path(tempfile.mkdtemp(prefix=f"opaudit-zoo-{library}-"))
    done = Counter()

    def progress(record: dict) -> None:
        done[record["status"]] += 1
        n = sum(done.values())
        if n % 10 == 0 or n == len(specs):
            print(f"{library}: {n}/{len(specs)} ({done['ok']} traced) {time.strftime('%H:%M:%S')}", flush=True)

    try:
        t = time.perf_counter()
        first = run_zoo(specs, train=True, jobs=args.jobs, timeout=args.timeout, cache=cache, on_result=progress,
                        shrink=True)
        wall = time.perf_counter() - t
        load_after = os.getloadavg()
        t = time.perf_counter()
        again = None if args.no_rerun else run_zoo(specs, train=True, jobs=args.jobs, timeout=args.timeout,
                                                   cache=cache, shrink=True)
        rerun = time.perf_counter() - t
    finally:
        if args.cache is None:
            shutil.rmtree(cache, ignore_errors=True)
    ok = [r for r in first.records if r["status"] == "ok"]
    real = [r for r in ok if r["mode"] == "real"]
    return {
        "library": library,
        "what": f"opaudit zoo --all {library} --shrink --train, against the newest release of every vendor",
        "machine": {"cpus": os.cpu_count(), "load_before": [round(x, 1) for x in load_before],
                    "load_after": [round(x, 1) for x in load_after], "python": platform.python_version()},
        "versions": {"torch": torch.__version__, library: version(library), "torchvision": version("torchvision")},
        "options": {"jobs": args.jobs, "timeout_s": args.timeout, "limit": args.limit, "shrink": True,
                    "sample": args.sample},
        "library_models": len(every),
        # what was measured: the whole library, or the sample's rule and each model in it
        "sample": {"rule": f"the first {args.sample.partition(':')[2]} models, alphabetically, of each module that "
                           f"registers {library}'s models" if args.sample else "every model",
                   "families": len({family_of(library, s) for s in specs}) if args.sample else None,
                   "specs": specs if args.sample else None},
        "models": len(specs),
        "traced": len(ok),
        "traced_real": len(real),
        "real_share": round(len(real) / max(1, len(specs)), 3),
        "modes": dict(Counter(r["mode"] for r in ok)),
        "cuts": dict(Counter((r.get("cut") or {}).get("level") for r in ok)),
        "failed_by_reason": dict(Counter(r["reason"] for r in first.failed).most_common()),
        "wall_s": round(wall, 1),
        "cached_rerun_s": round(rerun, 1) if again is not None else None,
        "cached_rerun_hits": again.cached if again is not None else None,
        "first_run_cached": first.cached,  # > 0: the first run resumed a kept cache, its wall time is not cold
        "durations_s": {"sum": round(sum(r.get("duration_s") or 0 for r in first.records), 1),
                        "median": sorted(r.get("duration_s") or 0 for r in first.records)[len(first.records) // 2]},
        # each failure with its reason, models that failed alike together (all of timm where it does not import)
        "failures": grouped(first.failed),
        "on_meta": {r["spec"]: r.get("mode_reason") for r in ok if r["mode"] != "real"},
        # each model traced: the cut it was traced with (zoo.csv's `cut`) and the levels tried before it
        "cut_by_model": {r["spec"]: {"cut": cut_text(r), "mode": r["mode"], "duration_s": r.get("duration_s"),
                                     "tried": [t["level"] + ": " + t["reason"] for t in (r.get("cut") or {}).get(
                                         "tried") or []]} for r in ok},
        "goals": GOALS,
        "met": {"real_share": len(real) / max(1, len(specs)) >= GOALS["real_share"]},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--library", action="append", choices=["diffusers", "timm"], default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--limit", type=int, default=None, help="only the first N models of each library")
    ap.add_argument("--sample", default=None, help="families:N: the first N models of each family (module), "
                    "alphabetically, instead of every model")
    ap.add_argument("--no-rerun", action="store_true", help="no second run from the cache (a change of "
                    "coverage_db or opaudit during the first changes every cache key: the rerun is a cold run again)")
    ap.add_argument("--conditions", default=None, help="what the machine shared with the run, recorded as said")
    ap.add_argument("--cache", type=Path, default=None, help="a cache folder to keep (default: a fresh one, removed)")
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results",
                    help="the folder zoo_<library>.json is written to (made where missing)")
    args = ap.parse_args()
    from zoo_hf import measured_commit  # (bench/, the script's own folder, is first on sys.path)

    commit = measured_commit()
    for library in args.library or ["diffusers", "timm"]:
        result = run(library, args)
        result["commit"] = commit
        if args.conditions:
            result["conditions"] = args.conditions
        path = args.results / f"zoo_{library}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(json.dumps({k: v for k, v in result.items() if k not in ("failures", "on_meta")}, indent=1))


if __name__ == "__main__":
    main()
