"""Public training programs rehearsed end to end: does each one train on every target as it does on the CPU?

    python bench/rehearsal_corpus/corpus.py --mirrors /work/.mirror --out /work/ext/rehearsal   # once
    python bench/rehearsal_corpus.py --corpus /work/ext/rehearsal [--only ID ...] [--jobs 2]
                                     [--out bench/results/rehearsal_corpus.json]

The programs (bench/rehearsal_corpus/corpus.toml: project, commit, files, arguments, a data recipe) are
extracted beforehand; nothing is fetched here. Every run gets a fresh copy of the program's folder in a
temporary folder, with the recipe's synthetic data written into it, and runs in a process of its own with
the training probe (bench/rehearsal_corpus/probe/sitecustomize.py: the loss of each backward, the trained
parameters before the first update and before the last one). Per program:

- ``cpu``: the CPU reference, ``python SCRIPT ARGS CPU_ARGS`` (where the program has a CPU path);
- ``sim:VENDOR``: the unported program under ``opaudit run --simulate VENDOR --stats`` (cuda mapped) for
  each vendor of the manifest, its newest release;
- ``port``: ``opaudit fix --target T --unsafe-fixes`` on the copy, then ``opaudit run --simulate T --strict
  --no-map-cuda --stats``;
- ``trace``: ``opaudit trace --json`` as it traces by default (on the C++ stand-in for CUDA, opaudit.standin).

A run trains when the probe saw at least two backward passes on the run's device and the parameters moved;
its losses match when every loss of the reference (the CPU run, or the trace where the program has no CPU
path) equals the run's within the manifest's relative tolerance, over the losses both have. The trace's
device ops are compared with each rehearsal's op statistics by opaudit.rehearsal.compare_device_ops (the
comparison the test suite makes). A failed run is given a reason from its message and from what the probe
saw (a checkpoint loaded or saved before the failure). Writes JSON and a Markdown table beside it; with
``--only`` the other programs' results already in the JSON are kept (a rerun of one program after a fix).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
HERE = ROOT / "bench" / "rehearsal_corpus"
PROBE = HERE / "probe"

import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location("rehearsal_corpus_manifest", HERE / "corpus.py")
assert _spec is not None and _spec.loader is not None
manifest_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(manifest_mod)

# -- data recipes: small synthetic data, written into the run's working folder -----------------------------


def _words(cwd: Path, spec: dict[str, Any]) -> None:
    """data/train.txt, valid.txt, test.txt: lines of 12 words from a 50-word vocabulary."""
    r = random.Random(0)
    vocab = [f"w{i}" for i in range(50)]
    n = int(spec.get("lines", 60))
    (cwd / "data").mkdir(parents=True, exist_ok=True)
    for name, k in (("train", n), ("valid", max(n // 6, 4)), ("test", max(n // 6, 4))):
        lines = (" ".join(r.choice(vocab) for _ in range(12)) for _ in range(k))
        (cwd / "data" / f"{name}.txt").write_text("\n".join(lines) + "\n")


def _chars(cwd: Path, spec: dict[str, Any]) -> None:
    """input.txt: random sentences of a small vocabulary (holding every character minGPT's prompt uses)."""
    r = random.Random(0)
    words = ["O", "God,", "the", "king", "and", "queen", "shall", "go!", "what", "is", "this", "night", "we", "be"]
    text, n = [], int(spec.get("chars", 3000))
    while sum(len(w) + 1 for w in text) < n:
        text.append(r.choice(words))
    (cwd / "input.txt").write_text("O God, O God!\n" + " ".join(text) + "\n")


def _names(cwd: Path, spec: dict[str, Any]) -> None:
    """names.txt: one made-up lower-case name a line."""
    r = random.Random(0)
    names = {"".join(r.choice("abcdefghijklmnoprstuvy") for _ in range(r.randint(3, 8)))
             for _ in range(int(spec.get("count", 300)))}
    (cwd / "names.txt").write_text("\n".join(sorted(names)) + "\n")


def _token_bins(cwd: Path, spec: dict[str, Any]) -> None:
    """data/<dataset>/train.bin, val.bin (uint16 tokens, as nanoGPT's prepare scripts write) and meta.pkl."""
    import pickle

    import numpy as np

    vocab = int(spec.get("vocab", 64))
    d = cwd / "data" / spec.get("dataset", "tiny")
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rng.integers(0, vocab, 4000, dtype=np.uint16).tofile(d / "train.bin")
    rng.integers(0, vocab, 1000, dtype=np.uint16).tofile(d / "val.bin")
    with open(d / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": vocab}, f)


def _mnist_idx(cwd: Path, spec: dict[str, Any]) -> None:
    """<root>/MNIST/raw/: the four uncompressed IDX files torchvision's MNIST dataset reads (random 28x28
    digits, labels 0-9), under the names it checks before downloading, so ``download=True`` finds them."""
    import numpy as np

    raw = cwd / spec.get("root", "data") / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", int(spec.get("train", 64))), ("t10k", int(spec.get("test", 32)))):
        header = np.array([0x803, n, 28, 28], dtype=">i4").tobytes()  # IDX: ubyte, 3 dimensions
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(header + rng.integers(0, 256, n * 784, np.uint8).tobytes())
        header = np.array([0x801, n], dtype=">i4").tobytes()  # ubyte, 1 dimension
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(header + rng.integers(0, 10, n, np.uint8).tobytes())


def _image_folder(cwd: Path, spec: dict[str, Any]) -> None:
    """<root>/train/<class>/*.png and <root>/val/<class>/*.png (random RGB images) for torchvision's
    ImageFolder."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    size, classes = int(spec.get("size", 32)), int(spec.get("classes", 2))
    for split, n in (("train", int(spec.get("train", 8))), ("val", int(spec.get("val", 4)))):
        for i in range(n):
            d = cwd / spec.get("root", "data") / split / f"c{i % classes}"
            d.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (size, size, 3), np.uint8)).save(d / f"{i}.png")


RECIPES: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    "words": _words, "chars": _chars, "names": _names, "token_bins": _token_bins, "mnist_idx": _mnist_idx,
    "image_folder": _image_folder}

# -- runs --------------------------------------------------------------------------------------------------

STAND_INS = ("torch_npu", "torch_musa", "torch_mlu", "intel_extension_for_pytorch")


def _prepare(corpus: Path, prog: dict[str, Any], where: Path) -> Path:
    """A fresh copy of the program's folder with its data; returns the working folder."""
    src = manifest_mod.project_dir(corpus, prog["project"]) / prog.get("folder", ".")
    if not src.is_dir():
        raise SystemExit(f"{src} is missing: extract the corpus first (bench/rehearsal_corpus/corpus.py)")
    shutil.copytree(src, where)
    cwd = where / prog.get("cwd", ".")
    cwd.mkdir(parents=True, exist_ok=True)
    data = prog.get("data")
    if data:
        RECIPES[data["recipe"]](cwd, data)
    return cwd


def _env(prog: dict[str, Any], copy: Path, probe_out: Path, deps: Path | None) -> dict[str, str]:
    extra = [str(PROBE), str(ROOT), *(str(copy / p) for p in prog.get("pythonpath", []))]
    if deps is not None and prog.get("requires"):
        extra.append(str(deps))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(extra + [os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "OPAUDIT_CORPUS_PROBE": str(probe_out), "OMP_NUM_THREADS": "1", "COLUMNS": "200",
           "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
    env.update({k: str(v) for k, v in prog.get("env", {}).items()})
    if env.get("MASTER_PORT") == "free":  # runs of one program go side by side: each rank 0 listens on its own
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            env["MASTER_PORT"] = str(sock.getsockname()[1])
    if "seed" in prog:
        env["OPAUDIT_CORPUS_SEED"] = str(prog["seed"])
    return env


def _reason(rc: int, stderr: str, probe: dict[str, Any] | None) -> str | None:
    """Why a run failed, in a few words (None when it did not)."""
    if rc == 0:
        return None
    text = stderr[-6000:]
    if rc in (-6, 134):
        last = [ln for ln in text.splitlines() if ln.strip()]
        return "abort (SIGABRT): " + (last[-1] if last else "no message")[:200]
    if rc in (-11, 139) or "Segmentation fault" in text:
        return "checkpoint: segmentation fault" if probe is None or probe.get("loads") else "segmentation fault"
    m = re.search(r"No module named '([\w.]+)'", text)
    if m and m.group(1).split(".")[0] in STAND_INS:
        return f"stand-in import: no module {m.group(1)}"
    if m:
        return f"import: no module {m.group(1)}"
    if "map_location" in text or "Expected a cuda device, but got" in text:
        return "checkpoint: map_location"
    if probe and probe.get("loads") and ("same device" in text or "got a CPU tensor" in text):
        return "checkpoint: torch.load returned CPU tensors"
    if "stopped on" in text and "--strict" in text:
        m = re.search(r"(aten::[\w.]+)", text)
        return f"strict: the target lacks {m.group(1) if m else 'an op'}"
    if rc == 124:
        return "timeout"
    lines = [ln for ln in text.splitlines() if ln.startswith("error:")]
    return (lines[-1] if lines else text.strip().splitlines()[-1] if text.strip() else f"exit {rc}")[:300]


def _run(kind: str, cmd: list[str], prog: dict[str, Any], corpus: Path, tmp: Path, timeout: float,
         deps: Path | None, port_target: str | None = None) -> dict[str, Any]:
    where = tmp / f"{prog['id']}-{kind.replace(':', '-')}"
    cwd = _prepare(corpus, prog, where)
    probe_out = tmp / f"{where.name}.probe.json"
    env = _env(prog, where, probe_out, deps)
    out: dict[str, Any] = {"kind": kind}
    if port_target is not None:  # port the copy first
        fixed = subprocess.run([sys.executable, "-m", "opaudit", "fix", "--target", port_target, "--unsafe-fixes",
                                str(where)], capture_output=True, text=True, env=env, cwd=where, timeout=timeout)
        summary = [ln for ln in (fixed.stdout + fixed.stderr).splitlines() if ln.strip()]
        out["fix"] = {"rc": fixed.returncode, "summary": "; ".join(summary[-3:])}
    script = str(where / prog["script"])
    full = [a.replace("{script}", script) for a in cmd]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(full, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
        rc, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as e:
        rc = 124
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
    out["seconds"] = round(time.perf_counter() - t0, 1)
    probe = json.loads(probe_out.read_text()) if probe_out.is_file() else None
    out.update(rc=rc, probe=probe, reason=_reason(rc, stderr, probe),
               stderr_tail="\n".join(stderr.strip().splitlines()[-6:]))
    _tidy(out)
    for name in ("stats.json", "trace.json"):
        f = cwd / f"opaudit-corpus-{name}"
        if f.is_file():
            out[name.split(".")[0]] = str(f)
    return out


_RUN_DIR = re.compile(r"/\S*?/rc-[\w.-]+/[\w.-]+-(?:cpu|sim-[\w@.+-]+|port|trace)/")


# the checkout that ran (opaudit's own files and the probe) and the interpreter's packages: where they lie
# on the machine that ran them says nothing about the run
_CHECKOUT = re.compile(r"/[^\s\"':]*/(?=(?:opaudit|bench)/)")  # greedy: a checkout may be named opaudit
_PACKAGES = re.compile(r"/[^\s\"':]*?/(?=site-packages/)")


def _tidy(run: dict[str, Any]) -> None:
    """Paths into a run's temporary copy, relative to the copy; paths into the checkout and the installed
    packages, relative to those; no source line quoted from a program."""
    for key in ("reason", "stderr_tail"):
        if run.get(key):
            run[key] = _PACKAGES.sub("", _CHECKOUT.sub("", _RUN_DIR.sub("", run[key])))
    if run.get("stderr_tail"):  # the source lines a warning or a traceback quotes: the programs' code stays out
        run["stderr_tail"] = "\n".join(ln for ln in run["stderr_tail"].splitlines()
                                       if not ln[:1].isspace() or ln.lstrip().startswith("File "))


def _trains(run: dict[str, Any]) -> bool:
    p = run.get("probe") or {}
    return bool(p.get("backwards", 0) >= 2 and p.get("changed_tensors") and (p.get("max_abs_change") or 0) > 0)


def _loss_diff(ref: dict[str, Any] | None, run: dict[str, Any]) -> float | None:
    """The largest relative difference between the losses of ``run`` and the reference, over those both have."""
    if not ref:
        return None
    a = (ref.get("probe") or {}).get("losses") or []
    b = (run.get("probe") or {}).get("losses") or []
    n = min(len(a), len(b))
    if n == 0:
        return None
    return max(abs(x - y) / max(abs(x), 1e-8) for x, y in zip(a[:n], b[:n], strict=True))


def rehearse(corpus: Path, prog: dict[str, Any], vendors: list[str], port_target: str, rtol: float,
             timeout: float, jobs: int, deps: Path | None = None) -> dict[str, Any]:
    import opaudit
    from opaudit.fallback import Stats
    from opaudit.rehearsal import compare_device_ops

    py = sys.executable
    args, dev = prog.get("args", []), prog.get("device_args", [])
    plan: list[tuple[str, list[str], str | None]] = []
    if "cpu_args" in prog:
        plan.append(("cpu", [py, "{script}", *args, *prog["cpu_args"]], None))
    for v in vendors:
        plan.append((f"sim:{v}", [py, "-m", "opaudit", "run", "--simulate", v, "-q", "--stats",
                                  "opaudit-corpus-stats.json", "--", "{script}", *args, *dev], None))
    plan.append(("port", [py, "-m", "opaudit", "run", "--simulate", port_target, "--strict", "--no-map-cuda", "-q",
                          "--stats", "opaudit-corpus-stats.json", "--", "{script}", *args,
                          *prog.get("port_args", dev)], port_target))
    plan.append(("trace", [py, "-m", "opaudit", "trace", "-q", "--no-audit", "--json", "opaudit-corpus-trace.json",
                           "--", "{script}", *args, *dev], None))
    with tempfile.TemporaryDirectory(prefix=f"rc-{prog['id']}-") as tmp:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            runs = list(pool.map(lambda p: _run(p[0], p[1], prog, corpus, Path(tmp), timeout, deps, p[2]), plan))
        by_kind = {r["kind"]: r for r in runs}
        trace = opaudit.load_trace(by_kind["trace"]["trace"]) if "trace" in by_kind["trace"] else None
        ref = by_kind.get("cpu") or by_kind["trace"]
        for r in runs:
            r["trains"] = _trains(r)
            r["loss_reference"] = ref["kind"] if r is not ref else None
            r["loss_rel_diff"] = _loss_diff(ref, r) if r is not ref else None
            r["loss_match"] = r["loss_rel_diff"] is not None and r["loss_rel_diff"] <= rtol
            if trace is not None and "stats" in r:
                r["device_ops"] = compare_device_ops(trace, Stats.load(r["stats"])).to_json()
        for r in runs:
            r.pop("stats", None)
            r.pop("trace", None)
            if r.get("probe"):
                losses = r["probe"]["losses"]
                r["probe"]["losses"] = {"count": len(losses), "first": losses[:3], "last": losses[-1:]}
    return {"id": prog["id"], "project": prog["project"], "script": prog["script"], "note": prog.get("note", ""),
            "runs": runs}


def _same_stop(r: dict[str, Any], trace: dict[str, Any] | None) -> bool:
    """Whether the run ended where the trace did (both completed, or both failed for the same kind of reason):
    only then are their device ops comparable."""
    if trace is None:
        return False
    def kind(x: dict[str, Any]) -> str:
        return (x.get("reason") or "").split(":")[0]
    return r["rc"] == trace["rc"] and kind(r) == kind(trace)


def _cell(r: dict[str, Any], trace: dict[str, Any] | None = None) -> str:
    ok = "ok" if r["rc"] == 0 else f"exit {r['rc']}"
    bits = [ok, "trains" if r["trains"] else "no training"]
    if r["loss_reference"]:
        d = r["loss_rel_diff"]
        bits.append("loss =" if r["loss_match"] else ("loss ?" if d is None else f"loss off {d:.1e}"))
    ops = r.get("device_ops")
    if ops is not None:
        bits.append("ops =" if ops["equal"] else "ops differ" if _same_stop(r, trace) else
                    "ops: stopped apart from the trace")
    if r.get("reason"):
        bits.append(r["reason"])
    return ", ".join(bits)


def _totals(results: dict[str, Any]) -> str:
    """One line of figures over every run."""
    runs = [r for p in results["programs"] for r in p["runs"]]
    compared = [r for r in runs if r["loss_reference"]]
    ops = [r for r in runs if r.get("device_ops") is not None]
    return (f"Runs that exit 0: {sum(r['rc'] == 0 for r in runs)}/{len(runs)}; that train: "
            f"{sum(r['trains'] for r in runs)}/{len(runs)}; losses matching the reference: "
            f"{sum(r['loss_match'] for r in compared)}/{len(compared)}; the trace's device ops equal the "
            f"rehearsal's: {sum(r['device_ops']['equal'] for r in ops)}/{len(ops)}.")


def markdown(results: dict[str, Any]) -> str:
    kinds = ["cpu", *(f"sim:{v}" for v in results["vendors"]), "port", "trace"]
    lines = [
        "# Rehearsal corpus", "",
        f"opaudit {results['opaudit_version']}, torch {results['torch']}, {results['python']}; "
        f"{len(results['programs'])} programs of {len({p['project'] for p in results['programs']})} projects; "
        f"loss tolerance {results['loss_rtol']} (relative)"
        + ("; packages beyond torch: " + ", ".join(f"{k} {v}" for k, v in results["deps"].items())
           if results.get("deps") else "") + ".", "",
        "Per run: exit status; trains (>= 2 backward passes on the run's device and the parameters moved); "
        "`loss =` the losses equal the reference's (the CPU run, or the trace where the program has no CPU path) "
        "within the tolerance; `ops =` the trace's device ops equal the rehearsal's "
        "(opaudit.rehearsal.compare_device_ops); then why it failed.", "",
        _totals(results), "",
        "| program | " + " | ".join(kinds) + " |",
        "| --- | " + " | ".join("---" for _ in kinds) + " |",
    ]
    for p in results["programs"]:
        by = {r["kind"]: r for r in p["runs"]}
        cells = [_cell(by[k], by.get("trace")) if k in by else "no CPU path" for k in kinds]
        lines.append(f"| {p['id']} ({p['project']} {p['script']}) | " + " | ".join(cells) + " |")
    lines += ["", "## Failures by reason", ""]
    reasons: dict[str, list[str]] = {}
    for p in results["programs"]:
        for r in p["runs"]:
            if r.get("reason"):
                key = r["reason"] if len(r["reason"]) < 90 else r["reason"][:90] + "..."
                reasons.setdefault(key, []).append(f"{p['id']} {r['kind']}")
    for reason, where in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- {reason} ({len(where)}): " + ", ".join(where))
    if not reasons:
        lines.append("None: every run exited 0.")
    lines += ["", "## Disagreements between trace and rehearsal", ""]
    n = len(lines)
    for p in results["programs"]:
        for r in p["runs"]:
            ops = r.get("device_ops")
            if ops and not ops["equal"] and _same_stop(r, next(x for x in p["runs"] if x["kind"] == "trace")):
                lines.append(f"- {p['id']} {r['kind']}: trace only {ops['trace_only']}, rehearsal only "
                             f"{ops['rehearsal_only']}, host ops on the device {ops['host_on_device']}")
    if len(lines) == n:
        lines.append("None where the run and the trace ended alike.")
    lines += ["", "## Ops the stand-in device receives as their parts", "",
              "Ops the target registers a kernel for that PyTorch implements as CompositeExplicitAutograd: a "
              "real device receives them whole, the rehearsal's stand-in their parts (not counted as a "
              "disagreement).", ""]
    for p in results["programs"]:
        seen = sorted({o for r in p["runs"] for o in (r.get("device_ops") or {}).get("stand_in_composite", [])})
        if seen:
            lines.append(f"- {p['id']}: {', '.join(seen)}")
    lines += ["", "## Ports", ""]
    for p in results["programs"]:
        port = next(r for r in p["runs"] if r["kind"] == "port")
        lines.append(f"- {p['id']}: fix: {port['fix']['summary']}")
    lines += ["", "## Notes", ""] + [f"- {p['id']}: {p['note']}" for p in results["programs"]]
    return "\n".join(lines) + "\n"


def _kept(out: Path, results: dict[str, Any], m: dict[str, Any]) -> list[dict[str, Any]]:
    """The programs of an earlier results file that a run of some programs (--only) keeps: those still in the
    manifest, when the file was made with the same vendors, port target and tolerance (its other programs'
    figures are then comparable); none otherwise."""
    if not out.is_file():
        return []
    try:
        old = json.loads(out.read_text())
    except json.JSONDecodeError:
        return []
    same = ("vendors", "port_target", "loss_rtol")
    if not isinstance(old, dict) or any(old.get(k) != results[k] for k in same):
        return []
    ids = {p["id"] for p in m["program"]}
    return [p for p in old.get("programs", []) if p.get("id") in ids]


def _merged(new: list[dict[str, Any]], kept: list[dict[str, Any]], order: list[str]) -> list[dict[str, Any]]:
    """The programs just run and the kept ones they do not replace, in the manifest's order."""
    done = {p["id"] for p in new}
    return sorted(new + [p for p in kept if p["id"] not in done], key=lambda p: order.index(p["id"]))


def _deps(folder: Path | None, programs: list[dict[str, Any]]) -> dict[str, str]:
    """The version of each package the programs require, as found in the --deps folder (or the interpreter's)."""
    from importlib.metadata import PackageNotFoundError, distribution, distributions

    found = {d.metadata["Name"].lower(): d.version for d in distributions(path=[str(folder)])} if folder else {}
    out: dict[str, str] = {}
    for name in sorted({r for p in programs for r in p.get("requires", [])}):
        try:
            out[name] = found.get(name.lower()) or distribution(name).version
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True, help="folder bench/rehearsal_corpus/corpus.py wrote")
    ap.add_argument("--manifest", type=Path, default=manifest_mod.MANIFEST)
    ap.add_argument("--only", action="append", default=[],
                    help="program id (repeatable); the other programs' results in --out are kept")
    ap.add_argument("--deps", type=Path, help="folder with the packages programs list as `requires` "
                    "(pip install --target DIR --no-deps ...), put on their PYTHONPATH")
    ap.add_argument("--jobs", type=int, default=2, help="runs of one program at a time")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "rehearsal_corpus.json")
    ap.add_argument("--render", action="store_true", help="only tidy the results of --out and write their table again")
    args = ap.parse_args(argv)
    if args.render:
        results = json.loads(args.out.read_text())
        for p in results["programs"]:
            for r in p["runs"]:
                _tidy(r)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(markdown(results))
        return 0
    import torch

    import opaudit

    m = manifest_mod.load_manifest(args.manifest)
    programs = [p for p in m["program"] if not args.only or p["id"] in args.only]
    if args.only and len(programs) != len(set(args.only)):
        raise SystemExit(f"unknown program id: {sorted(set(args.only) - {p['id'] for p in programs})}")
    commits = {p["name"]: p["commit"] for p in m["project"]}
    results: dict[str, Any] = {
        "opaudit_version": opaudit.__version__, "torch": torch.__version__,
        "python": platform.python_version(), "machine": platform.machine(), "vendors": m["vendors"],
        "port_target": m["port_target"], "loss_rtol": m["loss_rtol"], "programs": []}
    results["deps"] = _deps(args.deps, m["program"])
    kept = _kept(args.out, results, m) if args.only else []
    order = [p["id"] for p in m["program"]]
    ran: list[dict[str, Any]] = []
    for prog in programs:
        t0 = time.perf_counter()
        res = rehearse(args.corpus, prog, m["vendors"], m["port_target"], m["loss_rtol"], args.timeout, args.jobs,
                       args.deps)
        res["commit"] = commits[prog["project"]]
        ran.append(res)
        results["programs"] = _merged(ran, kept, order)
        print(f"{prog['id']} ({time.perf_counter() - t0:.0f} s)")
        for r in res["runs"]:
            print(f"  {r['kind']:<14} {_cell(r, res['runs'][-1])}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)  # after each program: a long run keeps what it has
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(markdown(results))
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
