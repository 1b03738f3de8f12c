"""The compatibility subset: opaudit's commands, as a user runs them, under the torch of a venv.

    python tests/compat/check.py VENV [--out results.json]

VENV is a virtual environment with that torch, opaudit and a transformers release that supports that torch installed
(``.ci/run`` makes them: PyPI's builds of torch 2.1.2 and 2.5.1, with transformers 4.55.4). Each check runs one
command in a fresh folder and compares its exit code with what opaudit promises on that torch (docs/compat.md, "Which
PyTorch"): every command from torch 2.1, the simulated devices (the CUDA path of scan and trace, run --simulate,
fix --verify), a small transformers model (scan, zoo) and the fallback on the C++ test backend (run --fallback, with
g++ to build it, as the main suite's tests/fallback) included.
Prints one line per check; writes the results as JSON; exits 1 when any check is not what is promised.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = ROOT / "tests" / "fixtures"
# tiny transformers models, as the main suite's TINY_ZOO (tests/helpers.py): configurations only, nothing downloaded
GPT2 = "hf:gpt2?n_layer=1&n_embd=32&n_head=2"
BERT = "hf:bert?num_hidden_layers=1&hidden_size=32&num_attention_heads=2&intermediate_size=64"


def versions_of(python: Path) -> tuple[str, str, tuple[int, int]]:
    """(torch, Python, torch's (major, minor)) of the venv's interpreter."""
    out = subprocess.run([str(python), "-c", "import sys, torch; print(torch.__version__, sys.version.split()[0])"],
                         capture_output=True, text=True, check=True).stdout.split()
    major, minor = out[0].split("+")[0].split(".")[:2]
    return out[0], out[1], (int(major), int(minor))


def checks(work: Path) -> list[tuple[str, list[str], set[int], str]]:
    """(name, opaudit's arguments, the exit codes promised, a text the output must hold) of each check."""
    trace = str(work / "model.trace.json")
    sizes = ["--epochs", "1", "--steps-per-epoch", "2", "--batch-size", "8"]
    train = [str(EXAMPLES / "train_cuda.py"), *sizes]
    port = work / "port" / "train_cuda.py"  # (fix rewrites it in place: a copy)
    port.parent.mkdir(exist_ok=True)
    shutil.copy(EXAMPLES / "train_cuda.py", port)
    return [
        ("lint", ["lint", str(EXAMPLES)], {0, 1}, "OA"),
        ("matrix", ["matrix", "list", "ascend"], {0}, "ascend@2.1.0"),
        ("doctor", ["doctor"], {0}, ""),
        ("scan --device cpu", ["scan", str(EXAMPLES / "model.py"), "--train", "--device", "cpu", "--json", trace],
         {0}, "Will it run?"),
        ("report", ["report", trace, "-t", "ascend", "-t", "cambricon"], {0}, "Will it run?"),
        ("trace --device cpu", ["trace", "--device", "cpu", "-q", "--no-audit", "--", *train], {0}, "epoch 0"),
        ("scan (CUDA path)", ["scan", str(EXAMPLES / "model.py"), "--train"], {0}, "Will it run?"),
        ("run --simulate", ["run", "--simulate", "ascend", "--", *train], {0}, "runs on the device"),
        # DDP of one rank: its C++ parameter check and broadcasts wait on the simulated group's collectives
        ("run --simulate DDP", ["run", "--simulate", "ascend", "--", str(FIXTURES / "fallback" / "ddp_hccl.py")],
         {0}, "world 1 backend hccl"),
        # the port for the newest Ascend release (torch.amp.GradScaler("npu"), ...), rehearsed with CUDA absent
        ("fix --verify", ["fix", "--target", "ascend", "--unsafe-fixes", "--verify", "--", str(port), *sizes],
         {0}, "the port runs on ascend"),
        # a transformers model built from its configuration by the venv's transformers, traced for training
        ("scan hf:bert", ["scan", BERT, "--train", "-t", "ascend"], {0}, "Will it run?"),
        ("zoo", ["zoo", GPT2, BERT, "-t", "ascend", "--train", "--jobs", "1", "--out", str(work / "zoo"), "--cache",
                 str(work / "zoo-cache")], {0}, "2 models, 2 traced; 0 from the cache"),
    ]


# `opaudit run --fallback` on a real PrivateUse1 device, as tests/fallback/test_install.py runs it: a stub torch_npu
# (what install() imports for "ascend") registers the C++ test backend (tests/fixtures/plugins/testdev, compiled with
# the venv's torch and g++ on first use, then kept per torch version) as "npu", and the driver's CNN train step runs on
# it through opaudit's fallback beside a CPU copy of itself
FALLBACK_DRIVER = FIXTURES / "fallback" / "install_driver.py"
FALLBACK_PATH = [FIXTURES / "plugins", FIXTURES / "fallback" / "torch_npu_stub"]


def fallback(python: Path, env: dict, work: Path) -> tuple[bool, int, str]:
    """The train step on the device through the fallback: exit 0, the device registered, the loss the CPU's (to
    1e-5, as the main suite holds it), and the statistics of an installed fallback on npu with the CNN's ops."""
    stats = work / "fallback-stats.json"
    done = subprocess.run([str(python), "-m", "opaudit", "run", "--fallback", "ascend", "--stats", str(stats), "--",
                           str(FALLBACK_DRIVER), "cli"], capture_output=True, text=True, cwd=work, timeout=900,
                          env={**env, "PYTHONPATH": os.pathsep.join(map(str, FALLBACK_PATH))})
    output = done.stdout + done.stderr
    result = next((json.loads(line) for line in reversed(done.stdout.splitlines()) if line.startswith("{")), {})
    loss = result.get("loss", {})
    ops = {o["op"] for o in json.loads(stats.read_text())["ops"]} if stats.exists() else set()
    ok = done.returncode == 0 and result.get("device_registered") is True and "fallback on ascend@" in output and \
        abs(loss.get("device", 0.0) - loss.get("cpu", 1.0)) <= 1e-5 * abs(loss.get("cpu", 1.0)) and \
        {"convolution_overrideable", "native_batch_norm"} <= ops and "internal error" not in output
    return ok, done.returncode, output[-3000:]


# the audit and the strict rehearsal agree on each target (a GradScaler's float64 step, which MPS skips where torch's
# source has that branch): (the target, the script)
AGREE = [(t, FIXTURES / "scripts" / "grad_scaler_fp16.py") for t in ("mps", "ascend")]


def agreement(python: Path, env: dict, work: Path, target: str, script: Path) -> tuple[bool, str]:
    """The trace's audit says the script fails on ``target`` (--fail-on missing: exit 1) exactly where the strict
    rehearsal stops (exit 3)."""
    audit = subprocess.run([str(python), "-m", "opaudit", "trace", "-q", "-t", target, "--fail-on", "missing", "--",
                            str(script)], capture_output=True, text=True, cwd=work, env=env, timeout=900)
    rehearsal = subprocess.run([str(python), "-m", "opaudit", "run", "--simulate", target, "--strict", "--",
                                str(script)], capture_output=True, text=True, cwd=work, env=env, timeout=900)
    ok = audit.returncode in (0, 1) and rehearsal.returncode in (0, 3) and \
        (audit.returncode == 1) == (rehearsal.returncode == 3)
    return ok, f"audit rc={audit.returncode}, rehearsal rc={rehearsal.returncode}\n{audit.stderr[-1500:]}" \
               f"{rehearsal.stderr[-1500:]}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("venv", type=Path)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    venv = args.venv.absolute()  # (not resolve(): the venv's python is a link out of it)
    python = venv / "bin" / "python"
    version, py, _ = versions_of(python)
    results = []
    with tempfile.TemporaryDirectory(prefix="opaudit-compat-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
        env.pop("PYTHONPATH", None)
        for name, argv, codes, text in checks(work):
            start = time.perf_counter()
            done = subprocess.run([str(python), "-m", "opaudit", *argv], capture_output=True, text=True, cwd=work,
                                  env=env, timeout=900)
            seconds = round(time.perf_counter() - start, 1)
            output = done.stdout + done.stderr
            ok = done.returncode in codes and text in output and "internal error" not in output
            results.append({"check": name, "command": "opaudit " + " ".join(argv), "rc": done.returncode,
                            "expected": sorted(codes), "ok": ok, "seconds": seconds})
            print(f"{'ok  ' if ok else 'FAIL'} torch {version}  {name:<20} rc={done.returncode} {seconds:>6} s",
                  flush=True)
            if not ok:
                print(output[-3000:], file=sys.stderr)
        start = time.perf_counter()
        ok, rc, said = fallback(python, env, work)
        seconds = round(time.perf_counter() - start, 1)
        results.append({"check": "run --fallback", "command": f"opaudit run --fallback ascend -- "
                        f"{FALLBACK_DRIVER.name} cli (the C++ test backend as npu)", "rc": rc, "expected": [0],
                        "ok": ok, "seconds": seconds})
        print(f"{'ok  ' if ok else 'FAIL'} torch {version}  {'run --fallback':<20} rc={rc} {seconds:>6} s", flush=True)
        if not ok:
            print(said, file=sys.stderr)
        for target, script in AGREE:
            start = time.perf_counter()
            ok, said = agreement(python, env, work, target, script)
            seconds = round(time.perf_counter() - start, 1)
            name = f"audit = rehearsal on {target}"
            results.append({"check": name, "command": f"opaudit trace -t {target} --fail-on missing / opaudit run "
                            f"--simulate {target} --strict -- {script.name}", "rc": said.split(chr(10))[0],
                            "expected": "the same verdict", "ok": ok, "seconds": seconds})
            print(f"{'ok  ' if ok else 'FAIL'} torch {version}  {name:<20} {said.splitlines()[0]} {seconds:>6} s",
                  flush=True)
            if not ok:
                print(said, file=sys.stderr)
    if args.out:
        args.out.write_text(json.dumps({"torch": version, "python": py, "checks": results},
                                       indent=1) + "\n")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
