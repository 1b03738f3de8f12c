"""The held-out lint labels (bench/heldout/labels.toml) are well formed, without needing the corpus:
every file entry names its project, commit, path and sha256 and lists its labelled lines; every
category is one of bench/heldout/GUIDE.md's, and the scorer knows the same categories."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
from helpers import ROOT

from opaudit.lint.catalogue import GROUPS

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

HELDOUT = ROOT / "bench" / "heldout"
# Projects the linter is developed on: none of them may appear in the held-out set.
DEVELOPMENT = {"karpathy/nanoGPT", "karpathy/minGPT", "pytorch/examples", "huggingface/transformers",
               "huggingface/accelerate", "huggingface/diffusers", "Lightning-AI/lightning",
               "Lightning-AI/pytorch-lightning", "huggingface/peft", "huggingface/trl", "meta-llama/llama",
               "jzhang38/TinyLlama", "artidoro/qlora", "tloen/alpaca-lora", "lucidrains/x-transformers",
               "facebookresearch/detr", "Megvii-BaseDetection/YOLOX", "openai/guided-diffusion"}


def _guide_categories() -> set[str]:
    text = (HELDOUT / "GUIDE.md").read_text()
    return set(re.findall(r"^\| `([a-z]+)` \| OA", text, flags=re.M))


@pytest.fixture(scope="module")
def entries() -> list[dict]:
    with open(HELDOUT / "labels.toml", "rb") as f:
        return tomllib.load(f)["file"]


def test_guide_names_the_categories():
    assert _guide_categories() == {"device", "amp", "distributed", "runtime", "env", "backends", "library",
                                   "extension"}


def test_scorer_uses_the_guide_categories():
    spec = importlib.util.spec_from_file_location("lint_heldout", ROOT / "bench" / "lint_heldout.py")
    assert spec and spec.loader
    scorer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scorer)
    assert set(scorer.CATEGORIES) == _guide_categories()
    assert {g for groups in scorer.CATEGORIES.values() for g in groups} == set(GROUPS)


def test_entries_are_complete(entries):
    cats = _guide_categories()
    seen = set()
    for e in entries:
        where = f"{e.get('project')}:{e.get('path')}"
        assert set(e) == {"project", "commit", "path", "sha256", "lines"}, where
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", e["project"]), where
        assert re.fullmatch(r"[0-9a-f]{40}", e["commit"]), where
        assert re.fullmatch(r"[0-9a-f]{64}", e["sha256"]), where
        assert e["path"].endswith(".py") and not e["path"].startswith("/") and ".." not in e["path"], where
        assert (e["project"], e["path"]) not in seen, f"listed twice: {where}"
        seen.add((e["project"], e["path"]))
        lines = [x["line"] for x in e["lines"]]
        assert lines == sorted(set(lines)), f"{where}: lines unsorted or repeated"
        for x in e["lines"]:
            assert set(x) == {"line", "category", "note"}, where
            assert isinstance(x["line"], int) and x["line"] >= 1, where
            assert x["category"] in cats, f"{where}:{x['line']}: {x['category']!r} is not a guide category"
            assert isinstance(x["note"], str) and x["note"].strip(), f"{where}:{x['line']}: no note"


def test_set_is_large_enough_and_held_out(entries):
    projects = {e["project"] for e in entries}
    assert len(entries) >= 40
    assert len(projects) >= 15
    assert not projects & DEVELOPMENT
    assert sum(len(e["lines"]) for e in entries) >= 300
    assert any(not e["lines"] for e in entries), "the set should hold files with no construct too"
    used = {x["category"] for e in entries for x in e["lines"]}
    assert used == _guide_categories(), f"categories without a labelled line: {_guide_categories() - used}"
