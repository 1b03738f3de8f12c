"""Shared fixtures: real models built from configs with random weights (nothing is downloaded),
traced once per session because several test files read the same traces."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# One intra-op thread per worker of `pytest -n N` (and for the commands it starts), unless the caller chose: the
# workers already fill the cores, and torch's OpenMP threads of two workers on two cores spin-wait for each other
# (a conv-heavy test file takes 2.5 times the CPU with torch's default of one thread per core).
if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"

import torch  # noqa: E402
from helpers import ROOT  # noqa: E402

EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))

import hf_models  # noqa: E402
import resnet  # noqa: E402

import opaudit  # noqa: E402

# The parse cache of the TOML data (opaudit.tomlcache) goes to a folder of this test process, not to the
# user's ~/.cache: the suite writes nothing outside its temporary folders. The CLI's subprocesses inherit it.
# The C++ stand-in for CUDA (opaudit.standin), which the CLI's trace and scan load, is built once for all the
# suite's processes (its workers share it under a lock) in the temporary folder, and kept for the next run.
if "OPAUDIT_CUDA_STAND_IN_BUILD" not in os.environ:
    from opaudit import standin

    os.environ["OPAUDIT_CUDA_STAND_IN_BUILD"] = str(Path(tempfile.gettempdir()) / f"opaudit-test-{os.getuid()}"
                                                    / "cuda-stand-in" / standin.build_dir().name)
# So is the rehearsal's C++ device (opaudit.rehearsal.native).
if "OPAUDIT_REHEARSAL_DEVICE_BUILD" not in os.environ:
    from opaudit.rehearsal import native

    os.environ["OPAUDIT_REHEARSAL_DEVICE_BUILD"] = str(Path(tempfile.gettempdir()) / f"opaudit-test-{os.getuid()}"
                                                       / "rehearsal-device" / native.build_dir().name)
# So is the tracer's C++ recorder (opaudit.tracing.native).
if "OPAUDIT_TRACER_BUILD" not in os.environ:
    from opaudit.tracing import native as tracer_native

    os.environ["OPAUDIT_TRACER_BUILD"] = str(Path(tempfile.gettempdir()) / f"opaudit-test-{os.getuid()}"
                                             / "tracer" / tracer_native.build_dir().name)
if "OPAUDIT_CACHE_DIR" not in os.environ:
    _CACHE = tempfile.mkdtemp(prefix="opaudit-test-cache-")
    os.environ["OPAUDIT_CACHE_DIR"] = _CACHE

    def pytest_unconfigure(config) -> None:
        shutil.rmtree(_CACHE, ignore_errors=True)


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


# The files that take longest (seconds of one worker, measured on 2 cores), longest first. pytest-xdist's
# --dist loadfile hands out whole files in collection order, so a long file collected last keeps one worker busy
# while the other idles; sending the longest first (the classic longest-processing-time rule) ends both workers
# close together. Only the order changes: every file still runs, and a file not named here keeps its place.
LONGEST_FIRST = [
    "rehearsal/test_simulate.py", "zoo/test_config_fixes.py", "tracing/test_stand_in.py", "test_cli.py",
    "rehearsal/test_dtype_truth.py", "fallback/test_install.py", "rehearsal/test_engines.py",
    "rehearsal/test_checkpoint.py", "tracing/test_device.py", "lint/test_corpus.py", "lint/test_convergence.py",
    "rehearsal/test_rehearsal_training.py", "test_cli_audit.py", "matrix/test_db.py", "zoo/test_zoo.py",
    "tracing/test_dtype_bridge.py", "tracing/test_compiled.py", "rehearsal/test_device_selected.py",
    "rehearsal/test_surface.py", "test_code.py",
]


def pytest_configure(config) -> None:
    # pytest-xdist would sort the files by their number of tests instead (a file of two long tests, such as the
    # type check's, then came last and ran alone)
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    tests = Path(__file__).resolve().parent

    def key(item) -> int:
        try:
            return rank.get(Path(str(item.fspath)).resolve().relative_to(tests).as_posix(), len(rank))
        except ValueError:
            return len(rank)

    items.sort(key=key)  # stable: the order inside a file, and of the files not named, is kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With OPAUDIT_NO_SKIP=1 (.ci/run sets it) a skipped test fails: CI has every tool the suite needs
    (chromium, g++), so a skip there means a check that silently did not run."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("OPAUDIT_NO_SKIP") == "1" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under OPAUDIT_NO_SKIP=1 (CI must run every test): {reason}"


@pytest.fixture(scope="session")
def tiny_zoo(tmp_path_factory):
    """`opaudit zoo` over two tiny transformers models and a misspelt one, train step, 2 jobs: (out, cache)."""
    from helpers import TINY_ZOO, TINY_ZOO_TARGETS, run_cli

    base = tmp_path_factory.mktemp("zoo")
    out, cache = base / "out", base / "cache"
    targets = [a for t in TINY_ZOO_TARGETS for a in ("-t", t)]
    code, stdout, stderr = run_cli("zoo", *TINY_ZOO, *targets, "--train", "--jobs", "2", "--out", str(out),
                                   "--cache", str(cache))
    assert code == 0, stderr
    return out, cache, stdout


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (the system's, helpers.CHROMIUM) driven by Playwright, for a module's tests."""
    from helpers import CHROMIUM, NO_CHROMIUM

    playwright = pytest.importorskip("playwright.sync_api", reason="the browser tests need Playwright (in .[test])")
    if CHROMIUM is None:
        pytest.skip(NO_CHROMIUM)
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        yield b
        b.close()
