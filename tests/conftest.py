"""Shared fixtures: real models built from configs with random weights (nothing is downloaded),
traced once per session because several test files read the same traces."""

from __future__ import annotations

import sys

import pytest
import torch
from helpers import ROOT

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

