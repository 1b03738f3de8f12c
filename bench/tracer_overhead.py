"""Tracer overhead against eager, on real CPU tensors, with module and line attribution on.

    python bench/tracer_overhead.py [--rounds 9] [--models resnet50,bert] [--out bench/results/tracer_overhead.json]
    python bench/tracer_overhead.py --device cuda [--rounds 5]   # -> bench/results/tracer_overhead_cuda.json

For ResNet-50 (2x3x64x64), BERT-base and GPT-2 (batch 2, sequence 32), built from configs with
random weights: a forward pass (eval, no_grad) and a train step (forward, loss, backward, AdamW
foreach step). Each round runs the workload eager, then traced (a fresh recording each time, its
set-up included) with opaudit's recorder (the C++ one, opaudit/tracing/native.py), then with the Python
recorder (a TorchDispatchMode, which records where the C++ one cannot build), so all see the same machine
state; a ratio is the median over rounds of traced / eager, which a machine whose speed drifts between rounds
does not skew. Goals: <= 1.3 forward, <= 1.5 train.

``--device cuda`` measures what ``opaudit scan`` and ``opaudit trace`` do by default: the traced run on
CUDA without a GPU (a copy of the model moved there), against eager on the CPU; and, to tell the costs
apart, the same workload on that device without the recorder (``simulated_ms``; ``traced_over_simulated``
is the recorder's own share). ``--engine`` picks the device: ``stand-in`` (the default, as the command line
has it: opaudit.standin's C++ CUDA, loaded before torch; -> tracer_overhead_cuda.json) or ``simulator`` (the
rehearsal's simulated device, the library API's in a process that imported torch first, entered each round
outside the timed region, as it is once per process; -> tracer_overhead_cuda_simulator.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if "cuda" in sys.argv and "simulator" not in sys.argv:  # before torch: the stand-in's hooks (opaudit.standin)
    from opaudit import standin

    if standin.prepare(note=print) is not None:
        sys.exit(f"the CUDA stand-in is not available: {standin.reason()}")

import torch  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))

import hf_models  # noqa: E402
import resnet  # noqa: E402

from opaudit.tracing.default_device import default_device  # noqa: E402
from opaudit.tracing.recorder import Recording, recording  # noqa: E402
from opaudit.tracing.run import _call, default_loss  # noqa: E402

GOALS = {"forward": 1.3, "train": 1.5}


def models(names: str = "resnet50,bert,gpt2"):
    wanted = names.split(",")
    torch.manual_seed(0)
    if "resnet50" in wanted:
        yield "resnet50", resnet.get_model(), resnet.get_inputs(), resnet.get_loss
    for name in ("bert", "gpt2"):
        if name in wanted:
            m, x = getattr(hf_models, name)()
            yield name, m, x, default_loss


def workloads(model, inputs, loss_fn):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)

    def forward():
        model.eval()
        with torch.no_grad():
            _call(model, inputs)

    def train():
        model.train()
        loss = loss_fn(_call(model, inputs), inputs)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return {"forward": forward, "train": train}


def on_device(model, inputs, device):
    """A copy of ``model`` and ``inputs`` on ``device`` (the simulated one)."""
    import copy

    from torch.utils import _pytree as pytree

    twin = copy.deepcopy(model).to(device)
    return twin, pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, inputs)


def timed(fn, traced: bool | str, root) -> float:
    """``traced``: False (eager), True (opaudit's recorder: the C++ one where it builds) or "python" (the Python
    recorder, a TorchDispatchMode)."""
    if traced:
        os.environ["OPAUDIT_TRACER"] = "python" if traced == "python" else ""
        rec = Recording(root=root)
        t = time.perf_counter()
        with recording(rec):
            fn()
        t = time.perf_counter() - t
        assert rec.engine == ("python" if traced == "python" else "native"), rec.engine_reason
        return t
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--engine", choices=("stand-in", "simulator"), default="stand-in",
                    help="with --device cuda: the device CUDA runs on (module doc)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--models", default="resnet50,bert,gpt2", help="comma-separated subset")
    args = ap.parse_args()
    if args.device == "cuda":
        return main_cuda(args)
    args.out = args.out or str(ROOT / "bench" / "results" / "tracer_overhead.json")
    torch.set_num_threads(torch.get_num_threads())
    results = []
    for name, model, inputs, loss_fn in models(args.models):
        work = workloads(model, inputs, loss_fn)
        for kind, fn in work.items():
            for _ in range(2):  # warm up: first calls allocate, initialise optimizer state, import
                timed(fn, False, model)
                timed(fn, True, model)
                timed(fn, "python", model)
            eager, traced, python = [], [], []
            for _ in range(args.rounds):
                eager.append(timed(fn, False, model))
                traced.append(timed(fn, True, model))
                python.append(timed(fn, "python", model))
            e, t = statistics.median(eager), statistics.median(traced)
            ratio = statistics.median(b / a for a, b in zip(eager, traced, strict=True))
            py_ratio = statistics.median(b / a for a, b in zip(eager, python, strict=True))
            row = {"model": name, "workload": kind, "eager_ms": round(e * 1e3, 2), "traced_ms": round(t * 1e3, 2),
                   "python_recorder_ms": round(statistics.median(python) * 1e3, 2), "ratio": round(ratio, 3),
                   "python_recorder_ratio": round(py_ratio, 3), "goal": GOALS[kind], "ok": ratio <= GOALS[kind]}
            results.append(row)
            print(f"{name:9s} {kind:8s} eager {row['eager_ms']:8.1f} ms  traced {row['traced_ms']:8.1f} ms  "
                  f"ratio {row['ratio']:.2f} (Python recorder {py_ratio:.2f}; goal <= {GOALS[kind]})", flush=True)
    out = {
        "benchmark": "tracer_overhead",
        "rounds": args.rounds,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


def main_cuda(args) -> None:
    from contextlib import nullcontext

    from opaudit.rehearsal.simulator import Simulator
    from opaudit.standin import cuda_target

    stand_in = args.engine == "stand-in"
    target = cuda_target()
    name_out = "tracer_overhead_cuda.json" if stand_in else "tracer_overhead_cuda_simulator.json"
    args.out = args.out or str(ROOT / "bench" / "results" / name_out)
    if stand_in:
        standin.install()

    def device():  # entered each round: the simulation (a no-op for the stand-in) and the default device
        return nullcontext("cuda") if stand_in else Simulator(target)

    results = []
    for name, model, inputs, loss_fn in models(args.models):
        with device() as sim:
            dev_model, dev_inputs = on_device(model, inputs, torch.device(sim if stand_in else sim.name))
            dev_work = workloads(dev_model, dev_inputs, loss_fn)
        work = workloads(model, inputs, loss_fn)
        for kind, fn in work.items():
            def simulated(traced: bool | str, fn=dev_work[kind], root=dev_model) -> float:
                # the device as the default device, as opaudit.trace has it (the loss makes its labels)
                with device() as sim, default_device(sim if stand_in else sim.name):
                    return timed(fn, traced, root)

            for _ in range(2):  # warm up: first calls allocate, initialise optimizer state, import
                timed(fn, False, model)
                simulated(False)
                simulated(True)
                simulated("python")
            eager, sim_only, traced, python = [], [], [], []
            for _ in range(args.rounds):
                eager.append(timed(fn, False, model))
                sim_only.append(simulated(False))
                traced.append(simulated(True))
                python.append(simulated("python"))
            e, s, t = statistics.median(eager), statistics.median(sim_only), statistics.median(traced)

            def over(times: list[float], base: list[float]) -> float:
                return statistics.median(b / a for a, b in zip(base, times, strict=True))

            ratio = over(traced, eager)
            row = {"model": name, "workload": kind, "eager_ms": round(e * 1e3, 2), "simulated_ms": round(s * 1e3, 2),
                   "traced_ms": round(t * 1e3, 2), "python_recorder_ms": round(statistics.median(python) * 1e3, 2),
                   "simulated_ratio": round(over(sim_only, eager), 3),
                   "traced_over_simulated": round(over(traced, sim_only), 3),
                   "python_recorder_ratio": round(over(python, eager), 3),
                   "ratio": round(ratio, 3), "goal": GOALS[kind], "ok": ratio <= GOALS[kind]}
            results.append(row)
            print(f"{name:9s} {kind:8s} eager {row['eager_ms']:8.1f} ms  device {row['simulated_ms']:8.1f} ms  "
                  f"traced {row['traced_ms']:8.1f} ms  ratio {ratio:.2f} (device alone {row['simulated_ratio']:.2f}, "
                  f"traced/device {row['traced_over_simulated']:.2f}, Python recorder "
                  f"{row['python_recorder_ratio']:.2f}; goal <= {GOALS[kind]})", flush=True)
    out = {
        "benchmark": "tracer_overhead_cuda",
        "device": f"{'the C++ stand-in for' if stand_in else 'simulated'} {target}",
        "engine": args.engine,
        "rounds": args.rounds,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
