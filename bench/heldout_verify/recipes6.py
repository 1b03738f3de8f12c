"""Synthetic data recipes of the sixth held-out verify set (bench/heldout_verify/programs6.toml), beside the first
five sets' (recipes.py to recipes5.py, whose recipes this module offers too) and the rehearsal corpus's
(bench/rehearsal_corpus.py RECIPES). Each writes small random data where a program reads its data set, in the layout
the program's own loader expects. Nothing is downloaded; no file of the programs is copied.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

_spec = importlib.util.spec_from_file_location("heldout_verify_recipes5", Path(__file__).with_name("recipes5.py"))
assert _spec is not None and _spec.loader is not None
fifth = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fifth)

_rng = fifth._rng


def _user_seq_txt(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/``name``.txt: ``<user> <item> <item> ...`` a line (users 1..``users``, time-ordered sequences of 5 to
    ``max_len`` items from 1..``items``, the Amazon Beauty layout of S3-Rec's and FMLP-Rec's data folder), and
    ``name``_sample.txt: ``<user>`` and ``negatives`` items the user never saw, a line; with ``attributes``,
    ``name``_item2attributes.json maps each item to one to three attribute ids below it."""
    import json

    rng = _rng(spec)
    d = cwd / spec.get("dir", "data")
    d.mkdir(parents=True, exist_ok=True)
    n_items, seqs, samples = int(spec.get("items", 80)), [], []
    for u in range(1, int(spec.get("users", 40)) + 1):
        items = [int(i) + 1 for i in rng.permutation(n_items)[: int(rng.integers(5, int(spec.get("max_len", 12)) + 1))]]
        rest = [i for i in range(1, n_items + 1) if i not in items]
        neg = [rest[int(j)] for j in rng.integers(0, len(rest), int(spec.get("negatives", 99)))]
        seqs.append(f"{u} " + " ".join(map(str, items)))
        samples.append(f"{u} " + " ".join(map(str, neg)))
    (d / f"{spec['name']}.txt").write_text("\n".join(seqs) + "\n")
    (d / f"{spec['name']}_sample.txt").write_text("\n".join(samples) + "\n")
    if spec.get("attributes"):
        na = int(spec["attributes"])
        attrs = {str(i): sorted({int(a) + 1 for a in rng.integers(0, na, int(rng.integers(1, 4)))})
                 for i in range(1, n_items + 1)}
        (d / f"{spec['name']}_item2attributes.json").write_text(json.dumps(attrs))


def _planetoid_pickles(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/ind.``name``.{x,y,tx,ty,allx,ally,graph} and ind.``name``.test.index: the pickled Planetoid layout
    of Kipf's GCN data (scipy CSR features, one-hot labels, an adjacency dict), ``labelled`` training nodes,
    ``nodes`` nodes that are not test nodes (the 500 after the labelled ones validate), ``test`` test nodes listed
    out of order, ``features`` binary features, ``classes`` labels, about ``degree`` neighbours a node."""
    import pickle

    import numpy as np
    import scipy.sparse as sp

    rng = _rng(spec)
    d = cwd / spec.get("dir", "data")
    d.mkdir(parents=True, exist_ok=True)
    name = spec.get("name", "cora")
    nl, na, nt = int(spec.get("labelled", 140)), int(spec.get("nodes", 700)), int(spec.get("test", 300))
    f, k, n = int(spec.get("features", 64)), int(spec.get("classes", 7)), na + nt
    feats = sp.csr_matrix((rng.random((n, f)) < 0.1).astype(np.float32))
    labels = np.eye(k, dtype=np.int64)[rng.integers(0, k, n)]
    graph = {i: sorted({int(j) for j in rng.integers(0, n, int(spec.get("degree", 4))) if j != i}) for i in range(n)}
    test_index = rng.permutation(np.arange(na, n))
    objects = {"x": feats[:nl], "y": labels[:nl], "allx": feats[:na], "ally": labels[:na], "tx": feats[na:],
               "ty": labels[na:], "graph": graph}
    for key, value in objects.items():
        with open(d / f"ind.{name}.{key}", "wb") as fh:
            pickle.dump(value, fh)
    (d / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_index))


def _nanogpt_lora_checkpoint(cwd: Path, spec: dict[str, Any]) -> None:
    """``out_dir``/ckpt.pt: the checkpoint a LoRA fine-tuning run resumes (``model``, ``optimizer``,
    ``model_args``, ``iter_num``, ``best_val_loss``, ``config``), a randomly initialised GPT of ``model_args``
    built by the program's own model.py in the program's folder (as an earlier pretraining run would have saved
    it), its LoRA matrices included, and the state of the AdamW its configure_optimizers makes."""
    import sys

    import torch

    sys.path.insert(0, str(cwd))
    try:
        import model as gpt  # the program's own module, in its folder
    finally:
        sys.path.remove(str(cwd))
    torch.manual_seed(0)
    args = dict(spec["model_args"])
    net = gpt.get_lora_model(gpt.GPT(gpt.GPTConfig(**args)))
    opt = net.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    out = cwd / spec["out_dir"]
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "model_args": args, "iter_num": 0,
                "best_val_loss": 1e9, "config": {}}, out / "ckpt.pt")
    sys.modules.pop("model", None)


def _bert_texts(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/vocab.txt (BERT's special tokens and a small word list, one a line), corpus.txt (``docs``
    documents of 4 to 8 sentences, one a line, a blank line between documents: the layout of BERT's pretraining
    text) and train.tsv (a header and ``pairs`` MRPC-style lines ``<label> <id> <id> <sentence> <sentence>``)."""
    rng = _rng(spec)
    d = cwd / spec.get("dir", "data")
    d.mkdir(parents=True, exist_ok=True)
    words = fifth._WORDS

    def sentence() -> str:
        return " ".join(words[int(i)] for i in rng.integers(0, len(words), int(rng.integers(4, 10)))) + " ."

    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *words]) + "\n")
    docs = ["\n".join(sentence() for _ in range(int(rng.integers(4, 9)))) for _ in range(int(spec.get("docs", 60)))]
    (d / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    rows = [f"{int(rng.integers(0, 2))}\t{i}\t{i + 1000}\t{sentence()}\t{sentence()}"
            for i in range(int(spec.get("pairs", 40)))]
    (d / "train.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n" + "\n".join(rows) + "\n")


def _ripple_data(cwd: Path, spec: dict[str, Any]) -> None:
    """``dir``/ratings_final.txt (``<user> <item> <label>`` lines: ``users`` users, items 0..``items``-1, positive
    and negative labels) and kg_final.txt (``<head> <relation> <tail>`` lines over ``entities`` entities, the items
    first, ``relations`` relations, ``degree`` triples from every entity): RippleNet's preprocessed layout."""
    rng = _rng(spec)
    d = cwd / spec["dir"]
    d.mkdir(parents=True, exist_ok=True)
    nu, ni = int(spec.get("users", 30)), int(spec.get("items", 40))
    ne, nr = int(spec.get("entities", 80)), int(spec.get("relations", 5))
    ratings = [f"{u}\t{int(i)}\t{k % 2}" for u in range(nu) for k, i in enumerate(rng.permutation(ni)[:10])]
    (d / "ratings_final.txt").write_text("\n".join(ratings) + "\n")
    kg = [f"{e}\t{int(rng.integers(nr))}\t{int(rng.integers(ne))}" for e in range(ne)
          for _ in range(int(spec.get("degree", 3)))]
    (d / "kg_final.txt").write_text("\n".join(kg) + "\n")


def _transition_buffer(cwd: Path, spec: dict[str, Any]) -> None:
    """``path``: a torch.save'd dict of ``size`` random transitions (``state``, ``action`` in [-1, 1], ``reward``,
    ``done``, ``next_state`` float tensors, states of ``state_dim``, actions of ``action_dim``): the expert demos
    an imitation learner reads in place of those a trained policy would collect."""
    import torch

    g = torch.Generator().manual_seed(int(spec.get("seed", 0)))
    n, s, a = int(spec.get("size", 1000)), int(spec.get("state_dim", 3)), int(spec.get("action_dim", 1))
    p = cwd / spec["path"]
    p.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state": torch.randn(n, s, generator=g), "action": torch.rand(n, a, generator=g) * 2 - 1,
                "reward": torch.randn(n, 1, generator=g), "done": (torch.rand(n, 1, generator=g) < 0.005).float(),
                "next_state": torch.randn(n, s, generator=g)}, p)


RECIPES: dict[str, Callable[[Path, dict[str, Any]], None]] = {
    **fifth.RECIPES, "user_seq_txt": _user_seq_txt,
    "planetoid_pickles": _planetoid_pickles, "nanogpt_lora_checkpoint": _nanogpt_lora_checkpoint,
    "bert_texts": _bert_texts, "ripple_data": _ripple_data,
    "transition_buffer": _transition_buffer}


def register(base: dict[str, Callable[[Path, dict[str, Any]], None]]) -> None:
    """Add these recipes (and the first five sets') to the rehearsal corpus's table (``base``), which ``many``
    then draws on too."""
    fifth.register(base)
    fifth.fourth.third.second.first.RECIPES.update(RECIPES)
    base.update(RECIPES)
