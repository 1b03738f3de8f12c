"""The README a newcomer reads and the documentation site (docs/, mkdocs.yml) hold together: the README stays one
short page whose links resolve, every page of docs/ is in the site's navigation and its links resolve (as
`mkdocs build --strict` in .ci/run also checks, where MkDocs is installed), the benchmark page is what
bench/results/ gives, the exit-code table says what opaudit.errors does, and CI runs the README's test command."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import yaml
from helpers import ROOT

from opaudit import errors

DOCS = ROOT / "docs"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _slugs(markdown: str) -> set[str]:
    """The ids MkDocs' toc extension gives the headings of a page (its default slugify), fenced code skipped."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    out = set()
    for title in re.findall(r"^#{1,6} (.+?)\s*$", text, re.M):
        s = re.sub(r"[^\w\s-]", "", title.replace("`", "")).strip().lower()
        out.add(re.sub(r"[-\s]+", "-", s))
    return out


def _broken_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
        elif fragment and dest.suffix == ".md" and fragment not in _slugs(dest.read_text(encoding="utf-8")):
            broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    return broken


def test_the_readme_is_one_short_page_whose_links_resolve():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    assert _broken_links(ROOT / "README.md") == []
    # it leads to the site: every page of the navigation is reachable from it, directly or through docs/index.md
    linked = {Path(t.partition("#")[0]).name for t in LINK.findall(readme) if t.startswith("docs/")}
    assert {"index.md", "cli.md", "benchmarks.md"} <= linked


def test_every_page_is_in_the_navigation_and_its_links_resolve():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("!!python", "#"))

    def pages(nav) -> list[str]:
        out = []
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            out += pages(value) if isinstance(value, list) else [value]
        return out

    in_nav = pages(config["nav"])
    on_disk = sorted(p.name for p in DOCS.glob("*.md"))
    assert sorted(in_nav) == on_disk
    assert [b for page in DOCS.glob("*.md") for b in _broken_links(page)] == []
    # the checker itself finds a broken file link and a broken anchor
    bad = DOCS / "_probe_broken.md"
    try:
        bad.write_text("[a](no-such.md) [b](cli.md#no-such-heading) [c](cli.md#exit-codes) [d](../README.md)\n")
        assert _broken_links(bad) == ["docs/_probe_broken.md: no-such.md (no such file)",
                                      "docs/_probe_broken.md: cli.md#no-such-heading (no such heading)"]
    finally:
        bad.unlink()


def _generator(name: str):
    """A page generator of docs/ (a script there, not a package), imported."""
    sys.path.insert(0, str(DOCS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(DOCS))


def test_the_benchmark_page_is_what_the_results_give():
    gen_bench = _generator("gen_bench")
    page = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    assert page == gen_bench.render(), "docs/benchmarks.md is stale: run python docs/gen_bench.py"
    # every results file has its table, linked from it, and every row of the summary names a baseline and a ratio
    for f in sorted((ROOT / "bench" / "results").glob("*.json")):
        assert f"](../bench/results/{f.name})" in page, f.name
    benches = gen_bench.benchmarks()
    assert all(b.rows and b.header for b in benches)
    assert all(len(row) == 5 and row[1] for b in benches for row in b.summary)
    assert "| trace, CPU, forward (ResNet-50, BERT, GPT-2) | eager on the CPU | 1.08 to 1.17x" in page


def test_the_exit_code_table_says_what_the_code_does():
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    table = page.split("## Exit codes", 1)[1]
    codes = [int(c) for c in re.findall(r"^\| (\d+) \|", table, re.M)]
    constants = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    assert codes == sorted(codes) and set(codes) == constants | {1}  # 1: --fail-on, lint and fix findings
    assert re.search(r"^\| 5 \| `run --simulate`", table, re.M) and errors.EXIT_EMPTY == 5


def test_ci_runs_the_readmes_test_command_and_builds_the_site():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"```sh\n(python -m venv .+?)\n```", readme)
    assert len(commands) == 2 and "opaudit scan examples/model.py" in commands[0]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci.splitlines()
    assert "mkdocs build --strict" in ci and ".[docs]" in ci


def test_the_compatibility_page_is_what_the_data_and_the_runs_give():
    gen_compat = _generator("gen_compat")
    page = (DOCS / "compat.md").read_text(encoding="utf-8")
    assert page == gen_compat.render(), "docs/compat.md is stale: run python docs/gen_compat.py"
    runs = gen_compat.runs()
    assert {r["torch"].split("+")[0] for r in runs} >= {"2.1.2", "2.5.1"}  # the versions .ci/run checks
    assert all(c["ok"] for r in runs for c in r["checks"]), "a compatibility run is not what is promised"
    assert "| ascend@2.1.0.post6 | 2.1.0 | every command | torch 2.1.2: 15/15 as promised |" in page
    # the runs of the versions .ci/run checks have the transformers model and the fallback on the C++ test backend
    for r in runs:
        if r["torch"].split("+")[0] in ("2.1.2", "2.5.1") and not r.get("interpreter"):
            assert {"scan hf:bert", "zoo", "run --fallback"} <= {c["check"] for c in r["checks"]}, r["torch"]
