"""The linter's own scope analysis against LibCST's QualifiedNameProvider: agreement and cost.

    python bench/lint_scope.py [--rounds 3] [--limit N] [--corpus DIR ...] [--examples 5]
                               [--out bench/results/lint_scope.json]

The corpus is bench/lint_throughput.py's (its ``default_corpus``: the venv's transformers and the packages
under /work/lint-corpus/site where that folder exists), narrowed to the .py files that mention ``cuda``
(sorted; --limit N keeps the first N).

Agreement: in each file, every outermost Name / Attribute chain the walk passes
(``opaudit.lint.walk.resolved_chains``: ``FileCheck.qualname`` where the walk computes it) whose root name
is a read (an access in LibCST's ScopeProvider; a bare name being bound is no chain to resolve), against
the names LibCST's QualifiedNameProvider gives the same node whose source is an import (the only names
the linter resolves). A chain counts where either side names something under a root of interest: torch
and the first component of every API and module of the rule catalogue. Classes: ``same`` (LibCST gives
exactly opaudit's name), ``same_among_several`` (opaudit's name is one of several LibCST gives: every
import that may bind the name, where opaudit takes the last one in the file), ``opaudit_only``,
``libcst_only``, ``different``; with up to --examples examples of each disagreement (file:line and the
chain), and each disagreement given its by-design kind (the results' ``notes``) or ``unexplained``.

Time, CPU time of this process (``time.process_time``) per file, the three measures interleaved file by
file, the best of --rounds per measure: ``parse`` (``libcst.parse_module``), ``walk`` (parse, then the
walk a lint makes: FileCheck with the default rules of target ascend, and its finishing passes), and
``libcst`` (parse, then ``MetadataWrapper(module, unsafe_skip_copy=True)`` resolving QualifiedNameProvider,
ScopeProvider with it, and the qualified names of every chain the walk passes, found untimed: what rules
asking LibCST instead of FileCheck.qualname would pay). Switching would add libcst - parse to the walk, so the
figure to judge is ``switch_over_walk`` = (walk + libcst - parse) / walk; ``libcst_over_walk`` puts the two
side by side. No goal: the measure is what keeping the linter's own analysis saves.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider, ScopeProvider
from libcst.metadata.base_provider import LazyValue
from libcst.metadata.name_provider import QualifiedNameSource

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from lint_throughput import default_corpus, package_version  # noqa: E402  (the corpus, one definition)

from opaudit.lint.catalogue import load_catalogue  # noqa: E402
from opaudit.lint.engine import Settings, _check  # noqa: E402
from opaudit.lint.walk import resolved_chains  # noqa: E402

RESULT = HERE / "results" / "lint_scope.json"
CLASSES = ("same", "same_among_several", "opaudit_only", "libcst_only", "different")

# where the two differ by design (each disagreement found is given one of these kinds, or "unexplained")
NOTES = {
    "several_imports": "same_among_several: LibCST gives every import that may bind the name (a guarded import "
                       "and its fallback, imports in both branches of an if); the linter takes the one the walk "
                       "passed last, which is among them.",
    "bound_otherwise_too": "libcst_only: the scope binds the name by an import and by something else (`x = None` "
                           "or a def in the except branch of a guarded import in a function; a module-level loop, "
                           "with, except, def or class); which binding holds depends on the path taken, so the "
                           "linter assumes neither, while LibCST lists both (the import among them).",
    "relative_imports": "not compared: the linter resolves no relative import, and LibCST's names for them "
                        "(`.utils.x`) fall under no root of interest.",
    "fixed": "found with this comparison on small snippets and fixed in opaudit/lint/walk.py "
             "(tests/lint/test_scopes.py): an import in a function or class body bound its name for the rest of "
             "the file (a later function's `np` read as the other function's import); an import a function "
             "declares global was not seen at module level; a nested function did not see its enclosing "
             "function's later import; a comprehension's first iterable was resolved in the comprehension's "
             "scope instead of the enclosing one.",
}


def roots_of_interest() -> set[str]:
    """torch and the first component of every API and module the catalogue matches."""
    out = {"torch"}
    for rule in load_catalogue().rules.values():
        out.update(a.split(".")[0] for a in rule.apis)
        out.update(m.split(".")[0] for m in rule.modules)
    return out


def corpus(roots: list[Path], limit: int | None) -> tuple[list[tuple[str, Path]], list[dict]]:
    """(package-relative name, path) of the corpus's .py files that mention cuda, and the packages."""
    files, packages = [], []
    for root in roots:
        mine = [p for p in sorted(root.rglob("*.py")) if p.is_file() and b"cuda" in p.read_bytes()]
        files += [(f"{root.name}/{p.relative_to(root).as_posix()}", p) for p in mine]
        packages.append({"package": root.name, "version": package_version(root), "path": str(root),
                         "files": len(mine), "bytes": sum(p.stat().st_size for p in mine)})
    files.sort()
    if limit:
        files = files[:limit]
        kept = Counter(name.split("/")[0] for name, _ in files)
        packages = [p for p in packages if kept[p["package"]]]
        for p in packages:
            p["files"] = kept[p["package"]]
    return files, packages


def chain_root(node: cst.CSTNode) -> cst.Name | None:
    while type(node) is cst.Attribute:
        node = node.value  # type: ignore[attr-defined]
    return node if type(node) is cst.Name else None


def libcst_names(names: dict, node: cst.CSTNode) -> tuple[set[str], set[str]]:
    """The names QualifiedNameProvider gives ``node``: those from imports, and the others."""
    value = names.get(node, ())
    if isinstance(value, LazyValue):
        value = value()
    imported = {q.name for q in value if q.source is QualifiedNameSource.IMPORT}
    return imported, {q.name for q in value if q.source is not QualifiedNameSource.IMPORT}


def accesses(scopes: dict) -> set[int]:
    """ids of the Name nodes LibCST records as reads."""
    out: set[int] = set()
    for scope in {id(s): s for s in scopes.values() if s is not None}.values():
        for access in scope.accesses:
            out.add(id(access.node))
    return out


def compared_chains(module: cst.Module, source: bytes, wrapper: MetadataWrapper,
                    interest: set[str]) -> list[tuple[cst.CSTNode, str | None, set[str], set[str]]]:
    """(chain, opaudit's name, LibCST's import names, LibCST's other names) of every chain either side resolves
    under a root of interest."""
    names = wrapper.resolve(QualifiedNameProvider)
    reads = accesses(wrapper.resolve(ScopeProvider))
    out = []
    for node, mine in resolved_chains(module, source):
        root = chain_root(node)
        if root is None or id(root) not in reads:
            continue
        theirs, other = libcst_names(names, node)
        if (mine is not None and mine.split(".")[0] in interest) or any(t.split(".")[0] in interest
                                                                        for t in theirs):
            out.append((node, mine, theirs, other))
    return out


def kind_of(cls: str, other: set[str]) -> str:
    """The by-design kind a disagreement belongs to (NOTES), else ``unexplained``."""
    if cls == "same_among_several":
        return "several_imports"
    if cls == "libcst_only" and other:
        return "bound_otherwise_too"
    return "unexplained"


def classify(mine: str | None, theirs: set[str]) -> str:
    if mine is None:
        return "libcst_only"
    if not theirs:
        return "opaudit_only"
    if mine in theirs:
        return "same" if len(theirs) == 1 else "same_among_several"
    return "different"


def agreement(files: list[tuple[str, Path]], interest: set[str], examples: int) -> dict:
    counts: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    found: dict[str, list[dict]] = {c: [] for c in CLASSES if c != "same"}
    chains = 0
    for name, path in files:
        source = path.read_bytes()
        module = cst.parse_module(source)
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        rows = compared_chains(module, source, wrapper, interest)
        chains += len(rows)
        positions = None
        for node, mine, theirs, other in rows:
            kind = classify(mine, theirs)
            counts[kind] += 1
            if kind != "same":
                kinds[kind_of(kind, other)] += 1
            if kind != "same" and len(found[kind]) < examples:
                positions = positions or wrapper.resolve(PositionProvider)
                found[kind].append({"at": f"{name}:{positions[node].start.line}", "kind": kind_of(kind, other),
                                    "chain": cst.Module([]).code_for_node(node), "opaudit": mine,
                                    "libcst": sorted(theirs), "libcst_other": sorted(other)})
        gc.collect()
    return {"chains": chains, "counts": {c: counts[c] for c in CLASSES}, "disagreements_by_kind": dict(kinds),
            "agree": counts["same"] + counts["same_among_several"], "examples": found}


def timings(files: list[tuple[str, Path]], rounds: int) -> dict:
    settings = Settings(target="ascend")
    target, cat, selected = settings.resolved()
    sources = [p.read_bytes() for _, p in files]
    best = {"parse": [float("inf")] * len(sources), "walk": [float("inf")] * len(sources),
            "libcst": [float("inf")] * len(sources)}
    for _ in range(rounds):
        for i, source in enumerate(sources):
            gc.collect()
            t = time.process_time()
            cst.parse_module(source)
            best["parse"][i] = min(best["parse"][i], time.process_time() - t)

            gc.collect()
            t = time.process_time()
            module = cst.parse_module(source)
            _check(module, source, target, cat, selected, settings.min_torch)
            best["walk"][i] = min(best["walk"][i], time.process_time() - t)

            gc.collect()
            t = time.process_time()
            module = cst.parse_module(source)
            wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
            names = wrapper.resolve(QualifiedNameProvider)
            wrapper.resolve(ScopeProvider)
            spent = time.process_time() - t
            chains = [node for node, _ in resolved_chains(module, source)]  # the questions, found untimed
            t = time.process_time()
            for node in chains:
                libcst_names(names, node)
            best["libcst"][i] = min(best["libcst"][i], spent + time.process_time() - t)
    total = {k: sum(v) for k, v in best.items()}
    n = len(sources)
    return {
        "files": n,
        "ms_per_file": {k: round(1000 * v / n, 2) for k, v in total.items()},
        "total_s": {k: round(v, 3) for k, v in total.items()},
        "walk_over_parse": round(total["walk"] / total["parse"], 3),
        "libcst_over_parse": round(total["libcst"] / total["parse"], 3),
        "libcst_over_walk": round(total["libcst"] / total["walk"], 3),
        "switch_over_walk": round((total["walk"] + total["libcst"] - total["parse"]) / total["walk"], 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--corpus", nargs="*", type=Path)
    ap.add_argument("--examples", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args()
    roots = args.corpus or default_corpus()
    files, packages = corpus(roots, args.limit)
    interest = roots_of_interest()
    load = [round(os.getloadavg()[0], 2)]
    agree = agreement(files, interest, args.examples)
    times = timings(files, args.rounds)
    load.append(round(os.getloadavg()[0], 2))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result = {
        "benchmark": "lint_scope",
        "rounds": args.rounds,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average_1min": load,
        "versions": {"libcst": importlib.metadata.version("libcst"), "opaudit_commit": commit},
        "corpus": {"packages": packages, "files": len(files), "bytes": sum(p.stat().st_size for _, p in files),
                   "limit": args.limit, "filter": "mentions cuda"},
        "roots_of_interest": sorted(interest),
        "agreement": agree,
        "notes": NOTES,
        "time": times,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"agreement": agree["counts"], "time": times}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
