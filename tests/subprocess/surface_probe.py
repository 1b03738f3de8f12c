"""Every name `fix` can write for a target, resolved in a simulation of that target (tests/rehearsal/test_surface.py):
``python surface_probe.py TARGET`` prints one JSON line (a process simulates one device type)."""

import json
import sys

import torch

from opaudit.lint import load_catalogue, load_target
from opaudit.lint.rules.apis import written_names
from opaudit.rehearsal.simulator import simulate
from opaudit.rehearsal.surface import resolve

target = load_target(sys.argv[1])
missing = []
with simulate(sys.argv[1], plugin_import=True):
    if target.package:
        __import__(target.package)
    names = sorted(written_names(target, load_catalogue(), "2.13"))
    for name in names:
        try:
            resolve(name)
        except (AttributeError, ImportError):
            missing.append(name)
    under_module = [n for n in names if n.startswith(target.module + ".")]
    device_module = getattr(torch, target.device) if target.package else None
print(json.dumps({"names": len(names), "missing": missing, "device_module": type(device_module).__name__,
                  "under_module": len(under_module)}))
