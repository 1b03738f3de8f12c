"""Synthetic data recipes of the fifth held-out verify set (bench/heldout_verify/programs5.toml), beside the first
four sets' (recipes.py to recipes4.py, whose recipes this module offers too) and the rehearsal corpus's
(bench/rehearsal_corpus.py RECIPES). Each writes small random data where a program reads its data set, in the layout
the program's own loader expects. Nothing is downloaded; no file of the programs is copied.
"""

from __future__ import annotations

import importlib.util
import io
import json
import random
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("heldout_verify_recipes4", Path(__file__).with_name("recipes4.py"))
assert _spec is not None and _spec.loader is not None
fourth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fourth)

_rng = fourth._rng

_WORDS = ["the", "food", "was", "great", "service", "slow", "battery", "life", "screen", "price", "good", "bad",
          "phone", "staff", "menu", "and", "but", "very", "not", "really", "table", "wine", "keyboard", "movie"]


def _image(rng: Any, size: int, mode: str = "RGB", classes: int = 0) -> Any:
    """A random PIL image: noise in ``mode``, or a label map of blocks of values below ``classes``."""
    import numpy as np
    from PIL import Image

    if classes:
        block = max(1, size // 4)
        small = rng.integers(0, classes, (size // block + 1, size // block + 1), dtype=np.uint8)
        return Image.fromarray(np.kron(small, np.ones((block, block), np.uint8))[:size, :size], "L")
    shape = (size, size, 3) if mode == "RGB" else (size, size)
    return Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode)


def _image_dirs(cwd: Path, spec: dict[str, Any]) -> None:
    """For each of ``dirs`` (``{dir, count, size, ext, mode, classes}``): ``count`` random images
    ``<dir>/<n>.<ext>`` (RGB noise; grey with ``mode = "L"``; a label map of blocks of values below ``classes``
    when given): unpaired image-to-image folders (trainA, trainB), one folder per domain."""
    rng = _rng(spec)
    for entry in spec["dirs"]:
        d = cwd / entry["dir"]
        d.mkdir(parents=True, exist_ok=True)
        for i in range(int(entry.get("count", 4))):
            img = _image(rng, int(entry.get("size", 64)), entry.get("mode", "RGB"), int(entry.get("classes", 0)))
            img.save(d / f"{entry.get('prefix', '')}{i:04d}.{entry.get('ext', 'png')}")


def _git_repo(cwd: Path, spec: dict[str, Any]) -> None:
    """Makes the program's folder a git repository with one empty commit, as the clone it runs from would be (a
    program that records its checkout's commit hash in what it saves)."""
    git = ["git", "-c", "user.name=heldout", "-c", "user.email=heldout@localhost", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=cwd, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "snapshot"], cwd=cwd, check=True)


def _boxes(rng: Any, size: int, count: int) -> list[tuple[int, int, int, int]]:
    out = []
    for _ in range(count):
        x1, y1 = (int(v) for v in rng.integers(1, size // 2, 2))
        w, h = (int(v) for v in rng.integers(size // 8, size // 2, 2))
        out.append((x1, y1, min(size - 1, x1 + w), min(size - 1, y1 + h)))
    return out


def _coco_detection(cwd: Path, spec: dict[str, Any]) -> None:
    """``root``/<set>/*.jpg and ``root``/annotations/instances_<set>.json for each of ``sets``: ``count`` random
    images with 1 to 3 boxes of categories 1..``classes`` each (COCO's detection layout, read with
    pycocotools)."""
    rng = _rng(spec)
    root = cwd / spec.get("root", "datasets/coco")
    size, classes = int(spec.get("size", 128)), int(spec.get("classes", 3))
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    ann_id = 0
    for name, count in spec.get("sets", {"train2017": 8, "val2017": 4}).items():
        (root / name).mkdir(parents=True, exist_ok=True)
        images, anns = [], []
        for i in range(int(count)):
            fname = f"{i + 1:012d}.jpg"
            _image(rng, size).save(root / name / fname)
            images.append({"id": i + 1, "file_name": fname, "width": size, "height": size})
            for x1, y1, x2, y2 in _boxes(rng, size, int(rng.integers(1, 4))):
                ann_id += 1
                anns.append({"id": ann_id, "image_id": i + 1, "category_id": int(rng.integers(1, classes + 1)),
                             "bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": 0})
        cats = [{"id": c, "name": f"c{c}", "supercategory": "shape"} for c in range(1, classes + 1)]
        (root / "annotations" / f"instances_{name}.json").write_text(
            json.dumps({"images": images, "annotations": anns, "categories": cats}))


def _cityscapes(cwd: Path, spec: dict[str, Any]) -> None:
    """``root``/leftImg8bit/{train,val}/<city>/<name>_leftImg8bit.png and gtFine/{train,val}/<city>/
    <name>_gtFine_labelIds.png: ``train`` and ``val`` random RGB images with label maps of Cityscapes' label ids
    (0-33), Cityscapes' layout."""
    rng = _rng(spec)
    root = cwd / spec.get("root", "datasets/citys")
    size = int(spec.get("size", 96))
    for split in ("train", "val"):
        img_dir, gt_dir = root / "leftImg8bit" / split / "synth", root / "gtFine" / split / "synth"
        img_dir.mkdir(parents=True, exist_ok=True)
        gt_dir.mkdir(parents=True, exist_ok=True)
        for i in range(int(spec.get(split, 4))):
            name = f"synth_{i:06d}_000019"
            _image(rng, size).save(img_dir / f"{name}_leftImg8bit.png")
            _image(rng, size, classes=34).save(gt_dir / f"{name}_gtFine_labelIds.png")


def _image_lmdb(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: an LMDB of ``count`` random ``size`` x ``size`` PNGs under keys ``<size>-<index:05d>`` and the
    count under ``length`` (the FFHQ layout of rosinality's prepare_data.py, which DDIM reads)."""
    import lmdb

    rng = _rng(spec)
    p = cwd / spec["path"]
    p.mkdir(parents=True, exist_ok=True)
    size, count = int(spec.get("size", 16)), int(spec.get("count", 16))
    env = lmdb.open(str(p), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i in range(count):
            buf = io.BytesIO()
            _image(rng, size).save(buf, format="png")
            txn.put(f"{size}-{str(i).zfill(5)}".encode(), buf.getvalue())
        txn.put(b"length", str(count).encode())
    env.close()


def _audioset_h5(cwd: Path, spec: dict[str, Any]) -> None:
    """``workspace``/hdf5s/waveforms/synth.h5 (``clips`` random int16 clips of ``seconds`` at ``rate`` Hz, names
    and multi-hot targets over ``classes`` labels) and hdf5s/indexes/balanced_train.h5, full_train.h5 and eval.h5
    pointing into it (the layout of audioset_tagging_cnn's pack_waveforms_to_hdf5 and create_indexes)."""
    import h5py
    import numpy as np

    rng = _rng(spec)
    ws = cwd / spec.get("workspace", "workspace")
    (ws / "hdf5s" / "waveforms").mkdir(parents=True, exist_ok=True)
    (ws / "hdf5s" / "indexes").mkdir(parents=True, exist_ok=True)
    n, classes = int(spec.get("clips", 16)), int(spec.get("classes", 527))
    samples = int(spec.get("rate", 32000) * spec.get("seconds", 10))
    names = np.array([f"Y{k:011d}.wav".encode() for k in range(n)], dtype="S20")
    target = np.zeros((n, classes), dtype=bool)
    for k in range(n):
        target[k, rng.integers(0, classes, 2)] = True
    # every class has a clip: the class-balanced sampler draws from each
    target[np.arange(classes) % n, np.arange(classes)] = True
    wave = ws / "hdf5s" / "waveforms" / "synth.h5"
    with h5py.File(wave, "w") as hf:
        hf.create_dataset("audio_name", data=names)
        hf.create_dataset("waveform", data=(rng.standard_normal((n, samples)) * 3000).astype(np.int16))
        hf.create_dataset("target", data=target)
        hf.attrs.create("sample_rate", data=int(spec.get("rate", 32000)), dtype=np.int32)
    for index in ("balanced_train", "full_train", "eval"):
        with h5py.File(ws / "hdf5s" / "indexes" / f"{index}.h5", "w") as hf:
            hf.create_dataset("audio_name", data=names)
            hf.create_dataset("target", data=target)
            hf.create_dataset("hdf5_path", data=np.array([str(wave).encode()] * n, dtype="S200"))
            hf.create_dataset("index_in_hdf5", data=np.arange(n, dtype=np.int32))


def _session_clicks(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/``train`` and ``valid``: CSVs ``SessionID,ItemID,Time`` of ``sessions`` sessions of 2 to 8 clicks
    on ``items`` items (GRU4REC's preprocessed RecSys Challenge 2015 layout; validation items seen in training)."""
    r = random.Random(int(spec.get("seed", 0)))
    d = cwd / spec.get("dir", "data")
    d.mkdir(parents=True, exist_ok=True)
    items = int(spec.get("items", 50))
    t = 1.0e9
    for name, count in ((spec.get("train", "train.txt"), int(spec.get("sessions", 60))),
                        (spec.get("valid", "valid.txt"), int(spec.get("sessions", 60)) // 3)):
        rows = ["SessionID,ItemID,Time"]
        for s in range(count):
            for _ in range(r.randint(2, 8)):
                t += r.randint(1, 100)
                rows.append(f"{s + 1},{r.randint(1, items)},{t}")
        (d / name).write_text("\n".join(rows) + "\n")


def _conll_ner(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/train.txt, dev.txt and test.txt: CoNLL-2003-style lines ``<word> <tag>`` (BIO tags of PER, ORG, LOC
    and MISC spans of one to three words), sentences separated by blank lines; the training file starts with a
    sentence per type and span length, so that every tag of the other files (in IOBES, as the loader converts
    them) occurs in training."""
    r = random.Random(int(spec.get("seed", 0)))
    d = cwd / spec.get("dir", "data/synth")
    d.mkdir(parents=True, exist_ok=True)
    types = ["PER", "ORG", "LOC", "MISC"]

    def sentence(kind: str | None = None, length: int | None = None) -> list[str]:
        out = [f"{r.choice(_WORDS)} O" for _ in range(r.randint(2, 6))]
        kind = kind or r.choice(types + [""])
        if kind:
            span = length or r.randint(1, 3)
            at = r.randint(0, len(out))
            out[at:at] = [f"W{r.randint(0, 40)} {'B' if k == 0 else 'I'}-{kind}" for k in range(span)]
        return out

    for name in ("train", "dev", "test"):
        sents = [sentence(t, n) for t in types for n in (1, 2, 3)] if name == "train" else []
        sents += [sentence() for _ in range(int(spec.get(name, 30)))]
        (d / f"{name}.txt").write_text("".join("\n".join(s) + "\n\n" for s in sents))


def _h5_volumes(cwd: Path, spec: dict[str, Any]) -> None:
    """For each of ``paths``: an HDF5 file with a ``raw`` float32 volume of ``shape`` and a ``label`` volume of
    blocks of classes below ``classes`` (pytorch-3dunet's StandardHDF5Dataset layout)."""
    import h5py
    import numpy as np

    rng = _rng(spec)
    shape = tuple(int(v) for v in spec.get("shape", [24, 48, 48]))
    classes = int(spec.get("classes", 3))
    for path in spec["paths"]:
        p = cwd / path
        p.parent.mkdir(parents=True, exist_ok=True)
        small = rng.integers(0, classes, tuple(n // 8 + 1 for n in shape))
        label = np.kron(small, np.ones((8, 8, 8), dtype=small.dtype))[: shape[0], : shape[1], : shape[2]]
        with h5py.File(p, "w") as f:
            f.create_dataset("raw", data=(label + rng.standard_normal(shape)).astype(np.float32))
            f.create_dataset("label", data=label.astype(np.int64))


def _relation_jsonl(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/synth_{train,val,test}.txt: JSON lines of relation instances (tokens, a head and a tail entity
    with name, id and token span, a relation among ``relations``), synth_rel2id.json, and the 50-dimensional
    GloVe files OpenNRE's examples load (pretrain/glove/glove.6B.50d_word2id.json and _mat.npy, random vectors);
    the instances repeat entity pairs so that bags form."""
    import numpy as np

    r = random.Random(int(spec.get("seed", 0)))
    d = cwd / spec.get("dir", "benchmark/synth")
    d.mkdir(parents=True, exist_ok=True)
    rels = ["NA"] + [f"/rel/r{k}" for k in range(int(spec.get("relations", 4)) - 1)]
    ents = [f"e{k}" for k in range(12)]
    for name in ("train", "val", "test"):
        lines = []
        for _ in range(int(spec.get(name, 64))):
            toks = [r.choice(_WORDS) for _ in range(r.randint(6, 16))]
            hi, ti = r.sample(range(len(toks)), 2)
            h, t = r.sample(ents, 2)
            toks[hi], toks[ti] = h, t
            lines.append(json.dumps({"token": toks, "h": {"name": h, "id": h, "pos": [hi, hi + 1]},
                                     "t": {"name": t, "id": t, "pos": [ti, ti + 1]},
                                     "relation": rels[(int(h[1:]) + int(t[1:])) % len(rels)]}))
        (d / f"synth_{name}.txt").write_text("\n".join(lines) + "\n")
    (d / "synth_rel2id.json").write_text(json.dumps({k: i for i, k in enumerate(rels)}))
    g = cwd / "pretrain" / "glove"
    g.mkdir(parents=True, exist_ok=True)
    vocab = _WORDS + ents
    (g / "glove.6B.50d_word2id.json").write_text(json.dumps({w: i for i, w in enumerate(vocab)}))
    np.save(g / "glove.6B.50d_mat.npy", _rng(spec).standard_normal((len(vocab), 50)).astype(np.float32))


def _ppi_graphs(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/{train,valid,test}_graph.json (NetworkX node-link data), _feats.npy (50 features a node),
    _labels.npy (121 multi-hot labels) and _graph_id.npy: ``graphs`` random graphs a split (the PPI layout of
    GraphSAGE's data that pytorch-GAT reads)."""
    import networkx as nx
    import numpy as np
    from networkx.readwrite import json_graph

    rng = _rng(spec)
    d = cwd / spec.get("dir", "data/ppi")
    d.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", int(spec.get("graphs", 2))), ("valid", 1), ("test", 1)):
        g, ids, offset = nx.Graph(), [], 0
        for gid in range(1, count + 1):
            n = int(spec.get("nodes", 40))
            sub = nx.gnm_random_graph(n, 3 * n, seed=int(rng.integers(1 << 30)))
            g.add_nodes_from(offset + v for v in sub.nodes)
            g.add_edges_from((offset + a, offset + b) for a, b in sub.edges)
            g.add_edges_from((offset + v, offset + v) for v in sub.nodes)
            ids += [gid] * n
            offset += n
        (d / f"{split}_graph.json").write_text(json.dumps(json_graph.node_link_data(g)))
        np.save(d / f"{split}_feats.npy", rng.standard_normal((offset, 50)).astype(np.float32))
        np.save(d / f"{split}_labels.npy", (rng.random((offset, 121)) < 0.3).astype(np.float32))
        np.save(d / f"{split}_graph_id.npy", np.array(ids))


RECIPES: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    **fourth.RECIPES, "image_dirs": _image_dirs, "git_repo": _git_repo, "coco_detection": _coco_detection,
    "image_lmdb": _image_lmdb, "cityscapes": _cityscapes, "audioset_h5": _audioset_h5,
    "session_clicks": _session_clicks, "conll_ner": _conll_ner, "h5_volumes": _h5_volumes,
    "relation_jsonl": _relation_jsonl, "ppi_graphs": _ppi_graphs}


def register(base: dict[str, Callable[[Path, dict[str, Any]], None]]) -> None:
    """Add these recipes (and the first four sets') to the rehearsal corpus's table (``base``), which ``many``
    then draws on too."""
    fourth.register(base)
    fourth.third.second.first.RECIPES.update(RECIPES)
    base.update(RECIPES)
