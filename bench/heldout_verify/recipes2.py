"""Synthetic data recipes of the second held-out verify set (bench/heldout_verify/programs2.toml), beside the first
set's (recipes.py, whose recipes this module offers too) and the rehearsal corpus's (bench/rehearsal_corpus.py
RECIPES). Each writes small random data where a program reads its data set, in the layout the program's own
loader expects. Nothing is downloaded; no file of the programs is copied.
"""

from __future__ import annotations

import importlib.util
import json
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("heldout_verify_recipes", Path(__file__).with_name("recipes.py"))
assert _spec is not None and _spec.loader is not None
first = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(first)

_rng = first._rng


def _planetoid(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/cora.content (``<id> <binary features> <label>`` a line) and cora.cites (``<cited> <citing>``):
    the Cora layout of the GCN/GAT reference code, ``nodes`` papers (their loaders index up to 1500),
    ``features`` words, ``classes`` labels, ``edges`` citations."""
    rng = _rng(spec)
    d = cwd / spec.get("dir", "data/cora")
    d.mkdir(parents=True, exist_ok=True)
    n, f, k = int(spec.get("nodes", 1500)), int(spec.get("features", 32)), int(spec.get("classes", 7))
    ids = rng.permutation(100000)[:n] + 1000
    feats = (rng.random((n, f)) < 0.1).astype(int)
    labels = rng.integers(0, k, n)
    d.joinpath("cora.content").write_text("".join(
        f"{ids[i]}\t" + "\t".join(map(str, feats[i])) + f"\tlabel_{labels[i]}\n" for i in range(n)))
    pairs = rng.integers(0, n, (int(spec.get("edges", 3000)), 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    d.joinpath("cora.cites").write_text("".join(f"{ids[a]}\t{ids[b]}\n" for a, b in pairs))


def _npz_images(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: an .npz whose ``key`` (default ``imgs``) holds ``count`` random binary ``size`` x ``size`` images
    (the dSprites archive's layout)."""
    import numpy as np

    rng = _rng(spec)
    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    size = int(spec.get("size", 64))
    imgs = (rng.random((int(spec.get("count", 64)), size, size)) < 0.2).astype(np.uint8)
    np.savez(p, **{spec.get("key", "imgs"): imgs})


def _user_items(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: ``<user> <item>`` lines, users 1..``users`` each with a time-ordered sequence of 4 to ``max_len``
    items from 1..``items`` (the implicit-feedback sequences of SASRec's data folder)."""
    rng = _rng(spec)
    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for u in range(1, int(spec.get("users", 40)) + 1):
        length = int(rng.integers(4, int(spec.get("max_len", 12)) + 1))
        for i in rng.integers(1, int(spec.get("items", 60)) + 1, length):
            lines.append(f"{u} {i}")
    p.write_text("\n".join(lines) + "\n")


def _user_item_lists(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/train.txt and test.txt: ``<user> <item> <item> ...`` a line, users 0..``users``-1 with 3 to 8
    training items and 1 or 2 test items from 0..``items``-1 (the Gowalla layout of LightGCN's data folder)."""
    rng = _rng(spec)
    d = cwd / spec.get("dir", "data/gowalla")
    d.mkdir(parents=True, exist_ok=True)
    n_items = int(spec.get("items", 80))
    train, test = [], []
    for u in range(int(spec.get("users", 50))):
        items = rng.permutation(n_items)[: int(rng.integers(4, 11))]
        k = 1 + u % 2
        train.append(f"{u} " + " ".join(map(str, sorted(items[k:]))))
        test.append(f"{u} " + " ".join(map(str, sorted(items[:k]))))
    (d / "train.txt").write_text("\n".join(train) + "\n")
    (d / "test.txt").write_text("\n".join(test) + "\n")


def _celeba_attrs(cwd: Path, spec: dict[str, Any]) -> None:
    """``images``/*.jpg and ``attrs`` (list_attr_celeba.txt: a count line, a line of attribute names, then
    ``<file> <+1/-1 ...>`` a line): ``count`` random RGB images with random attributes, CelebA's layout."""
    from PIL import Image

    rng = _rng(spec)
    imgs = cwd / spec.get("images", "data/celeba/images")
    imgs.mkdir(parents=True, exist_ok=True)
    names = spec.get("names", ["Black_Hair", "Blond_Hair", "Brown_Hair", "Male", "Young"])
    size, n = int(spec.get("size", 64)), int(spec.get("count", 8))
    rows = []
    for i in range(n):
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype="uint8")).save(imgs / f"{i:06d}.jpg")
        rows.append(f"{i:06d}.jpg " + " ".join(str(int(v)) for v in rng.choice([-1, 1], len(names))))
    attrs = cwd / spec.get("attrs", "data/celeba/list_attr_celeba.txt")
    attrs.write_text(f"{n}\n" + " ".join(names) + "\n" + "\n".join(rows) + "\n")


def _yolo_folder(cwd: Path, spec: dict[str, Any]) -> None:
    """``root``/images/*.jpg, ``root``/labels/*.txt (``<class> <cx> <cy> <w> <h>`` normalised), ``root``/train.txt
    and valid.txt (image paths), ``root``/classes.names and the ``config`` .data file naming them: the custom
    data set layout of darknet-style YOLO trainers; paths relative to the working folder."""
    from PIL import Image

    rng = _rng(spec)
    root = cwd / spec.get("root", "data/custom")
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "labels").mkdir(parents=True, exist_ok=True)
    k, size = int(spec.get("classes", 2)), int(spec.get("size", 64))
    paths = []
    for i in range(int(spec.get("count", 6))):
        img = root / "images" / f"{i}.jpg"
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype="uint8")).save(img)
        boxes = [f"{int(rng.integers(k))} {cx:.3f} {cy:.3f} {w:.3f} {h:.3f}"
                 for cx, cy, w, h in rng.uniform([0.3, 0.3, 0.1, 0.1], [0.7, 0.7, 0.4, 0.4], (1 + i % 2, 4))]
        (root / "labels" / f"{i}.txt").write_text("\n".join(boxes) + "\n")
        paths.append(str(img.relative_to(cwd)))
    (root / "train.txt").write_text("\n".join(paths) + "\n")
    (root / "valid.txt").write_text("\n".join(paths[: max(2, len(paths) // 3)]) + "\n")
    (root / "classes.names").write_text("".join(f"c{i}\n" for i in range(k)))
    conf = cwd / spec.get("config", "config/custom.data")
    conf.parent.mkdir(parents=True, exist_ok=True)
    rel = root.relative_to(cwd)
    conf.write_text(f"classes={k}\ntrain={rel / 'train.txt'}\nvalid={rel / 'valid.txt'}\n"
                    f"names={rel / 'classes.names'}\n")


def _write_wav(path: Path, rate: int, samples: Any) -> None:
    """Mono 16-bit PCM at ``rate``, samples in [-1, 1] (clipped)."""
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())


def _wav_classes(cwd: Path, spec: dict[str, Any]) -> None:
    """``root``/<word>/*.wav: ``count`` one-second 16 kHz mono clips of noise and a tone for each of ``words``
    (a speech-commands folder), and ``root``/_background_noise_/noise.wav."""
    import numpy as np

    rng = _rng(spec)
    root = cwd / spec.get("root", "data/speech_commands")
    rate = int(spec.get("rate", 16000))
    t = np.arange(rate) / rate
    for j, word in enumerate(spec.get("words", ["yes", "no"])):
        for i in range(int(spec.get("count", 4))):
            _write_wav(root / word / f"{j:02d}{i:04d}_nohash_0.wav", rate,
                       0.3 * np.sin(2 * np.pi * (200 + 100 * j) * t) + 0.05 * rng.standard_normal(rate))
    _write_wav(root / "_background_noise_" / "noise.wav", rate, 0.1 * rng.standard_normal(rate))
    for name, text in spec.get("lists", {}).items():
        (root / name).write_text(text)


def _voc_segmentation(cwd: Path, spec: dict[str, Any]) -> None:
    """``root``/VOCdevkit/VOC2012/: JPEGImages/<id>.jpg, SegmentationClass/<id>.png (class indices below
    ``classes``, one random rectangle of a class on background) and ImageSets/Segmentation/train.txt and val.txt
    (Pascal VOC's segmentation layout)."""
    import numpy as np
    from PIL import Image

    rng = _rng(spec)
    root = cwd / spec.get("root", "data") / "VOCdevkit" / "VOC2012"
    for sub in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    size, k = int(spec.get("size", 64)), int(spec.get("classes", 21))
    ids = {"train": [], "val": []}
    for split, n in (("train", int(spec.get("train", 8))), ("val", int(spec.get("val", 4)))):
        for i in range(n):
            name = f"{split}_{i:04d}"
            img = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            Image.fromarray(img).save(root / "JPEGImages" / f"{name}.jpg")
            lbl = np.zeros((size, size), np.uint8)
            y, x = (int(v) for v in rng.integers(0, size // 2, 2))
            lbl[y:y + size // 2, x:x + size // 2] = int(rng.integers(1, k))
            Image.fromarray(lbl, mode="L").convert("P").save(root / "SegmentationClass" / f"{name}.png")
            ids[split].append(name)
    for split, names in ids.items():
        (root / "ImageSets" / "Segmentation" / f"{split}.txt").write_text("\n".join(names) + "\n")


def _separation_json(cwd: Path, spec: dict[str, Any]) -> None:
    """``root``/<split>/{mix,s1,s2}/<i>.wav and ``root``/<split>/{mix,s1,s2}.json (``[[path, samples], ...]``) for
    the splits tr and cv: ``count`` pairs of tones and noise at ``rate`` Hz, ``seconds`` long, and their sums
    (the json layout of Conv-TasNet's wsj0-2mix preprocessing; paths relative to the working folder)."""
    import numpy as np

    rng = _rng(spec)
    rate, n = int(spec.get("rate", 8000)), int(float(spec.get("seconds", 1.0)) * int(spec.get("rate", 8000)))
    for split in ("tr", "cv"):
        base = cwd / spec.get("root", "data") / split
        infos: dict[str, list[list[Any]]] = {"mix": [], "s1": [], "s2": []}
        for i in range(int(spec.get("count", 4))):
            t = np.arange(n) / rate
            s1 = 0.3 * np.sin(2 * np.pi * (300 + 50 * i) * t)
            s2 = 0.1 * rng.standard_normal(n)
            for name, x in (("s1", s1), ("s2", s2), ("mix", s1 + s2)):
                path = base / name / f"{i}.wav"
                _write_wav(path, rate, x)
                infos[name].append([str(path.relative_to(cwd)), n])
        for name, rows in infos.items():
            (base / f"{name}.json").write_text(json.dumps(rows))


RECIPES: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    **first.RECIPES, "planetoid": _planetoid, "npz_images": _npz_images, "user_items": _user_items,
    "user_item_lists": _user_item_lists,
    "celeba_attrs": _celeba_attrs, "yolo_folder": _yolo_folder, "wav_classes": _wav_classes,
    "separation_json": _separation_json,
    "voc_segmentation": _voc_segmentation}


def register(base: dict[str, Callable[[Path, dict[str, Any]], None]]) -> None:
    """Add these recipes (and the first set's) to the rehearsal corpus's table (``base``), which ``many`` then
    draws on too."""
    first.register(base)
    first.RECIPES.update(RECIPES)
    base.update(RECIPES)
