"""Public training programs through ``opaudit fix --target T --unsafe-fixes --verify``: does each port run on the
target's device with no CUDA left, and train as the original does on the CPU?

    python bench/rehearsal_corpus/corpus.py --mirrors /work/.mirror --out /tmp/ext/rehearsal   # once
    python bench/verify_corpus.py --corpus /tmp/ext/rehearsal [--targets ascend musa] [--only ID ...] [--jobs 2]
                                  [--out bench/results/verify_corpus.json]

    # the held-out set (bench/heldout_verify/programs.toml; README there): its own manifest and recipes
    python bench/rehearsal_corpus/corpus.py --manifest bench/heldout_verify/programs.toml --mirrors M --out /tmp/ext/ho
    python bench/verify_corpus.py --manifest bench/heldout_verify/programs.toml --corpus /tmp/ext/ho [--split heldout]

The programs are a manifest's (default the rehearsal corpus's, bench/rehearsal_corpus/corpus.toml: project,
commit, files, arguments, a data recipe), extracted beforehand; nothing is fetched here, and none of them is in
this repository. Each program and target gets a fresh copy of its folder with the recipe's synthetic data, and
runs ``opaudit fix --target T --unsafe-fixes --verify PROJECT -- SCRIPT ARGS PORT_ARGS`` in it (the whole
extracted project is ported: a package the driver imports, such as minGPT's, is the program too). A program
whose ``requires`` cannot be imported here is listed as skipped. A manifest may name a module of more data
recipes (``recipes``), the results' name (``results``) and split its programs (``split = "dev"`` or
``"heldout"``; ``--split`` runs one part). Writes JSON and a Markdown table beside it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("rehearsal_corpus_bench", ROOT / "bench" / "rehearsal_corpus.py")
assert _spec is not None and _spec.loader is not None
corpus_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus_bench)


def _device(target: str) -> str:
    sys.path.insert(0, str(ROOT))
    from opaudit.lint import load_target

    return load_target(target).device


def verify_one(corpus: Path, prog: dict[str, Any], target: str, tmp: Path, timeout: float) -> dict[str, Any]:
    where = tmp / f"{prog['id']}-{target}"
    cwd = corpus_bench._prepare(corpus, prog, where)
    device = _device(target)
    # the arguments that name the device (nanoGPT's --device=npu, its --backend=hccl) name this target's
    port_args = [a.replace("npu", device).replace("hccl", "mccl" if target == "musa" else "hccl")
                 for a in prog.get("port_args", prog.get("device_args", []))]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200", "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    env.update({k: str(v) for k, v in prog.get("env", {}).items()})
    if env.get("MASTER_PORT") == "free":
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            env["MASTER_PORT"] = str(sock.getsockname()[1])
    if prog.get("pythonpath"):
        env["PYTHONPATH"] = os.pathsep.join(str(where / p) for p in prog["pythonpath"])
    script = os.path.relpath(where / prog["script"], cwd)
    cmd = [sys.executable, "-m", "opaudit", "fix", "--target", target, "--unsafe-fixes", "--verify",
           "--timeout", str(int(timeout)), str(where), "--", script, *prog.get("args", []), *port_args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=3 * timeout)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        rc, out = 124, ""
    seconds = round(time.perf_counter() - t0, 1)
    lines = [ln.replace(str(where) + "/", "") for ln in out.splitlines()]
    start = next((i for i, ln in enumerate(lines) if ln.startswith("verify ")), len(lines))
    report = [ln for ln in lines[start:] if not re.match(r"^\d+ files? changed", ln)]
    verdict = next((ln for ln in reversed(report) if ln.startswith("verify:")), "verify: no report")
    losses = next((ln.strip() for ln in report if re.match(r"\s*(losses|no loss|the losses)", ln)), None)
    left = [ln.strip() for ln in report if re.search(r"\S+\.py:\d+", ln) and not ln.startswith("verify ")]
    return {"id": prog["id"], "project": prog["project"], "script": prog["script"], "target": target, "rc": rc,
            "passed": rc == 0, "seconds": seconds, "split": prog.get("split"), "category": prog.get("category"),
            "style": prog.get("style"), "verdict": verdict, "losses": losses, "left": left[:20],
            "report": report[:40]}


def _short_losses(r: dict[str, Any]) -> str:
    losses = r.get("losses") or next((ln.strip() for ln in r["report"] if "losses" in ln), "")
    return "losses =" if losses.startswith("losses equal") else "losses differ" if "differ" in losses \
        else "no loss to compare"


def markdown(results: dict[str, Any]) -> str:
    rows = results["runs"]
    targets = results["targets"]
    manifest = results.get("manifest", "bench/rehearsal_corpus/corpus.toml")
    out = [f"# {results.get('title', 'fix --verify on public training programs')}", "",
           f"opaudit {results['opaudit']}, torch {results['torch']}, Python {results['python']}; "
           f"{len({r['id'] for r in rows})} programs of {len({r['project'] for r in rows})} projects "
           f"({manifest}, at the commits recorded there); "
           "`opaudit fix --target T --unsafe-fixes --verify PROJECT -- SCRIPT ARGS` on a fresh copy of each.", ""]
    if results.get("note"):
        out += [results["note"], ""]
    splits = [s for s in ("dev", "heldout") if any(r.get("split") == s for r in rows)] or [None]
    for split in splits:
        for t in targets:
            mine = [r for r in rows if r["target"] == t and r.get("split") == split]
            same = sum(r["passed"] and _short_losses(r) == "losses =" for r in mine)
            out.append(f"- {split + ': ' if split else ''}{t}: {sum(r['passed'] for r in mine)}/{len(mine)} pass "
                       "(exit 0: the port ran to its end on the device, no CUDA use left on the path that ran, "
                       f"trained where the original trains); {same} of them with losses equal to the CPU run's")
    if results.get("skipped"):
        out.append("- skipped (a package they need does not import here): " + ", ".join(results["skipped"]))
    tagged = any(r.get("split") for r in rows)
    out += ["", "| program |" + (" split, category, style |" if tagged else "") + " " + " | ".join(targets) + " |",
            "| --- |" + (" --- |" if tagged else "") + " " + " | ".join("---" for _ in targets) + " |"]
    for pid in dict.fromkeys(r["id"] for r in rows):
        cells = []
        for t in targets:
            r = next((x for x in rows if x["id"] == pid and x["target"] == t), None)
            if r is None:
                cells.append("")
                continue
            cells.append(("pass" if r["passed"] else "FAIL: " + r["verdict"].removeprefix("verify: "))
                         + f", {_short_losses(r)}")
        prog = next(x for x in rows if x["id"] == pid)
        tag = f" {prog['split']}, {prog['category']}, {prog['style']} |" if prog.get("split") else ""
        out.append(f"| {pid} ({prog['project']} {prog['script']}) |{tag} " + " | ".join(cells) + " |")
    out += ["", "## What each failing run names", ""]
    for r in rows:
        if not r["passed"]:
            out.append(f"- {r['id']} on {r['target']}:")
            out += [f"  - {ln.strip()}" for ln in r["report"][1:] if ln.strip() and not ln.startswith("verify:")][:12]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--manifest", type=Path, default=corpus_bench.manifest_mod.MANIFEST)
    ap.add_argument("--split", choices=["dev", "heldout"], help="only the programs of this part of the manifest")
    ap.add_argument("--targets", nargs="+", default=["ascend", "musa"])
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    manifest = corpus_bench.manifest_mod.load_manifest(args.manifest)
    if manifest.get("recipes"):  # the manifest's own data recipes, beside the rehearsal corpus's
        spec = importlib.util.spec_from_file_location("manifest_recipes", args.manifest.parent / manifest["recipes"])
        assert spec is not None and spec.loader is not None
        recipes = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(recipes)
        recipes.register(corpus_bench.RECIPES)
    out_path = args.out or ROOT / "bench" / "results" / f"{manifest.get('results', 'verify_corpus')}.json"
    programs = manifest["program"]
    if args.split:
        programs = [p for p in programs if p.get("split") == args.split]
    if args.only:
        programs = [p for p in programs if p["id"] in args.only]
    skipped = [p["id"] for p in programs if any(importlib.util.find_spec(r) is None for r in p.get("requires", []))]
    programs = [p for p in programs if p["id"] not in skipped]
    jobs = [(p, t) for p in programs for t in args.targets]
    tmp = Path(tempfile.mkdtemp(prefix="vc-"))
    try:
        with ThreadPoolExecutor(args.jobs) as pool:
            runs = list(pool.map(lambda pt: verify_one(args.corpus, pt[0], pt[1], tmp, args.timeout), jobs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    import torch

    import opaudit

    # the checkout that ran, and whether opaudit's own files differed from that commit
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "opaudit", "rules", "coverage_db"],
                           capture_output=True, text=True).stdout.split("\n")
    results = {"opaudit": opaudit.__version__, "commit": head, "opaudit_changed": [ln[3:] for ln in dirty if ln],
               "torch": torch.__version__, "python": platform.python_version(),
               "manifest": os.path.relpath(args.manifest.resolve(), ROOT), "targets": args.targets,
               "skipped": skipped, "runs": runs}
    if manifest.get("title"):
        results["title"] = manifest["title"]
    if manifest.get("results_note"):
        results["note"] = manifest["results_note"]
    if (args.split or args.only) and out_path.is_file():  # a part rerun: the other programs' runs are kept
        ran = {(r["id"], r["target"]) for r in runs}
        runs[:0] = [r for r in json.loads(out_path.read_text())["runs"] if (r["id"], r["target"]) not in ran]
    order = {p["id"]: i for i, p in enumerate(manifest["program"])}
    runs.sort(key=lambda r: (order.get(r["id"], len(order)), args.targets.index(r["target"])
                             if r["target"] in args.targets else 0))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(results, indent=1) + "\n")
    out_path.with_suffix(".md").write_text(markdown(results))
    for t in args.targets:
        mine = [r for r in runs if r["target"] == t]
        print(f"{t}: {sum(r['passed'] for r in mine)}/{len(mine)} pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
