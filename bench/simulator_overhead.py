"""Simulator overhead against eager, on ops the target has: a train step in ``simulate("ascend")`` vs on the CPU.

    python bench/simulator_overhead.py [--rounds 5] [--threads N] [--profile MODEL]
                                       [--out bench/results/simulator_overhead.json]

For ResNet-50 (2x3x64x64), BERT-base and GPT-2 (batch 2, sequence 32), built from configs with random
weights: a train step (forward, loss, backward, AdamW step, zero_grad), once eager on plain CPU tensors
(AdamW ``foreach=True``) and once on a copy of the model on the simulated device of the newest Ascend
release (AdamW with its default, which in a simulation is the foreach path on the device, as on a real
plugin device: the script checks that the step ran ``_foreach_`` ops). Every op of the step is one the
target has, so this measures the simulator's own cost per op (on the C++ device, the default engine, its
kernels' copies and counting; on the wrapper engine, ``OPAUDIT_REHEARSAL_DEVICE=wrapper``, the SimTensor
wrappers, the dispatch into Python, the per-op plan and counting; the results name the engine), not a
fallback: the script records whatever fell back
(``stats.fallen_back()``), which should be nothing.

A process simulates one device type, and tensors of the simulated device are only touched while a
simulation is active; so each round runs the eager step outside any simulation and the simulated step in
a fresh ``simulate("ascend")`` (its entry, which loads the matrix once per process, is timed apart and not
in the step). The two alternate which goes first per round, so they see the same machine state; the ratio
is the median over rounds of simulated / eager. Also reported: ops per second through the simulator
(the calls its statistics count, per second of the simulated step) and the cost per op over eager
((simulated - eager) / calls). Goal: simulated / eager <= 2.

The simulated copy of the model is moved with a plain ``Module.to``, which keeps shared weights shared in a
simulation (GPT-2's lm_head and wte); the script checks both copies have as many parameters, so that both
AdamW steps do the same work.

The allocator is pinned first (``pin_malloc``: one malloc arena, no trimming, no mmap for large blocks):
with glibc's default, dynamic mmap and trim thresholds, the
optimizer's large temporaries (a parameter-sized ``_foreach_sqrt`` result) are returned to the kernel and
faulted in again on some steps and not others, depending on which thread freed what (the rehearsal once ran
the backward pass on autograd's thread for the device, in a malloc arena of its own; it runs it on the calling
thread now): on BERT, 106k minor page faults in each eager AdamW step against 22k simulated, which made the
simulated step look faster than eager (ratio 0.78). ``--no-pin-malloc`` keeps the defaults.

``--profile MODEL`` runs cProfile over a few simulated steps of one model (resnet50, bert or gpt2) instead
and prints where the time goes (the backward pass included: it runs on the calling thread).
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import ctypes
import ctypes.util
import json
import os
import platform
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import hf_models  # noqa: E402
import resnet  # noqa: E402

from opaudit.rehearsal import simulate  # noqa: E402

ENGINE = ""  # the engine the rehearsal ran on (set by prepare)
from opaudit.tracing.run import _call, default_loss  # noqa: E402

TARGET = "ascend"  # the newest Ascend release
GOAL = 2.0


def pin_malloc() -> bool:
    """glibc with one arena, without trimming and without mmap for large blocks: freed memory stays in the
    process, and a step reuses what the previous one freed (whichever thread freed it) instead of faulting
    fresh pages in."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_max, m_arena_max = -1, -4, -8
        return all(libc.mallopt(p, v) for p, v in ((m_trim_threshold, 2**31 - 1), (m_mmap_max, 0), (m_arena_max, 1)))
    except (OSError, AttributeError):
        return False


def resnet_loss(logits: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    # resnet.get_loss with its labels made on the logits' device (a CPU target would mix devices)
    return torch.nn.functional.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.long,
                                                                 device=logits.device))


def models(names):
    torch.manual_seed(0)
    for name in names:
        if name == "resnet50":
            yield name, resnet.get_model(), resnet.get_inputs(), resnet_loss
        else:
            m, x = getattr(hf_models, name)()
            yield name, m, x, default_loss


def to_device(inputs, device):
    if isinstance(inputs, dict):
        return {k: v.to(device) for k, v in inputs.items()}
    return inputs.to(device)


def train_step(model, inputs, loss_fn, foreach):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=foreach)

    def step():
        model.train()
        loss = loss_fn(_call(model, inputs), inputs)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def timed_eager(step) -> float:
    t = time.perf_counter()
    step()
    return time.perf_counter() - t


def timed_simulated(step):
    """(seconds of the step, seconds to enter the simulation, its statistics)."""
    t0 = time.perf_counter()
    with simulate(TARGET) as sim:
        t1 = time.perf_counter()
        step()
        t2 = time.perf_counter()
    return t2 - t1, t1 - t0, sim.stats


def prepare(model, inputs, loss_fn):
    """The eager step and the simulated step (on a copy of the model moved to the simulated device)."""
    with simulate(TARGET) as sim:
        device = torch.device(sim.name, 0)
        sim_model = copy.deepcopy(model).to(device)
        sim_inputs = to_device(inputs, device)
        target = sim.target
        global ENGINE
        ENGINE = sim.runs_on
    n, n_sim = (sum(p.numel() for p in m.parameters()) for m in (model, sim_model))
    if n != n_sim:
        raise SystemExit(f"the simulated copy has {n_sim:,} parameters, the model {n:,}")
    return (train_step(model, inputs, loss_fn, foreach=True),
            train_step(sim_model, sim_inputs, loss_fn, foreach=None), target, str(device))


def profile(name: str, steps: int = 3) -> None:
    (_, model, inputs, loss_fn), = models([name])
    _, sim_step, _, _ = prepare(model, inputs, loss_fn)
    for _ in range(2):
        timed_simulated(sim_step)
    prof = cProfile.Profile()
    with simulate(TARGET):
        prof.enable()
        for _ in range(steps):
            sim_step()
        prof.disable()
    st = pstats.Stats(prof)
    st.sort_stats("tottime").print_stats(25)
    st.sort_stats("cumulative").print_stats("opaudit", 25)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--models", default="resnet50,bert,gpt2")
    ap.add_argument("--profile", choices=("resnet50", "bert", "gpt2"))
    ap.add_argument("--no-pin-malloc", action="store_true", help="keep glibc's dynamic malloc thresholds")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "simulator_overhead.json"))
    args = ap.parse_args()
    pinned = False if args.no_pin_malloc else pin_malloc()
    torch.set_num_threads(args.threads)
    if args.profile:
        profile(args.profile)
        return
    results, enter_s = [], []
    target = device = ""
    for name, model, inputs, loss_fn in models(args.models.split(",")):
        eager_step, sim_step, target, device = prepare(model, inputs, loss_fn)
        for _ in range(2):  # warm up: optimizer state, the simulator's per-op plans, first-call allocations
            timed_eager(eager_step)
            timed_simulated(sim_step)
        eager, simulated, calls = [], [], []
        fallen: dict[tuple[str, str], int] = {}
        foreach_ops: set[str] = set()
        for r in range(args.rounds):
            if r % 2:
                s, entered, stats = timed_simulated(sim_step)
                e = timed_eager(eager_step)
            else:
                e = timed_eager(eager_step)
                s, entered, stats = timed_simulated(sim_step)
            eager.append(e)
            simulated.append(s)
            enter_s.append(entered)
            calls.append(sum(stats.calls.values()))
            for o in stats.fallen_back():
                fallen[(o.op, o.path)] = fallen.get((o.op, o.path), 0) + o.calls
            foreach_ops |= {o.op for o in stats.ops.values() if o.op.startswith("_foreach_")}
        e, s = statistics.median(eager), statistics.median(simulated)
        ratio = statistics.median(b / a for a, b in zip(eager, simulated, strict=True))
        n = statistics.median(calls)
        per_op = statistics.median((b - a) / c for a, b, c in zip(eager, simulated, calls, strict=True))
        row = {"model": name, "workload": "train", "eager_ms": round(e * 1e3, 2), "simulated_ms": round(s * 1e3, 2),
               "ratio": round(ratio, 3), "goal": GOAL, "ok": ratio <= GOAL, "ops_per_step": int(n),
               "ops_per_s": round(statistics.median(c / t for c, t in zip(calls, simulated, strict=True))),
               "overhead_us_per_op": round(per_op * 1e6, 1),
               "simulated_optimizer_foreach": bool(foreach_ops),
               "fallen_back": [{"op": op, "path": path, "calls": c} for (op, path), c in sorted(fallen.items())]}
        results.append(row)
        print(f"{name:9s} train    eager {row['eager_ms']:8.1f} ms  simulated {row['simulated_ms']:8.1f} ms  "
              f"ratio {row['ratio']:.2f} (goal <= {GOAL})  {row['ops_per_step']} ops/step, "
              f"{row['ops_per_s']:,} ops/s, {row['overhead_us_per_op']:+.1f} us/op over eager, "
              f"fallen back: {row['fallen_back'] or 'nothing'}", flush=True)
    out = {
        "benchmark": "simulator_overhead",
        "target": target,
        "device": device,
        "engine": ENGINE,  # the rehearsal's device engine (opaudit.rehearsal.native)
        "load_average_1min": round(os.getloadavg()[0], 2),
        "rounds": args.rounds,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "malloc_pinned": pinned,
        "enter_ms": round(statistics.median(enter_s) * 1e3, 2),
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
