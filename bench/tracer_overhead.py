"""Tracer overhead against eager, on real CPU tensors, with module and line attribution on.

    python bench/tracer_overhead.py [--rounds 9] [--out bench/results/tracer_overhead.json]
    python bench/tracer_overhead.py --device cuda [--rounds 5]   # -> bench/results/tracer_overhead_cuda.json

For ResNet-50 (2x3x64x64), BERT-base and GPT-2 (batch 2, sequence 32), built from configs with
random weights: a forward pass (eval, no_grad) and a train step (forward, loss, backward, AdamW
foreach step). Each round runs the workload eager, then traced (a fresh recording each time, its
set-up included), so the two see the same machine state; the ratio is the median over rounds of
traced / eager, which a machine whose speed drifts between rounds does not skew. Goals: <= 1.3
forward, <= 1.5 train.

``--device cuda`` measures what ``opaudit scan`` and ``opaudit trace`` do by default: the traced run on
CUDA without a GPU (a copy of the model moved there), against eager on the CPU; and, to tell the costs
apart, the same workload on that device without the recorder (``simulated_ms``) and under a dispatch mode
that only runs each op (``bare_mode_ms``: the floor of a recorder written as a TorchDispatchMode, as
opaudit's is). ``--engine`` picks the device: ``stand-in`` (the default, as the command line has it:
opaudit.standin's C++ CUDA, loaded before torch; -> tracer_overhead_cuda.json) or ``simulator`` (the
rehearsal's simulated device, the library API's in a process that imported torch first, entered each round
outside the timed region, as it is once per process; -> tracer_overhead_cuda_simulator.json).
"""

from __future__ import annotations

import argparse
import json
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
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from opaudit.tracing.recorder import Recording, recording  # noqa: E402
from opaudit.tracing.run import _call, default_loss  # noqa: E402

GOALS = {"forward": 1.3, "train": 1.5}


def models():
    torch.manual_seed(0)
    yield "resnet50", resnet.get_model(), resnet.get_inputs(), resnet.get_loss
    for name in ("bert", "gpt2"):
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


def timed(fn, traced: bool, root) -> float:
    if traced:
        rec = Recording(root=root)
        t = time.perf_counter()
        with recording(rec):
            fn()
        return time.perf_counter() - t
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
    args = ap.parse_args()
    if args.device == "cuda":
        return main_cuda(args)
    args.out = args.out or str(ROOT / "bench" / "results" / "tracer_overhead.json")
    torch.set_num_threads(torch.get_num_threads())
    results = []
    for name, model, inputs, loss_fn in models():
        work = workloads(model, inputs, loss_fn)
        for kind, fn in work.items():
            for _ in range(2):  # warm up: first calls allocate, initialise optimizer state, import
                timed(fn, False, model)
                timed(fn, True, model)
            eager, traced = [], []
            for _ in range(args.rounds):
                eager.append(timed(fn, False, model))
                traced.append(timed(fn, True, model))
            e, t = statistics.median(eager), statistics.median(traced)
            ratio = statistics.median(b / a for a, b in zip(eager, traced, strict=True))
            row = {"model": name, "workload": kind, "eager_ms": round(e * 1e3, 2), "traced_ms": round(t * 1e3, 2),
                   "ratio": round(ratio, 3), "goal": GOALS[kind], "ok": ratio <= GOALS[kind]}
            results.append(row)
            print(f"{name:9s} {kind:8s} eager {row['eager_ms']:8.1f} ms  traced {row['traced_ms']:8.1f} ms  "
                  f"ratio {row['ratio']:.2f} (goal <= {GOALS[kind]})", flush=True)
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


class BareMode(TorchDispatchMode):
    """A dispatch mode that only runs each op: the floor of any recorder written as one (the recorder is a
    TorchDispatchMode, and its own work per op comes on top of this)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def main_cuda(args) -> None:
    from contextlib import nullcontext

    from opaudit.fallback.simulator import Simulator
    from opaudit.tracing.device import cuda_target

    stand_in = args.engine == "stand-in"
    target = cuda_target()
    name_out = "tracer_overhead_cuda.json" if stand_in else "tracer_overhead_cuda_simulator.json"
    args.out = args.out or str(ROOT / "bench" / "results" / name_out)
    if stand_in:
        standin.install()

    def device():  # entered each round: the simulation (a no-op for the stand-in) and the default device
        return nullcontext("cuda") if stand_in else Simulator(target)

    results = []
    for name, model, inputs, loss_fn in models():
        with device() as sim:
            dev_model, dev_inputs = on_device(model, inputs, torch.device(sim if stand_in else sim.name))
            dev_work = workloads(dev_model, dev_inputs, loss_fn)
        work = workloads(model, inputs, loss_fn)
        for kind, fn in work.items():
            def simulated(traced: bool | str, fn=dev_work[kind], root=dev_model) -> float:
                # the device as the default device, as opaudit.trace has it (the loss makes its labels)
                with device() as sim, torch.device(sim if stand_in else sim.name):
                    if traced == "bare":
                        with BareMode():
                            return timed(fn, False, root)
                    return timed(fn, bool(traced), root)

            for _ in range(2):  # warm up: first calls allocate, initialise optimizer state, import
                timed(fn, False, model)
                simulated(False)
                simulated("bare")
                simulated(True)
            eager, sim_only, bare, traced = [], [], [], []
            for _ in range(args.rounds):
                eager.append(timed(fn, False, model))
                sim_only.append(simulated(False))
                bare.append(simulated("bare"))
                traced.append(simulated(True))
            e, s, t = statistics.median(eager), statistics.median(sim_only), statistics.median(traced)

            def over_eager(times: list[float], eager: list[float] = eager) -> float:
                return statistics.median(b / a for a, b in zip(eager, times, strict=True))

            ratio, sim_ratio, bare_ratio = over_eager(traced), over_eager(sim_only), over_eager(bare)
            row = {"model": name, "workload": kind, "eager_ms": round(e * 1e3, 2), "simulated_ms": round(s * 1e3, 2),
                   "bare_mode_ms": round(statistics.median(bare) * 1e3, 2), "traced_ms": round(t * 1e3, 2),
                   "simulated_ratio": round(sim_ratio, 3), "bare_mode_ratio": round(bare_ratio, 3),
                   "ratio": round(ratio, 3), "goal": GOALS[kind], "ok": ratio <= GOALS[kind]}
            results.append(row)
            print(f"{name:9s} {kind:8s} eager {row['eager_ms']:8.1f} ms  device {row['simulated_ms']:8.1f} ms  "
                  f"traced {row['traced_ms']:8.1f} ms  ratio {row['ratio']:.2f} (device alone "
                  f"{row['simulated_ratio']:.2f}, with a bare dispatch mode {row['bare_mode_ratio']:.2f}; "
                  f"goal <= {GOALS[kind]})", flush=True)
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
