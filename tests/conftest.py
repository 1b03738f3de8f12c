"""Shared fixtures: real models built from configs with random weights (nothing is downloaded),
traced once per session because several test files read the same traces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest_paths import FIXTURES, ROOT  # noqa: E402,F401  (also imported by the test modules)

EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))

import hf_models  # noqa: E402
import resnet  # noqa: E402

import opaudit  # noqa: E402


@pytest.fixture(scope="session")
def resnet_train() -> tuple[opaudit.Trace, torch.nn.Module]:
    torch.manual_seed(0)
    model = resnet.get_model()
    trace = opaudit.trace(model, resnet.get_inputs(), train=True, loss_fn=resnet.get_loss)
    return trace, model


@pytest.fixture(scope="session")
def gpt2_train() -> opaudit.Trace:
    torch.manual_seed(0)
    return opaudit.trace(hf_models.gpt2, train=True, mode="real")


@pytest.fixture(scope="session")
def llama7b_meta() -> opaudit.Trace:
    return opaudit.trace(hf_models.llama_7b, train=True)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None):
    """The real command line in a fresh process: exit code, stdout, stderr."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "opaudit", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, timeout=timeout, env=full_env)
    return proc.returncode, proc.stdout, proc.stderr
