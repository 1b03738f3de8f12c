"""Example reports of the bundled examples, in reports/examples/ (linked from the README).

    python examples/make_reports.py            # trace each example again, then write its reports
    python examples/make_reports.py --render   # only re-render the reports from the committed traces

Each example keeps its trace (``<name>.trace.json``) beside its reports (``.html``, ``.md``), so the
reports can be rebuilt without the models; tests/report/test_examples.py checks that the committed reports
say what the audit of the committed traces says today (targets, verdicts, the ops each target lacks).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "reports" / "examples"
# name -> the scan that makes its trace, and the targets its reports name
EXAMPLES = {
    "demo-train": (["examples/model.py", "--train"], ["ascend@2.1.0", "cambricon", "musa@1.2.1", "mps@2.2.0", "xla",
                                                   "enflame"]),
    "resnet50-train": (["examples/resnet.py", "--train"], ["ascend@2.6.0.post5", "cambricon", "musa", "mps"]),
    "gpt2-train": (["examples/hf_models.py:gpt2", "--train"], ["ascend@2.1.0", "cambricon", "xla", "xpu", "dipu"]),
    "llama7b-train-meta": (["examples/hf_models.py:llama_7b", "--train", "--mode", "meta"],
                           ["ascend", "biren", "cambricon", "musa", "mps@2.6.0", "xla"]),
}


def render(name: str, folder: Path = OUT) -> dict[str, str]:
    """The reports of one example, from its committed trace: file name -> text."""
    import opaudit
    from opaudit.report import render as render_format

    trace = opaudit.load_trace(folder / f"{name}.trace.json")
    result = opaudit.audit(trace, EXAMPLES[name][1])
    return {f"{name}.html": render_format(result, "html"), f"{name}.md": render_format(result, "markdown")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--render", action="store_true", help="re-render from the committed traces only")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (scan, _) in EXAMPLES.items():
        if not args.render:
            subprocess.run([sys.executable, "-m", "opaudit", "scan", *scan, "--no-audit", "-q",
                            "--json", str(OUT / f"{name}.trace.json")], check=True, cwd=ROOT)
        for file, text in render(name).items():
            (OUT / file).write_text(text, encoding="utf-8")
            print(f"wrote reports/examples/{file} ({len(text) / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
