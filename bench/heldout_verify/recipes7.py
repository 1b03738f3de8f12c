"""Synthetic data recipes of the seventh held-out verify set (bench/heldout_verify/programs7.toml), beside the first
six sets' (recipes.py to recipes6.py, whose recipes this module offers too) and the rehearsal corpus's
(bench/rehearsal_corpus.py RECIPES). Each writes small random data where a program reads its data set, in the layout
the program's own loader expects. Nothing is downloaded; no file of the programs is copied.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("heldout_verify_recipes6", Path(__file__).with_name("recipes6.py"))
assert _spec is not None and _spec.loader is not None
sixth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sixth)

_rng = sixth._rng
_image = sixth.fifth._image


def _numbered_masks(cwd: Path, spec: dict[str, Any]) -> None:
    """``root``/<nnn>.png and ``root``/<nnn>_mask.png for n below ``count``: random RGB images ``size`` pixels square
    and two-valued grey masks (0 and 255) of a random block, together in one folder (the layout of a liver CT
    segmentation set's train and val folders)."""
    import numpy as np
    from PIL import Image

    rng = _rng(spec)
    size = int(spec.get("size", 64))
    d = cwd / spec["root"]
    d.mkdir(parents=True, exist_ok=True)
    for i in range(int(spec.get("count", 4))):
        _image(rng, size).save(d / f"{i:03d}.png")
        mask = np.zeros((size, size), np.uint8)
        x, y = (int(v) for v in rng.integers(0, size // 2, 2))
        mask[y:y + size // 3, x:x + size // 3] = 255
        Image.fromarray(mask, "L").save(d / f"{i:03d}_mask.png")


def _patched_copy(cwd: Path, spec: dict[str, Any]) -> None:
    """``dst``: the program's own ``src`` (a Python hyperparameter file in its folder) with assignments appended that
    override some of its values (``set``: name to a Python expression), as a user's copy for a small run would be."""
    text = (cwd / spec["src"]).read_text()
    lines = [f"{name} = {value}" for name, value in spec.get("set", {}).items()]
    (cwd / spec["dst"]).write_text(text + "\n# a small run's overrides\n" + "\n".join(lines) + "\n")


def _mel_quant_data(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/mel/<id>.npy (``mels`` x frames float32 log-mel-like values in [0, 1]), quant/<id>.npy (int64 labels
    below 2 ** ``bits``, ``hop`` samples a frame), dataset.pkl (``[(id, frames), ...]``) and text_dict.pkl (``{id:
    sentence}``): ``count`` utterances of 20 to 40 frames, the layout WaveRNN's preprocess.py writes."""
    import pickle

    import numpy as np

    rng = _rng(spec)
    d = cwd / spec.get("dir", "data")
    (d / "mel").mkdir(parents=True, exist_ok=True)
    (d / "quant").mkdir(parents=True, exist_ok=True)
    mels, hop, bits = int(spec.get("mels", 80)), int(spec.get("hop", 275)), int(spec.get("bits", 16))
    words = sixth.fifth._WORDS
    dataset, texts = [], {}
    for i in range(int(spec.get("count", 6))):
        uid, frames = f"LJ{i:03d}-{i:04d}", int(rng.integers(20, 41))
        np.save(d / "mel" / f"{uid}.npy", rng.random((mels, frames), dtype=np.float32), allow_pickle=False)
        np.save(d / "quant" / f"{uid}.npy", rng.integers(0, 2 ** bits, frames * hop, dtype=np.int64),
                allow_pickle=False)
        dataset.append((uid, frames))
        texts[uid] = " ".join(words[int(j)] for j in rng.integers(0, len(words), 6)) + "."
    with open(d / "dataset.pkl", "wb") as f:
        pickle.dump(dataset, f)
    with open(d / "text_dict.pkl", "wb") as f:
        pickle.dump(texts, f)


def _mcep_speakers(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/train/<speaker>_<n>.npy and ``dir``/test/<speaker>_<n>.npy: ``count`` random mel-cepstra a speaker
    (``frames`` x ``dims`` float32, longer than the 256 frames a training clip takes) for each of ``speakers``
    (VCTK ids), and ``dir``/train/<speaker>_stats.npz (log-F0 and cepstrum means and deviations): the features
    StarGAN-VC's preprocess.py writes; with ``wav_dir``, <wav_dir>/<speaker>/<speaker>_<n>.wav too (one second of
    16 kHz noise for each test clip of the first speaker, the source utterances it converts)."""
    import numpy as np

    rng = _rng(spec)
    frames, dims = int(spec.get("frames", 300)), int(spec.get("dims", 36))
    for split in ("train", "test"):
        d = cwd / spec.get("dir", "data/mc") / split
        d.mkdir(parents=True, exist_ok=True)
        for spk in spec["speakers"]:
            for i in range(int(spec.get("count", 2))):
                np.save(d / f"{spk}_{i:03d}.npy", rng.standard_normal((frames, dims)).astype(np.float32))
            if split == "train":
                np.savez(d / f"{spk}_stats.npz", log_f0s_mean=np.float64(5.0), log_f0s_std=np.float64(0.3),
                         coded_sps_mean=np.zeros(dims), coded_sps_std=np.ones(dims))
    if spec.get("wav_dir"):
        spk = spec["speakers"][0]
        for i in range(int(spec.get("count", 2))):
            sixth.fifth.fourth.third.second._write_wav(cwd / spec["wav_dir"] / spk / f"{spk}_{i:03d}.wav", 16000,
                                                       0.1 * rng.standard_normal(16000))


def _noisy_clean_lists(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/<split>/{noisy,clean}/<n>.wav (``seconds`` of 16 kHz mono: a tone, and the tone with noise) and
    ``dir``/<split>.txt listing ``<noisy path> <clean path>`` a line, for each of ``splits`` (``{split: count}``):
    the list files of a speech-enhancement set (VoiceBank-DEMAND's noisy and clean pairs)."""
    import numpy as np

    rng = _rng(spec)
    root = spec.get("dir", "data")
    rate = int(spec.get("rate", 16000))
    n = int(float(spec.get("seconds", 1.0)) * rate)
    t = np.arange(n) / rate
    for split, count in spec.get("splits", {"train": 4, "test": 2}).items():
        lines = []
        for i in range(int(count)):
            clean = 0.3 * np.sin(2 * np.pi * float(rng.uniform(150, 400)) * t)
            noisy = clean + 0.05 * rng.standard_normal(n)
            paths = [f"{root}/{split}/{kind}/{i:03d}.wav" for kind in ("noisy", "clean")]
            for path, samples in zip(paths, (noisy, clean), strict=True):
                sixth.fifth.fourth.third.second._write_wav(cwd / path, rate, samples)
            lines.append(" ".join(paths))
        (cwd / root / f"{split}.txt").write_text("\n".join(lines) + "\n")


def _librispeech_flac(cwd: Path, spec: dict[str, Any]) -> None:
    """``root``/<split>/<speaker>/<chapter>/<speaker>-<chapter>-<n>.flac (1 to 1.5 s of 16 kHz noise and a tone) and
    <speaker>-<chapter>.trans.txt (``<utterance id>`` and ``words`` upper-case words a line), ``count`` utterances for
    each of ``splits``: LibriSpeech's layout."""
    import numpy as np
    import soundfile as sf

    rng = _rng(spec)
    words = [w.upper() for w in sixth.fifth._WORDS]
    for j, split in enumerate(spec.get("splits", ["train-clean-100", "dev-clean"])):
        spk, chapter = 100 + j, 2000 + j
        d = cwd / spec.get("root", "data/LibriSpeech") / split / str(spk) / str(chapter)
        d.mkdir(parents=True, exist_ok=True)
        lines = []
        for i in range(int(spec.get("count", 4))):
            uid = f"{spk}-{chapter}-{i:04d}"
            n = int(16000 * float(rng.uniform(1.0, 1.5)))
            wav = 0.3 * np.sin(2 * np.pi * float(rng.uniform(150, 400)) * np.arange(n) / 16000)
            sf.write(d / f"{uid}.flac", (wav + 0.05 * rng.standard_normal(n)).astype(np.float32), 16000)
            picks = rng.integers(0, len(words), int(spec.get("words", 2)))
            lines.append(uid + " " + " ".join(words[int(k)] for k in picks))
        (d / f"{spk}-{chapter}.trans.txt").write_text("\n".join(lines) + "\n")


def _font_file(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/``name``: matplotlib's DejaVu Sans under the name of the font a program fetches into its settings
    folder before it draws labels (``dir`` the folder its environment names), so nothing is downloaded."""
    import shutil

    import matplotlib

    d = cwd / spec["dir"]
    d.mkdir(parents=True, exist_ok=True)
    font = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    shutil.copyfile(font, d / spec.get("name", "Arial.ttf"))


RECIPES: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    **sixth.RECIPES, "numbered_masks": _numbered_masks, "patched_copy": _patched_copy,
    "mel_quant_data": _mel_quant_data, "mcep_speakers": _mcep_speakers, "noisy_clean_lists": _noisy_clean_lists,
    "librispeech_flac": _librispeech_flac, "font_file": _font_file}


def register(base: dict[str, Callable[[Path, dict[str, Any]], None]]) -> None:
    """Add these recipes (and the first six sets') to the rehearsal corpus's table (``base``), which ``many``
    then draws on too."""
    sixth.register(base)
    sixth.fifth.fourth.third.second.first.RECIPES.update(RECIPES)
    base.update(RECIPES)
