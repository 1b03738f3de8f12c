"""Synthetic data recipes of the held-out verify set (bench/heldout_verify/programs.toml), beside the rehearsal
corpus's (bench/rehearsal_corpus.py RECIPES): each writes small random data where a program reads its data set,
in the layout the program's own loader expects. Nothing is downloaded; no file of the programs is copied.

A program's ``data`` is one recipe (``{ recipe = "name", ... }``) or ``{ recipe = "many", steps = [...] }``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _rng(spec: dict[str, Any]):
    import numpy as np

    return np.random.default_rng(int(spec.get("seed", 0)))


def _file(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: a text file with ``text`` (a run configuration the program reads, such as a YAML file)."""
    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(spec["text"])


def _text(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: ``chars`` characters of random words from a small vocabulary (a character-level corpus)."""
    r = random.Random(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "away", "home", "is", "here"]
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < int(spec.get("chars", 2000)):
        out.append(r.choice(words) + ("." if r.random() < 0.1 else ""))
    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(" ".join(out) + "\n")


def _token_shards(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/data00.bin ... : ``shards`` files of ``tokens`` uint16 token ids below ``vocab`` (pretokenized
    shards, as llama2.c's tinystories.py writes them; the first shard is its validation split)."""
    import numpy as np

    d = cwd / spec["dir"]
    d.mkdir(parents=True, exist_ok=True)
    rng = _rng(spec)
    for i in range(int(spec.get("shards", 2))):
        rng.integers(0, int(spec.get("vocab", 64)), int(spec.get("tokens", 4000)), dtype=np.uint16).tofile(
            d / f"data{i:02d}.bin")


def _state_dict(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: an empty state dict under the file name of a pretrained checkpoint the program loads with
    ``strict=False`` before any download (the model keeps its random initialisation)."""
    import torch

    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    torch.save({}, p)


def _csv_detection(cwd: Path, spec: dict[str, Any]) -> None:
    """``root``/images/*.jpg with ``train.csv``, ``val.csv`` (path,x1,y1,x2,y2,class) and ``classes.csv``
    (class,id): the CSV layout of pytorch-retinanet; one or two random boxes an image."""
    from PIL import Image

    rng = _rng(spec)
    root = cwd / spec.get("root", "data")
    (root / "images").mkdir(parents=True, exist_ok=True)
    classes = [f"c{i}" for i in range(int(spec.get("classes", 2)))]
    size = int(spec.get("size", 64))
    for split, n in (("train", int(spec.get("train", 4))), ("val", int(spec.get("val", 2)))):
        rows = []
        for i in range(n):
            img = root / "images" / f"{split}{i}.jpg"
            Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype="uint8")).save(img)
            for _ in range(1 + i % 2):
                x1, y1 = (int(v) for v in rng.integers(0, size // 2, 2))
                w, h = (int(v) for v in rng.integers(8, size // 2, 2))
                rows.append(f"{img},{x1},{y1},{x1 + w},{y1 + h},{classes[int(rng.integers(len(classes)))]}")
        (root / f"{split}.csv").write_text("\n".join(rows) + "\n")
    (root / "classes.csv").write_text("".join(f"{c},{i}\n" for i, c in enumerate(classes)))


def _seg_pairs(cwd: Path, spec: dict[str, Any]) -> None:
    """``imgs``/<id>.jpg and ``masks``/<id><suffix>.gif: random RGB images and two-valued masks (the layout
    of Pytorch-UNet's Carvana loader)."""
    import numpy as np
    from PIL import Image

    rng = _rng(spec)
    imgs, masks = cwd / spec.get("imgs", "data/imgs"), cwd / spec.get("masks", "data/masks")
    imgs.mkdir(parents=True, exist_ok=True)
    masks.mkdir(parents=True, exist_ok=True)
    size = int(spec.get("size", 32))
    for i in range(int(spec.get("count", 12))):
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(imgs / f"im{i}.jpg")
        m = np.zeros((size, size), np.uint8)
        y, x = (int(v) for v in rng.integers(0, size // 2, 2))
        m[y:y + size // 2, x:x + size // 2] = 1
        Image.fromarray(m, mode="L").convert("P").save(masks / f"im{i}{spec.get('suffix', '_mask')}.gif")


def _png_classes(cwd: Path, spec: dict[str, Any]) -> None:
    """``root``/<class>/*.png: random grey images, ``count`` of them over ``classes`` folders (a folder of
    MNIST-like PNGs)."""
    from PIL import Image

    rng = _rng(spec)
    size = int(spec.get("size", 28))
    for i in range(int(spec.get("count", 16))):
        d = cwd / spec.get("root", "data") / str(i % int(spec.get("classes", 2)))
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (size, size), dtype="uint8"), mode="L").save(d / f"{i}.png")


def _token_jsonl(cwd: Path, spec: dict[str, Any]) -> None:
    """``train`` and ``valid`` JSON-lines files of {"context": [ids], "completion": [ids]} (token ids below
    ``vocab``): the fine-tuning format of microsoft/LoRA's NLG examples."""
    r = random.Random(0)
    vocab = int(spec.get("vocab", 50257))
    for key, n in (("train", int(spec.get("train_lines", 8))), ("valid", int(spec.get("valid_lines", 4)))):
        p = cwd / spec[key]
        p.parent.mkdir(parents=True, exist_ok=True)
        lines = [json.dumps({"context": [r.randrange(vocab) for _ in range(r.randint(4, 10))],
                             "completion": [r.randrange(vocab) for _ in range(r.randint(3, 6))]}) for _ in range(n)]
        p.write_text("\n".join(lines) + "\n")


def _many(cwd: Path, spec: dict[str, Any]) -> None:
    """Several recipes, in order (``steps``)."""
    from_all = all_recipes()
    for step in spec["steps"]:
        from_all[step["recipe"]](cwd, step)


RECIPES: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    "file": _file, "text": _text, "token_shards": _token_shards, "state_dict": _state_dict,
    "csv_detection": _csv_detection, "seg_pairs": _seg_pairs, "png_classes": _png_classes,
    "token_jsonl": _token_jsonl, "many": _many}

_BASE: dict[str, Callable[[Path, dict[str, Any]], None]] = {}


def register(base: dict[str, Callable[[Path, dict[str, Any]], None]]) -> None:
    """Add these recipes to the rehearsal corpus's table (``base``), which ``many`` then draws on too."""
    _BASE.update(base)
    base.update(RECIPES)


def all_recipes() -> dict[str, Callable[[Path, dict[str, Any]], None]]:
    return {**_BASE, **RECIPES}
