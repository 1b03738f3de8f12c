"""What a fresh process finds of opaudit's C++ parts (tests/test_cbuild.py), one line on stdout.

``install``: the installation's key and each part's build folder, as JSON. ``load-tracer``: whether the tracer's
C++ recorder loads, and why not."""

import json
import sys

if sys.argv[1] == "install":
    from opaudit.native import cbuild

    print(json.dumps([cbuild.install(), [str(p.build_dir()) for p in cbuild.PARTS]]))
elif sys.argv[1] == "load-tracer":
    import torch  # noqa: F401  # as the command line has it when it loads the recorder

    from opaudit.tracing import native

    print(native.load() is not None, native.reason())
else:
    raise SystemExit(f"unknown probe {sys.argv[1]!r}")
