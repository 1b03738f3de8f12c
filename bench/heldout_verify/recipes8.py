"""Synthetic data recipes of the eighth held-out verify set (bench/heldout_verify/programs8.toml), beside the first
seven sets' (recipes.py to recipes7.py, whose recipes this module offers too) and the rehearsal corpus's
(bench/rehearsal_corpus.py RECIPES). Each writes small random data where a program reads its data set, in the layout
the program's own loader expects. Nothing is downloaded; no file of the programs is copied.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("heldout_verify_recipes7", Path(__file__).with_name("recipes7.py"))
assert _spec is not None and _spec.loader is not None
seventh = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(seventh)

_rng = seventh._rng


def _target_csv(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: a CSV of ``rows`` time steps with ``cols`` numeric driving series (columns s0, s1, ...) and the
    target series ``target`` (default NDX, a noisy weighted sum of the others): the layout of the NASDAQ 100 data set
    a dual-stage attention RNN reads, every column but the target being an input."""
    import numpy as np

    rng = _rng(spec)
    rows, cols = int(spec.get("rows", 200)), int(spec.get("cols", 8))
    t = np.arange(rows, dtype=np.float64)[:, None]
    x = 100 + 10 * np.sin(t / rng.uniform(5, 30, cols) + rng.uniform(0, 6, cols)) + rng.normal(0, 1, (rows, cols))
    y = x @ rng.uniform(0.5, 1.5, cols) / cols + rng.normal(0, 0.5, rows)
    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    header = ",".join([f"s{i}" for i in range(cols)] + [spec.get("target", "NDX")])
    rows_text = "".join(",".join(f"{v:.4f}" for v in (*row, yv)) + "\n" for row, yv in zip(x, y, strict=True))
    p.write_text(header + "\n" + rows_text)


def _ratings_tsv(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: MovieLens-100K's u.data layout, ``<user>\\t<item>\\t<rating>\\t<timestamp>`` lines: ``users`` users
    (ids from 1), each rating ``per_user`` distinct items of ``items`` (ratings 1 to 5, increasing timestamps)."""
    rng = _rng(spec)
    users, items, per = int(spec.get("users", 40)), int(spec.get("items", 60)), int(spec.get("per_user", 15))
    lines = []
    for u in range(1, users + 1):
        for k, i in enumerate(rng.choice(items, size=min(per, items), replace=False)):
            lines.append(f"{u}\t{int(i) + 1}\t{int(rng.integers(1, 6))}\t{874965478 + 1000 * u + k}\n")
    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(lines))


def _item_neighbours(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/adj_``sample``.pkl and num_``sample``.pkl: pickled lists indexed by item id (0..``items``-1) of up to
    ``sample`` neighbouring items and their co-occurrence counts (most frequent first), the global item graph a
    GCE-GNN-style session recommender's build_graph.py writes beside SR-GNN's train.txt and test.txt."""
    import pickle

    import numpy as np

    rng = _rng(spec)
    d = cwd / spec.get("dir", "datasets/sample")
    d.mkdir(parents=True, exist_ok=True)
    items, sample = int(spec.get("items", 310)), int(spec.get("sample", 12))
    adj, num = [[] for _ in range(items)], [[] for _ in range(items)]
    for i in range(1, items):
        k = int(rng.integers(1, sample + 1))
        adj[i] = [int(j) for j in rng.choice(np.arange(1, items), size=k, replace=False)]
        num[i] = sorted((int(c) for c in rng.integers(1, 10, k)), reverse=True)
    with open(d / f"adj_{sample}.pkl", "wb") as f:
        pickle.dump(adj, f)
    with open(d / f"num_{sample}.pkl", "wb") as f:
        pickle.dump(num, f)


def _bert_dir(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/vocab.txt (BERT's special tokens and ``chars`` CJK characters from U+4E00, one a line),
    bert_config.json (a BERT of ``layers`` layers, ``hidden`` wide, ``heads`` heads, over that vocabulary) and
    pytorch_model.bin (an empty state dict, so that every weight keeps its random initialisation): the folder a
    BERT fine-tuning program loads its "pretrained" model and tokenizer from, with no weights downloaded."""
    import json

    import torch

    d = cwd / spec.get("dir", "bert_pretrain")
    d.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += [chr(c) for c in range(0x4E00, 0x4E00 + int(spec.get("chars", 100)))]
    d.joinpath("vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    hidden = int(spec.get("hidden", 768))
    config = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
              "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": int(spec.get("ffn", 4 * hidden)),
              "max_position_embeddings": 128, "num_attention_heads": int(spec.get("heads", 12)),
              "num_hidden_layers": int(spec.get("layers", 1)), "type_vocab_size": 2, "vocab_size": len(vocab)}
    d.joinpath("bert_config.json").write_text(json.dumps(config, indent=2) + "\n")
    torch.save({}, d / "pytorch_model.bin")


def _gtzan_h5(cwd: Path, spec: dict[str, Any]) -> None:
    """``workspace``/features/waveform.h5: ``clips`` int16 waveforms of ``seconds`` at ``rate`` Hz (a tone and
    noise), their names, one-hot ``target`` over ``classes`` genres and a ``fold`` (1 to 10, every fold of
    ``folds`` used): the packed GTZAN layout PANNs' transfer-learning scripts read."""
    import h5py
    import numpy as np

    rng = _rng(spec)
    n, classes = int(spec.get("clips", 8)), int(spec.get("classes", 10))
    samples = int(float(spec.get("seconds", 30)) * int(spec.get("rate", 32000)))
    d = cwd / spec.get("workspace", "workspace") / "features"
    d.mkdir(parents=True, exist_ok=True)
    t = np.arange(samples) / int(spec.get("rate", 32000))
    labels = rng.integers(0, classes, n)
    with h5py.File(d / "waveform.h5", "w") as hf:
        hf.create_dataset("audio_name", data=np.array([f"synth.{i:05d}.wav".encode() for i in range(n)], dtype="S20"))
        wave = np.stack([0.3 * np.sin(2 * np.pi * (110 * (1 + int(k))) * t) + 0.05 * rng.standard_normal(samples)
                         for k in labels])
        hf.create_dataset("waveform", data=(np.clip(wave, -1, 1) * 32767).astype(np.int16))
        hf.create_dataset("target", data=np.eye(classes, dtype=np.float32)[labels])
        hf.create_dataset("fold", data=(np.arange(n) % int(spec.get("folds", 2)) + 1).astype(np.int32))


def _ett_csv(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: ``rows`` hourly rows (from 2016-07-01, or every ``minutes`` minutes) of the Electricity Transformer
    Temperature layout: ``date``, six load series HUFL, HULL, MUFL, MULL, LUFL, LULL and the oil temperature OT
    (noisy daily and weekly cycles). ETTh loaders cut fixed borders (12 + 4 + 4 months of hours), so ``rows``
    defaults to 14,400."""
    import numpy as np
    import pandas as pd

    rng = _rng(spec)
    n = int(spec.get("rows", 14400))
    dates = pd.date_range("2016-07-01", periods=n, freq=f"{int(spec.get('minutes', 60))}min")
    t = np.arange(n)
    cols = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]
    data = {c: 5 + 2 * np.sin(2 * np.pi * t / 24 + i) + np.sin(2 * np.pi * t / 168) + 0.3 * rng.standard_normal(n)
            for i, c in enumerate(cols)}
    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"date": dates.strftime("%Y-%m-%d %H:%M:%S"), **data}).to_csv(p, index=False, float_format="%.4f")


def _voxceleb_wavs(cwd: Path, spec: dict[str, Any]) -> None:
    """For each of ``sets`` (``{dir, speakers, utts, trials}``): ``dir``/id1NNNN/<video>/0000n.wav, ``utts`` 16 kHz
    mono wavs of ``seconds`` (a tone a speaker, and noise) for each of ``speakers`` speakers, VoxCeleb's layout; where
    ``trials`` names a file, a verification trial list beside it (``<1|0> <utt> <utt>`` lines over that set's
    utterances, target and non-target pairs alternating), as VoxCeleb's veri_test.txt is."""
    import numpy as np

    rng = _rng(spec)
    rate, seconds = 16000, float(spec.get("seconds", 2.0))
    t = np.arange(int(rate * seconds)) / rate
    for entry in spec["sets"]:
        d = cwd / entry["dir"]
        utts: dict[str, list[str]] = {}
        for s in range(int(entry.get("speakers", 2))):
            spk = f"id1{s:04d}"
            for u in range(int(entry.get("utts", 2))):
                rel = f"{spk}/vid{u % 2:02d}/{u + 1:05d}.wav"
                wave = 0.3 * np.sin(2 * np.pi * (150 + 40 * s) * t) + 0.05 * rng.standard_normal(t.size)
                (d / rel).parent.mkdir(parents=True, exist_ok=True)
                seventh.sixth.fifth.fourth.third.second._write_wav(d / rel, rate, wave)
                utts.setdefault(spk, []).append(rel)
        if entry.get("trials"):
            spks, lines = sorted(utts), []
            for i in range(int(entry.get("count", 6))):
                a = spks[i % len(spks)]
                if i % 2 == 0:
                    lines.append(f"1 {utts[a][0]} {utts[a][-1]}\n")
                else:
                    lines.append(f"0 {utts[a][0]} {utts[spks[(i + 1) % len(spks)]][0]}\n")
            (cwd / entry["trials"]).write_text("".join(lines))


RECIPES: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    **seventh.RECIPES, "target_csv": _target_csv, "ratings_tsv": _ratings_tsv, "item_neighbours": _item_neighbours,
    "bert_dir": _bert_dir, "gtzan_h5": _gtzan_h5, "ett_csv": _ett_csv, "voxceleb_wavs": _voxceleb_wavs}


def register(base: dict[str, Callable[[Path, dict[str, Any]], None]]) -> None:
    """Add these recipes (and the first seven sets') to the rehearsal corpus's table (``base``), which ``many``
    then draws on too."""
    seventh.register(base)
    seventh.sixth.fifth.fourth.third.second.first.RECIPES.update(RECIPES)
    base.update(RECIPES)
