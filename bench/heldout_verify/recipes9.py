"""Synthetic data recipes of the ninth held-out verify set (bench/heldout_verify/programs9.toml), beside the first
eight sets' (recipes.py to recipes8.py, whose recipes this module offers too) and the rehearsal corpus's
(bench/rehearsal_corpus.py RECIPES). Each writes small random data where a program reads its data set, in the layout
the program's own loader expects. Nothing is downloaded; no file of the programs is copied.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("heldout_verify_recipes8", Path(__file__).with_name("recipes8.py"))
assert _spec is not None and _spec.loader is not None
eighth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(eighth)

_rng = eighth._rng


def _session_tsv(cwd: Path, spec: dict[str, Any]) -> None:
    """For each of ``files`` (``{path, sessions}``): a TAB separated file with the header ``SessionId ItemId Time``
    and, for each of ``sessions`` sessions, 2 to 5 clicks on items 1..``items`` at increasing times: the layout
    GRU4Rec's run.py reads (session ids of later files go on from the earlier ones')."""
    rng = _rng(spec)
    items, sid, t = int(spec.get("items", 40)), 0, 1_400_000_000
    for entry in spec["files"]:
        lines = ["SessionId\tItemId\tTime\n"]
        for _ in range(int(entry["sessions"])):
            sid += 1
            for _ in range(int(rng.integers(2, 6))):
                t += int(rng.integers(1, 60))
                lines.append(f"{sid}\t{int(rng.integers(1, items + 1))}\t{t}\n")
        p = cwd / entry["path"]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("".join(lines))


def _physio_pickle(cwd: Path, spec: dict[str, Any]) -> None:
    """``path`` (default data/physio_missing0.1_seed1.pk): the pickled list ``[values, observed_masks, gt_masks]``,
    each ``[count, 48, 35]``: ``count`` patients' 48 hourly steps of 35 standardised clinical variables (about 20 %
    missing, zeroed) and the ground-truth masks (a further ``missing`` of the observed values held out), the cache
    CSDI's PhysioNet 2012 loader writes from the raw records and reads back instead of them."""
    import pickle

    import numpy as np

    rng = _rng(spec)
    n = int(spec.get("count", 20))
    observed = (rng.random((n, 48, 35)) > 0.2).astype(np.float64)
    values = rng.standard_normal((n, 48, 35)) * observed
    gt = observed * (rng.random((n, 48, 35)) > float(spec.get("missing", 0.1)))
    p = cwd / spec.get("path", "data/physio_missing0.1_seed1.pk")
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "wb") as f:
        pickle.dump([values, observed, gt], f)


def _kaldi_words(cwd: Path, spec: dict[str, Any]) -> None:
    """For each of ``sets`` (``{dir, count}``): ``count`` one-second 16 kHz mono wavs under ``dir``/wav/ (a tone a
    word, and noise) with Kaldi's ``text`` (``<key> <word>``) and ``wav.scp`` (``<key> <wav path>``) beside them, the
    words drawn in turn from ``words``: the Kaldi-style layout of a Speech Commands word classifier's loader."""
    import numpy as np

    rng = _rng(spec)
    rate = 16000
    t = np.arange(rate) / rate
    words = list(spec.get("words", ["yes", "no"]))
    write_wav = eighth.seventh.sixth.fifth.fourth.third.second._write_wav
    for entry in spec["sets"]:
        d = cwd / entry["dir"]
        text, scp = [], []
        for i in range(int(entry["count"])):
            k = i % len(words)
            key = f"spk{i:03d}_{words[k]}"
            wav = d / "wav" / f"{key}.wav"
            write_wav(wav, rate, 0.3 * np.sin(2 * np.pi * (250 + 90 * k) * t) + 0.05 * rng.standard_normal(rate))
            text.append(f"{key} {words[k]}\n")
            scp.append(f"{key} {wav.relative_to(cwd)}\n")
        (d / "text").write_text("".join(text))
        (d / "wav.scp").write_text("".join(scp))


def _idx_digits(cwd: Path, spec: dict[str, Any]) -> None:
    """<``root``>/<``name``>/raw/: the four uncompressed IDX files (random 28x28 images, labels 0-9) under the names
    torchvision's MNIST-family data sets (``name`` MNIST, FashionMNIST, KMNIST) look for before downloading."""
    import numpy as np

    rng = _rng(spec)
    raw = cwd / spec.get("root", "data") / spec.get("name", "FashionMNIST") / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", int(spec.get("train", 64))), ("t10k", int(spec.get("test", 32)))):
        header = np.array([0x803, n, 28, 28], dtype=">i4").tobytes()
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(header + rng.integers(0, 256, n * 784, np.uint8).tobytes())
        header = np.array([0x801, n], dtype=">i4").tobytes()
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(header + rng.integers(0, 10, n, np.uint8).tobytes())


def _traffic_npz(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/train.npz, val.npz and test.npz (``x`` and ``y``: ``[samples, 12, nodes, 2]``, a speed reading with
    daily cycles and the time of day, and ``x_offsets``/``y_offsets``) and ``adj`` (a pickled ``[sensor_ids,
    sensor_id_to_ind, adj_mx]`` of ``nodes`` sensors, a Gaussian-kernel distance matrix): the METR-LA layout that
    DCRNN's generate_training_data.py writes and traffic forecasters (DCRNN, Graph WaveNet, MTGNN) read."""
    import pickle

    import numpy as np

    rng = _rng(spec)
    nodes, steps = int(spec.get("nodes", 8)), int(spec.get("seq", 12))
    d = cwd / spec.get("dir", "data/METR-LA")
    d.mkdir(parents=True, exist_ok=True)
    total = sum(int(v) for v in spec.get("samples", {"train": 24, "val": 8, "test": 8}).values()) + 2 * steps
    t = np.arange(total)
    tod = (t % 288) / 288.0
    speed = 60 + 10 * np.sin(2 * np.pi * tod)[:, None] + rng.normal(0, 2, (total, nodes))
    series = np.stack([speed, np.repeat(tod[:, None], nodes, 1)], -1).astype(np.float32)
    x_off, y_off = np.arange(-steps + 1, 1), np.arange(1, steps + 1)
    start = 0
    for name, n in spec.get("samples", {"train": 24, "val": 8, "test": 8}).items():
        idx = np.arange(start, start + int(n)) + steps - 1
        x = np.stack([series[i + x_off] for i in idx])
        y = np.stack([series[i + y_off] for i in idx])
        np.savez_compressed(d / f"{name}.npz", x=x, y=y, x_offsets=x_off.reshape(-1, 1), y_offsets=y_off.reshape(-1, 1))
        start += int(n)
    pos = rng.uniform(0, 10, (nodes, 2))
    dist = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
    adj = np.exp(-((dist / dist.std()) ** 2)).astype(np.float32)
    adj[adj < 0.1] = 0
    ids = [str(773000 + i) for i in range(nodes)]
    a = cwd / spec.get("adj", "data/sensor_graph/adj_mx.pkl")
    a.parent.mkdir(parents=True, exist_ok=True)
    with open(a, "wb") as f:
        pickle.dump([ids, {s: i for i, s in enumerate(ids)}, adj], f, protocol=2)


def _series_txt(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: ``rows`` lines of ``cols`` comma-separated non-negative readings (daily cycles and noise), the
    layout of the solar-energy, traffic and electricity files LSTNet-style single-step forecasters read."""
    import numpy as np

    rng = _rng(spec)
    rows, cols = int(spec.get("rows", 400)), int(spec.get("cols", 8))
    t = np.arange(rows)[:, None]
    x = 5 + 4 * np.sin(2 * np.pi * t / 24 + rng.uniform(0, 6, cols)) + rng.normal(0, 0.5, (rows, cols))
    x = np.clip(x, 0, None)
    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(p, x, delimiter=",", fmt="%.4f")


RECIPES: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    **eighth.RECIPES, "session_tsv": _session_tsv, "physio_pickle": _physio_pickle, "kaldi_words": _kaldi_words,
    "idx_digits": _idx_digits, "traffic_npz": _traffic_npz, "series_txt": _series_txt}


def register(base: dict[str, Callable[[Path, dict[str, Any]], None]]) -> None:
    """Add these recipes (and the first eight sets') to the rehearsal corpus's table (``base``), which ``many``
    then draws on too."""
    eighth.register(base)
    eighth.seventh.sixth.fifth.fourth.third.second.first.RECIPES.update(RECIPES)
    base.update(RECIPES)
