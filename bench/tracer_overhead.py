"""Tracer overhead against eager, on real CPU tensors, with module and line attribution on.

    python bench/tracer_overhead.py [--rounds 9] [--out bench/results/tracer_overhead.json]

For ResNet-50 (2x3x64x64), BERT-base and GPT-2 (batch 2, sequence 32), built from configs with
random weights: a forward pass (eval, no_grad) and a train step (forward, loss, backward, AdamW
foreach step). Each round runs the workload eager, then traced (a fresh recording each time, its
set-up included), so the two see the same machine state; the ratio is the median over rounds of
traced / eager, which a machine whose speed drifts between rounds does not skew. Goals: <= 1.3
forward, <= 1.5 train.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import hf_models  # noqa: E402
import resnet  # noqa: E402

from opaudit.trace.recorder import Recording, recording  # noqa: E402
from opaudit.trace.run import _call, default_loss  # noqa: E402

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
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "tracer_overhead.json"))
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
