"""Synthetic data recipes of the fourth held-out verify set (bench/heldout_verify/programs4.toml), beside the first
three sets' (recipes.py, recipes2.py, recipes3.py, whose recipes this module offers too) and the rehearsal corpus's
(bench/rehearsal_corpus.py RECIPES). Each writes small random data where a program reads its data set, in the layout
the program's own loader expects. Nothing is downloaded; no file of the programs is copied.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("heldout_verify_recipes3", Path(__file__).with_name("recipes3.py"))
assert _spec is not None and _spec.loader is not None
third = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(third)

_rng = third.second.first._rng


def _time_series_csv(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: a CSV with a ``date`` column (hourly from 2020-01-01), ``cols`` noisy sine features f0, f1, ... and
    the ``target`` column last, ``rows`` rows (the layout of Informer's custom and ETT data sets)."""
    import numpy as np

    rng = _rng(spec)
    n, cols = int(spec.get("rows", 300)), int(spec.get("cols", 4))
    t = np.arange(n)
    lines = ["date," + ",".join(f"f{i}" for i in range(cols)) + "," + spec.get("target", "OT")]
    for k in range(n):
        day, hour = divmod(k, 24)
        month, day = divmod(day, 28)
        values = [np.sin(t[k] / (5 + i)) + 0.1 * rng.standard_normal() for i in range(cols)]
        values.append(np.cos(t[k] / 7) + 0.1 * rng.standard_normal())
        lines.append(f"2020-{month + 1:02d}-{day + 1:02d} {hour:02d}:00:00," + ",".join(f"{v:.5f}" for v in values))
    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(lines) + "\n")


def _skipgram_pickles(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/idx2word.dat, word2idx.dat, vocab.dat, wc.dat and train.dat: pickles of a ``vocab``-word vocabulary
    (``<UNK>`` first), its word counts and ``count`` (centre word, ``window`` * 2 context words) pairs of ids (what
    pytorch-sgns' preprocess.py writes)."""
    r = random.Random(int(spec.get("seed", 0)))
    d = cwd / spec.get("dir", "data")
    d.mkdir(parents=True, exist_ok=True)
    vocab, ctx = int(spec.get("vocab", 200)), 2 * int(spec.get("window", 5))
    idx2word = ["<UNK>"] + [f"w{i}" for i in range(1, vocab)]
    data = [(r.randrange(vocab), [r.randrange(vocab) for _ in range(ctx)]) for _ in range(int(spec.get("count", 512)))]
    for name, obj in (("idx2word", idx2word), ("word2idx", {w: i for i, w in enumerate(idx2word)}),
                      ("vocab", set(idx2word)), ("wc", {w: r.randint(1, 500) for w in idx2word}), ("train", data)):
        with open(d / f"{name}.dat", "wb") as f:
            pickle.dump(obj, f)


def _char_text_labels(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/train.txt, dev.txt and test.txt: lines ``<text>\\t<label>`` of 8 to 30 random CJK characters (from
    ``chars`` of them) and a label below ``classes`` (THUCNews' layout in Chinese-Text-Classification-Pytorch); and
    the folders given in ``mkdirs`` (where the program saves its model)."""
    r = random.Random(int(spec.get("seed", 0)))
    d = cwd / spec.get("dir", "THUCNews/data")
    d.mkdir(parents=True, exist_ok=True)
    chars = [chr(c) for c in range(0x4E00, 0x4E00 + int(spec.get("chars", 100)))]
    classes = int(spec.get("classes", 10))
    for name in ("train", "dev", "test"):
        lines = ("".join(r.choice(chars) for _ in range(r.randint(8, 30))) + f"\t{r.randrange(classes)}"
                 for _ in range(int(spec.get(name, 128))))
        (d / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for folder in spec.get("mkdirs", []):
        (cwd / folder).mkdir(parents=True, exist_ok=True)


def _modelnet_txt(cwd: Path, spec: dict[str, Any]) -> None:
    """``root``/modelnet10_shape_names.txt, modelnet10_train.txt, modelnet10_test.txt and <class>/<class>_<n>.txt:
    ``train`` and ``test`` shapes a class of ModelNet10's ten, each ``points`` random rows ``x,y,z,nx,ny,nz`` (the
    modelnet40_normal_resampled layout)."""
    import numpy as np

    rng = _rng(spec)
    root = cwd / spec.get("root", "data/modelnet40_normal_resampled")
    root.mkdir(parents=True, exist_ok=True)
    cats = ["bathtub", "bed", "chair", "desk", "dresser", "monitor", "night_stand", "sofa", "table", "toilet"]
    (root / "modelnet10_shape_names.txt").write_text("\n".join(cats) + "\n")
    ids: dict[str, list[str]] = {"train": [], "test": []}
    k = 0
    for split in ("train", "test"):
        for c in cats:
            for _ in range(int(spec.get(split, 2))):
                k += 1
                name = f"{c}_{k:04d}"
                ids[split].append(name)
                (root / c).mkdir(exist_ok=True)
                np.savetxt(root / c / f"{name}.txt", rng.standard_normal((int(spec.get("points", 300)), 6)),
                           delimiter=",", fmt="%.6f")
    for split, names in ids.items():
        (root / f"modelnet10_{split}.txt").write_text("\n".join(names) + "\n")


def _point_cloud_h5(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/ply_data_train0.h5 and ply_data_test0.h5: ``train`` and ``test`` random clouds of 2048 points
    (``data``) and a ModelNet40 label each (``label``), the modelnet40_ply_hdf5_2048 layout."""
    import h5py
    import numpy as np

    rng = _rng(spec)
    d = cwd / spec.get("dir", "data/modelnet40_ply_hdf5_2048")
    d.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        n = int(spec.get(split, 32))
        with h5py.File(d / f"ply_data_{split}0.h5", "w") as f:
            f.create_dataset("data", data=rng.standard_normal((n, 2048, 3)).astype(np.float32))
            f.create_dataset("label", data=rng.integers(0, 40, (n, 1)).astype(np.uint8))


def _graph_txt(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: ``graphs`` random connected graphs in the text format of GIN's data sets (the graph count; per
    graph ``<nodes> <label>``, then per node ``<tag> <degree> <neighbours...>``), labels alternating over
    ``classes``, node tags below ``tags``."""
    r = random.Random(int(spec.get("seed", 0)))
    out = [str(int(spec.get("graphs", 60)))]
    for g in range(int(spec.get("graphs", 60))):
        n = r.randint(6, 14)
        adj: dict[int, set[int]] = {i: set() for i in range(n)}
        for i in range(1, n):
            j = r.randrange(i)
            adj[i].add(j)
            adj[j].add(i)
        for _ in range(n // 2):
            a, b = r.sample(range(n), 2)
            adj[a].add(b)
            adj[b].add(a)
        out.append(f"{n} {g % int(spec.get('classes', 2))}")
        out += [" ".join(map(str, [r.randrange(int(spec.get("tags", 4))), len(adj[i]), *sorted(adj[i])]))
                for i in range(n)]
    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("\n".join(out) + "\n")


def _census_csv(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: a CSV of ``rows`` census-like rows (age, income, workclass, sex, hours): two discrete columns and
    three continuous ones, for tabular generators such as CTGAN."""

    rng = _rng(spec)
    n = int(spec.get("rows", 200))
    cols = {"age": rng.integers(18, 80, n), "income": rng.normal(50000, 15000, n).round(2),
            "workclass": rng.choice(["Private", "Self-emp", "Gov"], n), "sex": rng.choice(["M", "F"], n),
            "hours": rng.integers(10, 60, n)}
    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(",".join(cols) + "\n" + "".join(",".join(str(c[i]) for c in cols.values()) + "\n"
                                                 for i in range(n)))


def _hub_checkpoint(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/``file``: the state dict of torchvision's ``arch`` with its random initialisation, under the name of
    the pretrained checkpoint a program fetches through torch.hub's load_state_dict_from_url (no hash check), so
    the "download" finds it in $TORCH_HOME/hub/checkpoints (``dir``, an absolute path, the program's env naming
    TORCH_HOME). Written to a temporary file of its own and renamed, as two runs may write it at once (threads of
    one process, too)."""
    import tempfile

    import torch
    import torchvision

    d = Path(spec["dir"])
    d.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    fd, tmp = tempfile.mkstemp(prefix=f".{spec['file']}.", dir=d)
    with os.fdopen(fd, "wb") as f:
        torch.save(getattr(torchvision.models, spec["arch"])().state_dict(), f)
    os.replace(tmp, d / spec["file"])


RECIPES: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    **third.RECIPES, "time_series_csv": _time_series_csv, "skipgram_pickles": _skipgram_pickles,
    "char_text_labels": _char_text_labels, "modelnet_txt": _modelnet_txt, "point_cloud_h5": _point_cloud_h5,
    "graph_txt": _graph_txt, "census_csv": _census_csv, "hub_checkpoint": _hub_checkpoint}


def register(base: dict[str, Callable[[Path, dict[str, Any]], None]]) -> None:
    """Add these recipes (and the first three sets') to the rehearsal corpus's table (``base``), which ``many`` then
    draws on too."""
    third.register(base)
    third.second.first.RECIPES.update(RECIPES)
    base.update(RECIPES)
