"""The CUDA stand-in's loader in a fresh process (tests/tracing/test_stand_in.py), one line on stdout.

``loader``: the loader imports no torch, and declines once torch is imported (prints why).
``api [--stand-in]``: opaudit.trace of a small model on cuda, with the stand-in loaded first or not: the engine,
the ops, and where the caller's model is afterwards."""

import sys

if sys.argv[1] == "loader":
    from opaudit import standin

    assert "torch" not in sys.modules
    import torch  # noqa: F401

    print(standin.prepare())
elif sys.argv[1] == "api":
    if "--stand-in" in sys.argv:
        from opaudit import standin

        assert standin.prepare() is None
    import torch

    import opaudit

    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    t = opaudit.trace(m, torch.randn(2, 4), device="cuda")
    print(t.meta.simulated["engine"], sorted(t.ops()), next(m.parameters()).device)
else:
    raise SystemExit(f"unknown probe {sys.argv[1]!r}")
