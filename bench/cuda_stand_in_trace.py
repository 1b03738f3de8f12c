"""The trace on the C++ stand-in for CUDA (opaudit.standin, the command line's device for CUDA code) against the
trace on the rehearsal's simulated CUDA device (Python wrapper tensors, the device where the stand-in is not
loaded), and both against a real GPU's.

    python bench/cuda_stand_in_trace.py [--rounds 7] [--compare] [--out bench/results/cuda_stand_in_trace.json]

Timing: ResNet-50 (2x3x64x64), BERT-base and GPT-2 (batch 2, sequence 32) forward (eval, no_grad), as
tracer_overhead.py measures it: eager on CPU tensors; the model copied to the stand-in (``cuda``) and run
there without and with opaudit's recorder; and traced on the simulated CUDA device (the Simulator entered
each round outside the timed region, as tracer_overhead.py --device cuda has it). Interleaved per round, in
one process; the ratio per round over eager, median over rounds.

``--compare``: the records of ``opaudit trace`` on the scripts of tests/tracing/test_device.py, on the
simulated device (``OPAUDIT_CUDA_STAND_IN=0``) and on the stand-in (the default), counted per (op, kind, phase,
where, dtypes); the keys whose calls differ (tests/tracing/test_stand_in.py asserts there are none). With
``--gpu DIR``, both are also compared with the same scripts traced on a real GPU (``<script>.json`` in DIR,
each written there by ``python bench/cuda_stand_in_trace.py --real-cuda --trace-one OUT SCRIPT [ARGS]``:
trace_script on the machine's own CUDA device; bench/results/cuda_stand_in_gpu/ holds those of an H200 with
torch 2.11.0+cu130).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from opaudit import standin  # noqa: E402

SCRIPTS = [
    ("lm-bf16-fused", ROOT / "tests" / "fixtures" / "scripts" / "cuda_bf16_fused.py", []),
    ("train_cuda", ROOT / "examples" / "train_cuda.py",
     ["--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "4"]),
    ("ddp-one-rank", ROOT / "tests" / "fixtures" / "scripts" / "ddp_one_rank.py", []),
]
KEY = ("op", "kind", "phase", "where", "dtypes")


def trace_one(out: str, script: str, argv: list[str]) -> None:
    """On the machine's own GPU: opaudit's script trace with that device as the device."""
    import torch

    from opaudit.tracing.script import trace_script

    name = f"real cuda {torch.version.cuda}"

    class RealCuda:  # the GPU is the device: nothing to put in place (opaudit.tracing.device.TraceDevice)
        def __init__(self) -> None:
            self.name, self.target, self.engine = "cuda", "cuda", name

        @contextmanager
        def open(self):
            yield self

    trace_script(script, argv, device=RealCuda()).save(out)


def counts(path: Path) -> Counter:
    c: Counter = Counter()
    for r in json.loads(path.read_text())["records"]:
        c[tuple(str(r[k]) for k in KEY)] += r["calls"]
    return c


def differences(a: Counter, b: Counter, names: tuple[str, str]) -> list[dict]:
    return [{**dict(zip(KEY, k, strict=True)), f"{names[0]}_calls": a.get(k, 0), f"{names[1]}_calls": b.get(k, 0)}
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def compare(tmp: Path, gpu: Path | None) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows = []
    for name, script, argv in SCRIPTS:
        sim, native = tmp / f"{name}.sim.json", tmp / f"{name}.stand-in.json"
        for path, engine in ((sim, {"OPAUDIT_CUDA_STAND_IN": "0"}), (native, {})):
            subprocess.run([sys.executable, "-m", "opaudit", "trace", "-q", "--no-audit", "--json", str(path), "--",
                            str(script), *argv], check=True, env={**env, **engine}, cwd=tmp, capture_output=True)
        a, b = counts(sim), counts(native)
        row = {"script": name, "keys_simulated": len(a), "keys_stand_in": len(b),
               "simulated_vs_stand_in": differences(a, b, ("simulated", "stand_in"))}
        if gpu is not None and (gpu / f"{name}.json").exists():
            g = counts(gpu / f"{name}.json")
            row["keys_gpu"] = len(g)
            row["gpu_vs_simulated"] = differences(g, a, ("gpu", "simulated"))
            row["gpu_vs_stand_in"] = differences(g, b, ("gpu", "stand_in"))
        rows.append(row)
        print(json.dumps(row, indent=1), flush=True)
    return rows


def timing(rounds: int, threads: int) -> list[dict]:
    import torch
    from torch.utils import _pytree as pytree

    sys.path.insert(0, str(ROOT / "examples"))
    import hf_models
    import resnet

    from opaudit.rehearsal.simulator import Simulator
    from opaudit.standin import cuda_target
    from opaudit.tracing.recorder import Recording, recording
    from opaudit.tracing.run import _call

    standin.install()
    torch.set_num_threads(threads)
    target = cuda_target()

    def forward(model, inputs):
        def run():
            model.eval()
            with torch.no_grad():
                _call(model, inputs)
        return run

    def timed(fn, root=None, sim=False) -> float:
        if sim:
            with Simulator(target) as s, torch.device(s.name):
                return timed(fn, root)
        if root is None:
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t
        rec = Recording(root=root)
        t = time.perf_counter()
        with recording(rec):
            fn()
        return time.perf_counter() - t

    def moved(model, inputs, device):
        return copy.deepcopy(model).to(device), pytree.tree_map(
            lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, inputs)

    torch.manual_seed(0)
    workloads = [("resnet50", resnet.get_model(), resnet.get_inputs())]
    for hf in ("bert", "gpt2"):
        m, x = getattr(hf_models, hf)()
        workloads.append((hf, m, x))
    rows = []
    for name, model, inputs in workloads:
        cm, cx = moved(model, inputs, "cuda")
        with Simulator(target) as s:
            sm, sx = moved(model, inputs, torch.device(s.name))
        runs = {"eager": functools.partial(timed, forward(model, inputs)),
                "stand_in": functools.partial(timed, forward(cm, cx)),
                "stand_in_traced": functools.partial(timed, forward(cm, cx), cm),
                "simulated_traced": functools.partial(timed, forward(sm, sx), sm, sim=True)}
        for _ in range(2):
            for run in runs.values():
                run()
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(rounds):
            for k, run in runs.items():
                times[k].append(run())
        row: dict = {"model": name, "workload": "forward"}
        for k, ts in times.items():
            row[f"{k}_ms"] = round(statistics.median(ts) * 1e3, 2)
        for k in ("stand_in", "stand_in_traced", "simulated_traced"):
            row[f"{k}_ratio"] = round(statistics.median(
                b / a for a, b in zip(times["eager"], times[k], strict=True)), 3)
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7, help="0: no timing")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the timing")
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--gpu", type=Path, default=None, help="a folder of the scripts' traces on a real GPU")
    ap.add_argument("--real-cuda", action="store_true", help="with --trace-one: trace on this machine's GPU")
    ap.add_argument("--trace-one", nargs=argparse.REMAINDER)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cuda_stand_in_trace.json"))
    args = ap.parse_args()
    if args.trace_one:
        if not args.real_cuda:
            sys.exit("--trace-one traces on this machine's GPU: give --real-cuda")
        out, script, *argv = args.trace_one
        return trace_one(out, script, argv)
    if args.rounds and standin.prepare(note=print) is not None:
        sys.exit(f"the CUDA stand-in is not available: {standin.reason()}")
    load_before = os.getloadavg()[0]
    result: dict = {"benchmark": "cuda_stand_in_trace", "rounds": args.rounds}
    if args.rounds:
        result["timing"] = timing(args.rounds, args.threads)
    if args.compare:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            result["records"] = compare(Path(tmp), args.gpu)
    import torch

    result.update(torch=torch.__version__, python=platform.python_version(),
                  machine=f"{platform.machine()}, {torch.get_num_threads()} torch threads", cpus=os.cpu_count(),
                  load_average_1min=[round(load_before, 2), round(os.getloadavg()[0], 2)])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
