"""Synthetic data recipes of the third held-out verify set (bench/heldout_verify/programs3.toml), beside the first
and second sets' (recipes.py, recipes2.py, whose recipes this module offers too) and the rehearsal corpus's
(bench/rehearsal_corpus.py RECIPES). Each writes small random data where a program reads its data set, in the layout
the program's own loader expects. Nothing is downloaded; no file of the programs is copied.
"""

from __future__ import annotations

import importlib.util
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("heldout_verify_recipes2", Path(__file__).with_name("recipes2.py"))
assert _spec is not None and _spec.loader is not None
second = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(second)

_rng = second.first._rng


def _session_pickles(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/train.txt and test.txt: pickles of ``(sessions, targets)``, ``count`` click sessions of 1 to 6 item ids
    in 1..``items``-1 and the next item of each (SR-GNN's preprocessed session data)."""
    rng = _rng(spec)
    d = cwd / spec.get("dir", "datasets/sample")
    d.mkdir(parents=True, exist_ok=True)
    items = int(spec.get("items", 310))
    for name, n in (("train.txt", int(spec.get("count", 200))), ("test.txt", int(spec.get("test", 60)))):
        seqs = [[int(i) for i in rng.integers(1, items, int(rng.integers(1, 7)))] for _ in range(n)]
        targets = [int(i) for i in rng.integers(1, items, n)]
        with open(d / name, "wb") as f:
            pickle.dump((seqs, targets), f)


def _implicit_csv(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/unique_sid.txt, train.csv, validation_tr.csv, validation_te.csv, test_tr.csv and test_te.csv (columns
    uid,sid): ``users`` training users, ``heldout`` validation and test users each, 3 to 12 clicks of ``items`` items
    (the pro_sg layout that Mult-VAE's preprocessing writes from MovieLens)."""
    rng = _rng(spec)
    d = cwd / spec.get("dir", "data/pro_sg")
    d.mkdir(parents=True, exist_ok=True)
    items, users, held = int(spec.get("items", 100)), int(spec.get("users", 64)), int(spec.get("heldout", 16))
    (d / "unique_sid.txt").write_text("".join(f"{i}\n" for i in range(items)))

    def rows(first: int, n: int) -> list[tuple[int, int]]:
        return [(u, int(s)) for u in range(first, first + n)
                for s in rng.permutation(items)[: int(rng.integers(3, 13))]]

    def write(name: str, pairs: list[tuple[int, int]]) -> None:
        (d / name).write_text("uid,sid\n" + "".join(f"{u},{s}\n" for u, s in pairs))

    write("train.csv", rows(0, users))
    for k, split in enumerate(("validation", "test")):
        pairs = rows(users + k * held, held)
        write(f"{split}_tr.csv", [p for i, p in enumerate(pairs) if i % 4])
        write(f"{split}_te.csv", [p for i, p in enumerate(pairs) if not i % 4])


def _dialogue_pickle(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: a pickle of ``count`` token-id lists ``[CLS] u1 [SEP] u2 [SEP] ...`` (ids ``cls``/``sep``, words
    from ``low``..``vocab``-1): the preprocessed dialogues of GPT2-chitchat's data/train.pkl."""
    rng = _rng(spec)
    p = cwd / spec.get("path", "data/train.pkl")
    p.parent.mkdir(parents=True, exist_ok=True)
    cls, sep, low, vocab = (int(spec.get(k, v)) for k, v in (("cls", 101), ("sep", 102), ("low", 672),
                                                              ("vocab", 13317)))
    out = []
    for _ in range(int(spec.get("count", 32))):
        ids = [cls]
        for _ in range(int(rng.integers(2, 4))):
            ids += [int(i) for i in rng.integers(low, vocab, int(rng.integers(3, 10)))] + [sep]
        out.append(ids)
    with open(p, "wb") as f:
        pickle.dump(out, f)


def _speaker_mels(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/train.pkl (a list of ``[speaker, embedding, <speaker>/<n>.npy, ...]``) and those .npy files: ``speakers``
    speakers with a random ``emb``-dim embedding and ``count`` random ``frames`` x 80 mel-spectrograms each (the
    layout AutoVC's make_metadata.py writes)."""
    import numpy as np

    rng = _rng(spec)
    d = cwd / spec.get("dir", "spmel")
    meta = []
    for s in range(int(spec.get("speakers", 4))):
        name = f"p{225 + s}"
        (d / name).mkdir(parents=True, exist_ok=True)
        row: list[Any] = [name, rng.standard_normal(int(spec.get("emb", 256))).astype(np.float32)]
        for i in range(int(spec.get("count", 3))):
            np.save(d / name / f"{name}_{i:03d}.npy",
                    rng.random((int(spec.get("frames", 160)), 80)).astype(np.float32))
            row.append(f"{name}/{name}_{i:03d}.npy")
        meta.append(row)
    with open(d / "train.pkl", "wb") as f:
        pickle.dump(meta, f)


def _sr_h5(cwd: Path, spec: dict[str, Any]) -> None:
    """``train`` (an .h5 file with datasets ``lr`` and ``hr`` of ``count`` random ``patch`` x ``patch`` grey patches)
    and ``eval`` (groups ``lr`` and ``hr`` holding one ``size`` x ``size`` image a key "0", "1", ...): the layout of
    the SRCNN/FSRCNN-style prepare.py of super-resolution trainers. With ``scale`` above 1 the low-resolution images
    are the high-resolution ones subsampled by it (FSRCNN, ESPCN), else the same size (SRCNN). With ``rgb`` the
    training file too holds ``count`` ``size`` x ``size`` x 3 images in groups, as does the evaluation file (RDN)."""
    import h5py
    import numpy as np

    rng = _rng(spec)
    patch, size, n = int(spec.get("patch", 33)), int(spec.get("size", 48)), int(spec.get("count", 32))
    k, rgb = int(spec.get("scale", 1)), bool(spec.get("rgb", False))

    def low(hr: Any) -> Any:
        lr = (hr[::k, ::k] if rgb else hr[..., ::k, ::k]) if k > 1 else hr
        return np.clip(lr + rng.normal(0, 8, lr.shape), 0, 255).astype(np.float32)

    def groups(f: Any, count: int) -> None:
        lr, hr = f.create_group("lr"), f.create_group("hr")
        for i in range(count):
            img = rng.integers(0, 256, (size, size, 3) if rgb else (size, size)).astype(np.float32)
            hr.create_dataset(str(i), data=img)
            lr.create_dataset(str(i), data=low(img))

    train = cwd / spec.get("train", "train.h5")
    train.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(train, "w") as f:
        if rgb:
            groups(f, n)
        else:
            hr = rng.integers(0, 256, (n, patch, patch)).astype(np.float32)
            f.create_dataset("hr", data=hr)
            f.create_dataset("lr", data=low(hr))
    with h5py.File(cwd / spec.get("eval", "eval.h5"), "w") as f:
        groups(f, int(spec.get("eval_count", 2)))


def _transitions_npy(cwd: Path, spec: dict[str, Any]) -> None:
    """``prefix``_state.npy, _action.npy, _next_state.npy, _reward.npy, _not_done.npy and _ptr.npy: ``count`` random
    transitions of a ``state``-dim, ``action``-dim task with actions in [-``max_action``, ``max_action``] (the replay
    buffer files that offline RL trainers such as BCQ load)."""
    import numpy as np

    rng = _rng(spec)
    prefix = cwd / spec["prefix"]
    prefix.parent.mkdir(parents=True, exist_ok=True)
    n, sd, ad = int(spec.get("count", 256)), int(spec.get("state", 3)), int(spec.get("action", 1))
    m = float(spec.get("max_action", 2.0))
    arrays = {"state": rng.standard_normal((n, sd)), "action": rng.uniform(-m, m, (n, ad)),
              "next_state": rng.standard_normal((n, sd)), "reward": -rng.random((n, 1)) * 10,
              "not_done": (rng.random((n, 1)) > 0.02).astype(np.float64)}
    for name, a in arrays.items():
        np.save(f"{prefix}_{name}.npy", a)
    np.save(f"{prefix}_ptr.npy", np.array(n))


def _h5_pairs(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: an .h5 file with datasets ``data`` (``count`` random 1 x ``patch`` x ``patch`` inputs in [0, 1]) and
    ``label`` (the same plus noise): the training file of VDSR-style MATLAB-prepared super-resolution data."""
    import h5py
    import numpy as np

    rng = _rng(spec)
    p = cwd / spec.get("path", "data/train.h5")
    p.parent.mkdir(parents=True, exist_ok=True)
    n, patch = int(spec.get("count", 32)), int(spec.get("patch", 41))
    label = rng.random((n, 1, patch, patch)).astype(np.float32)
    with h5py.File(p, "w") as f:
        f.create_dataset("label", data=label)
        f.create_dataset("data", data=np.clip(label + rng.normal(0, 0.05, label.shape), 0, 1).astype(np.float32))


RECIPES: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    **second.RECIPES, "session_pickles": _session_pickles, "implicit_csv": _implicit_csv,
    "dialogue_pickle": _dialogue_pickle, "speaker_mels": _speaker_mels,
    "sr_h5": _sr_h5, "h5_pairs": _h5_pairs,
    "transitions_npy": _transitions_npy}


def register(base: dict[str, Callable[[Path, dict[str, Any]], None]]) -> None:
    """Add these recipes (and the first two sets') to the rehearsal corpus's table (``base``), which ``many`` then
    draws on too."""
    second.register(base)
    second.first.RECIPES.update(RECIPES)
    base.update(RECIPES)
