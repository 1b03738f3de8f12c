"""The rehearsal's fixed cost per op, on a workload of small ops: a tiny GPT's training iteration in
``simulate("ascend")`` against the same iteration eager on the CPU.

    python bench/rehearsal_small_ops.py [--rounds 7] [--iters 5] [--threads 1] [--profile fp32|bf16]
                                        [--out bench/results/rehearsal_small_ops.json]

The model is transformers' GPT-2 from a config (2 layers, width 32, 2 heads, a vocabulary of 64), random
weights, batch 2, sequence 16: its ops take microseconds, so the time of an iteration is the cost of
calling them, which is what the rehearsal adds to (a wrapper tensor per result, the dispatch into Python,
the op's plan, the device mapping, the autocast policy's Python kernels). An iteration is what a
nanoGPT-style loop runs per step: an evaluation forward under ``torch.no_grad()``, then a train step
(forward, loss, backward, AdamW step, zero_grad), each under autocast in the ``bf16`` workload.

Eager is the same code on plain CPU tensors, under the CPU's own autocast in ``bf16`` (torch's C++
kernels; its CPU policy casts a few ops differently from the CUDA policy the rehearsal applies, which
changes which casts run, not how many ops a step has to within a few). The simulated run is the script's
view of a CUDA machine: ``cuda`` mapped onto the simulated device (the default of ``opaudit run
--simulate``), every torch call through the device mapping. Both run in this process, interleaved per
round, with one torch thread; the ratio is the median over rounds of simulated / eager. Goal: <= 2.

The rehearsal runs on either of its engines (opaudit.rehearsal.native): ``native``, the C++ device, where an op
the target runs natively costs no Python, and ``wrapper``, the Python wrapper tensor (tensor.SimTensor) it runs
on where the C++ device cannot be built. Each engine is measured in a process of its own (a process sets up
one simulated device); ``--engine`` picks one, both by default.

Also measured on the wrapper engine, interleaved with both: the ``floor``, the simulated iteration with the
simulator's per-op policy taken out (``SimTensor.__torch_dispatch__`` replaced by a bare pass-through that unwraps the
arguments, runs the op on the CPU data and wraps the results: no plan, no statistics, no device check),
which is what any wrapper tensor subclass on a Python-registered device costs with this torch; what the
simulated iteration costs over the floor is opaudit's own bookkeeping. The machine's load average is
recorded with the results (the figures of a shared machine move with it).
``--profile`` runs cProfile over simulated iterations and prints where the time goes.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from simulator_overhead import pin_malloc  # noqa: E402

from opaudit.rehearsal import native, simulate, tensor  # noqa: E402

TARGET = "ascend"
GOAL = 2.0
BATCH, SEQ = 2, 16


def tiny_gpt() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()
    torch.manual_seed(0)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32, bos_token_id=0,
                        eos_token_id=0, loss_type="ForCausalLM")
    return GPT2LMHeadModel(config)


def iteration(model: torch.nn.Module, device: str, amp: bool):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, 64, (BATCH, SEQ), generator=g) for _ in range(2)]
    ids = [b.to(device) for b in batches]

    def run() -> None:
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            model.eval()
            model(input_ids=ids[0], labels=ids[0])
            model.train()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids=ids[1], labels=ids[1]).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return run


def timed(run, iters: int) -> float:
    t = time.perf_counter()
    for _ in range(iters):
        run()
    return (time.perf_counter() - t) / iters


def measure(amp: bool, rounds: int, iters: int) -> dict:
    wrapper = os.environ.get(native.ENV_ENGINE) == "wrapper"
    model = tiny_gpt()
    eager = iteration(model, "cpu", amp)
    with simulate(TARGET) as sim:
        sim_model = copy.deepcopy(model).to("cuda")  # mapped onto the simulated device, as a CUDA script's
        simulated = iteration(sim_model, "cuda", amp)
        device = str(next(sim_model.parameters()).device)
        target, engine = sim.target, sim.runs_on
    for _ in range(2):  # warm up: optimizer state, per-op plans, first-call allocations
        eager()
        with simulate(TARGET):
            simulated()
    e_times, s_times, f_times, calls = [], [], [], []
    fallen: list[str] = []
    for r in range(rounds):
        order = (0, 1, 2) if r % 2 else (2, 1, 0)
        for which in order:
            if which == 2 and not wrapper:
                continue
            if which == 0:
                e_times.append(timed(eager, iters))
            elif which == 1:
                with simulate(TARGET) as sim:
                    s_times.append(timed(simulated, iters))
                calls.append(sum(o.calls for o in sim.stats.ops.values()) / iters)
                fallen = [o.op for o in sim.stats.fallen_back()]
            else:
                with simulate(TARGET), bare_dispatch():
                    f_times.append(timed(simulated, iters))
    ratio = statistics.median(s / e for e, s in zip(e_times, s_times, strict=True))
    e, s, n = statistics.median(e_times), statistics.median(s_times), statistics.median(calls)
    row = {"workload": "bf16" if amp else "fp32", "engine": engine, "target": target, "device": device,
           "eager_ms": round(e * 1e3, 2), "simulated_ms": round(s * 1e3, 2), "ratio": round(ratio, 3),
           "goal": GOAL, "ok": ratio <= GOAL, "ops_per_iteration": int(n),
           "overhead_us_per_op": round((s - e) / n * 1e6, 1), "fallen_back": fallen}
    if f_times:
        f = statistics.median(f_times)
        row.update(floor_ms=round(f * 1e3, 2),
                   floor_ratio=round(statistics.median(f / e for e, f in zip(e_times, f_times, strict=True)), 3),
                   over_floor_us_per_op=round((s - f) / n * 1e6, 1))
    return row


class bare_dispatch:  # noqa: N801 (a context manager, used as a statement)
    """The simulator's per-op policy taken out: SimTensor's dispatch is a bare pass-through (module doc)."""

    def __enter__(self) -> None:
        self.before = tensor.SimTensor.__dict__["__torch_dispatch__"]

        def bare(cls, func, types, args=(), kwargs=None):
            return tensor.run_native(func, args, kwargs or {})
        tensor.SimTensor.__torch_dispatch__ = classmethod(bare)  # type: ignore[method-assign,assignment]

    def __exit__(self, *exc: object) -> None:
        tensor.SimTensor.__torch_dispatch__ = self.before  # type: ignore[method-assign]


def profile(amp: bool, iters: int) -> None:
    model = tiny_gpt()
    with simulate(TARGET):
        sim_model = model.to("cuda")
        run = iteration(sim_model, "cuda", amp)
        for _ in range(2):
            run()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(iters):
            run()
        prof.disable()
    st = pstats.Stats(prof)
    st.sort_stats("tottime").print_stats(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--engine", choices=("native", "wrapper", "both"), default="both")
    ap.add_argument("--profile", choices=("fp32", "bf16"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one engine's rows, as JSON
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "rehearsal_small_ops.json"))
    args = ap.parse_args()
    if args.engine == "both" and not args.child and not args.profile:
        results = []
        for engine in ("native", "wrapper"):
            cmd = [sys.executable, __file__, "--engine", engine, "--child", "--rounds", str(args.rounds),
                   "--iters", str(args.iters), "--threads", str(args.threads)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            sys.stderr.write(done.stderr)
            rows = json.loads(done.stdout.splitlines()[-1])
            for row in rows:
                _show(row)
            results += rows
        _write(args, results, pin_malloc())
        return
    os.environ[native.ENV_ENGINE] = args.engine if args.engine != "both" else "native"
    pinned = pin_malloc()
    torch.set_num_threads(args.threads)
    if args.profile:
        profile(args.profile == "bf16", args.iters)
        return
    results = [measure(amp, args.rounds, args.iters) for amp in (False, True)]
    if args.child:
        print(json.dumps(results))
        return
    for row in results:
        _show(row)
    _write(args, results, pinned)


def _show(row: dict) -> None:
    floor = (f"; the bare floor {row['floor_ratio']:.2f}, {row['over_floor_us_per_op']:+.1f} us/op over it"
             if "floor_ratio" in row else "")
    print(f"tiny GPT {row['workload']} on the {row['engine']} engine: eager {row['eager_ms']:.2f} ms  simulated "
          f"{row['simulated_ms']:.2f} ms  ratio {row['ratio']:.2f} (goal <= {GOAL}{floor})  "
          f"{row['ops_per_iteration']} ops/iteration, {row['overhead_us_per_op']:+.1f} us/op over eager, "
          f"fallen back: {row['fallen_back'] or 'nothing'}", flush=True)


def _write(args: argparse.Namespace, results: list[dict], pinned: bool) -> None:
    out = {"benchmark": "rehearsal_small_ops", "model": "GPT-2 config, 2 layers, width 32, batch 2, sequence 16",
           "rounds": args.rounds, "iterations_per_round": args.iters, "torch": torch.__version__,
           "python": platform.python_version(), "machine": f"{platform.machine()}, {args.threads} torch threads",
           "malloc_pinned": pinned, "load_average_1min": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
           "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
