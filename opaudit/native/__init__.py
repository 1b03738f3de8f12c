"""native/: opaudit's C++ parts and their one builder (cbuild.py).

- ``recorder.cpp``: the tracer's recorder, a boxed fallback on the dispatcher's ``Fake`` key (opaudit.tracing.native);
- ``cuda.cpp``: the CUDA device that traces, CUDA for the CPU-only PyTorch build (opaudit.standin);
- ``device.cpp``: the target device that rehearses, PrivateUse1 over host memory (opaudit.rehearsal.native).

The two devices over host memory share ``host_device.h`` (their CPU-redirect kernel, views and copies),
``host_sparse.h`` (sparse COO tensors on the device, and a dense op's sparse result), ``dtype_bridge.h`` (CUDA's
dtypes that the CPU kernels refuse, run wide) and ``host_alias.h``; every part includes ``torch_compat.h`` (the
torch releases' API differences). This package imports nothing: the layers above load what they need from it.
"""
