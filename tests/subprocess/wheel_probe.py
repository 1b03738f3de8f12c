"""opaudit as installed from its wheel (tests/test_packaging.py; PYTHONPATH names the folder it was installed in):
one line each for where the package and its data are, what the tracer, the audit and the HTML report read from the
wheel, the rule catalogue and a fix, and the page matrix show names."""

import torch

import opaudit
import opaudit.data as d
from opaudit.lint import Settings, fix_source, load_catalogue
from opaudit.matrix import provenance
from opaudit.report import render

print(opaudit.__file__)
print(*(d.data_dir(n) for n in d.FOLDERS))
m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5))
t = opaudit.trace(m, torch.randn(2, 8), train=True)
print(sorted(r.op for r in t.records if r.kind == "choice"))
a = opaudit.audit(t, ["ascend@2.6.0.post5"])
print(a.verdict("ascend").verdict, len(render(a, "html")) > 10000, len(a.verdicts))
fixed = fix_source(b"import torch\ntorch.cuda.synchronize()\n", Settings(target="musa")).new
print(len(load_catalogue().rules), fixed.decode().splitlines()[-1])
print(provenance.page_path(), provenance.page_path().is_file())
