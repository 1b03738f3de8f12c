"""A Llama-7B-shaped train step on meta: trace time, memory, and the whole `opaudit scan` command.

    python bench/llama7b_meta.py [--runs 3] [--out bench/results/llama7b_meta.json]

Each measurement runs in a fresh process, so imports and memory are what a user sees:
- baseline: the imports alone (torch, transformers' Llama, opaudit), peak RSS after them;
- trace: build the 6.7 B-parameter model on meta and trace forward, loss, backward and two AdamW
  steps (opaudit.trace), against the same step run untraced in the same process;
- command: `opaudit scan examples/hf_models.py:llama_7b --train -q`, wall time, imports included,
  against `python -c "import torch, transformers..."` (the imports it cannot avoid).
Goals: trace <= 2 s, peak RSS <= baseline + 100 MB, command <= 10 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"trace_s": 2.0, "rss_over_imports_mb": 100.0, "command_s": 10.0}

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from transformers import LlamaForCausalLM  # noqa: F401  (the model's own imports: part of the baseline)
import opaudit
from opaudit.tracing.run import default_loss
import hf_models
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
base = rss()
t = time.perf_counter()
trace = opaudit.trace(hf_models.llama_7b, train=True)
traced = time.perf_counter() - t
peak = rss()
# the same step untraced: forward, loss, backward, two foreach AdamW steps, on the same meta model
with torch.device("meta"):
    model, inputs = hf_models.llama_7b()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
from torch.utils._python_dispatch import TorchDispatchMode
class Item(TorchDispatchMode):  # meta has no values: answer .item() as the tracer does, nothing else
    @classmethod
    def _should_skip_dynamo(cls):
        return False
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default and args[0].device.type == "meta":
            return True
        return func(*args, **(kwargs or {}))
t = time.perf_counter()
with Item(), torch.device("meta"):
    loss = default_loss(model(**inputs), inputs)
with Item():
    loss.backward(); opt.step(); opt.step(); opt.zero_grad(set_to_none=True)
bare = time.perf_counter() - t
print(json.dumps({"base_rss_mb": base, "peak_rss_mb": peak, "trace_s": traced, "bare_step_s": bare,
                  "recording_s": trace.meta.duration_s, "op_calls": trace.meta.total_calls,
                  "mode": trace.meta.mode}))
"""


def child() -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "examples")], check=True, capture_output=True,
                         text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "llama7b_meta.json"))
    args = ap.parse_args()
    runs, commands, imports = [], [], []
    scan = [sys.executable, "-m", "opaudit", "scan", "examples/hf_models.py:llama_7b", "--train", "-q"]
    just_imports = [sys.executable, "-c",
                    "import torch, opaudit, opaudit.cli; from transformers import LlamaForCausalLM"]
    for _ in range(args.runs):  # interleaved, so each ratio compares runs on the same machine state
        runs.append(child())
        commands.append(timed(scan))
        imports.append(timed(just_imports))
    med = lambda key: statistics.median(r[key] for r in runs)  # noqa: E731
    result = {
        "benchmark": "llama7b_meta",
        "runs": args.runs,
        "torch": __import__("torch").__version__,
        "transformers": __import__("transformers").__version__,
        "python": platform.python_version(),
        "mode": runs[0]["mode"],
        "op_calls": runs[0]["op_calls"],
        "trace_s": round(med("trace_s"), 3),
        "recording_s": round(med("recording_s"), 3),
        "bare_step_s": round(med("bare_step_s"), 3),
        "trace_over_bare_step": round(med("trace_s") / med("bare_step_s"), 3),
        "base_rss_mb": round(med("base_rss_mb"), 1),
        "peak_rss_mb": round(med("peak_rss_mb"), 1),
        "rss_over_imports_mb": round(med("peak_rss_mb") - med("base_rss_mb"), 1),
        "command_s": round(statistics.median(commands), 2),
        "imports_only_s": round(statistics.median(imports), 2),
        "command_over_imports": round(statistics.median(commands) / statistics.median(imports), 3),
        "goals": GOALS,
    }
    result["ok"] = {k: result[k] <= v for k, v in GOALS.items()}
    print(json.dumps(result, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
