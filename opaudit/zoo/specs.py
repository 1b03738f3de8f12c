"""Models named instead of wrapped: the SPEC of ``opaudit scan SPEC`` and ``opaudit zoo``.

======================================  ==========================================================================
``model.py`` / ``model.py:factory``     a model file following the convention (tracing/load.py)
``hf:<model_type>``                     transformers' default configuration of that model type (``hf:llama``),
                                        with its most common task head (:data:`HEAD_ORDER`)
``hf:<model_type>:<Head>``              a named head: ``hf:t5:Seq2SeqLM``, ``hf:bert:SequenceClassification``
``hf:<path>``                           a ``config.json``, or a model folder holding one
``hf:<org>/<name>``                     a model's configuration from the local Hugging Face cache (offline)
``diffusers:<ClassName>``               a diffusers model class with its default configuration
``timm:<name>``                         a timm architecture (``timm.create_model(name, pretrained=False)``)
======================================  ==========================================================================

Every named spec takes configuration overrides after ``?``: ``hf:llama?num_hidden_layers=2&hidden_size=256``
(values are read as JSON where they parse, else as text; ``text_config.num_hidden_layers=1`` sets a field of
a sub-configuration). Models are built from configurations with random weights: nothing is downloaded.
A model type's default configuration that transformers itself cannot build or run (a field left None that the
model reads, rotary sections that do not add up) gets the known fix of coverage_db/curated/hf_config_fixes.toml
(:func:`config_fixes`) for each key the overrides leave alone; the zoo's records name the fixes applied.
The inputs are made from the configuration (:func:`hf_inputs`): token ids within the vocabulary, images of the
configured size and channels, mel features or raw audio, decoder inputs for encoder-decoders, and labels
for the head's own loss when training.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opaudit.errors import InputError, describe_exception

BATCH = 2
SEQ = 16  # tokens per sequence (fewer where the configuration allows fewer positions)

# head name -> transformers' auto mapping of model type -> class name; the default head of a model type is
# the first of HEAD_ORDER it has
HEADS = {
    "MaskedLM": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",  # before CausalLM: BERT's decoder mode is not its common use
    "CausalLM": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "Seq2SeqLM": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "SpeechSeq2Seq": "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "ImageClassification": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "CTC": "MODEL_FOR_CTC_MAPPING_NAMES",
    "AudioClassification": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
    "VideoClassification": "MODEL_FOR_VIDEO_CLASSIFICATION_MAPPING_NAMES",
    "SemanticSegmentation": "MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES",
    "DepthEstimation": "MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES",
    "ObjectDetection": "MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES",
    "SequenceClassification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "TokenClassification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "QuestionAnswering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "ImageTextToText": "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "TimeSeriesPrediction": "MODEL_FOR_TIME_SERIES_PREDICTION_MAPPING_NAMES",
    "Model": "MODEL_MAPPING_NAMES",  # the bare model: no task head
}
HEAD_ORDER = tuple(h for h in HEADS if h != "Model")
# heads whose labels are the token ids themselves; heads whose labels are one class per example / per token
_TOKEN_LABELS = ("CausalLM", "MaskedLM", "Seq2SeqLM", "SpeechSeq2Seq", "ImageTextToText")
_CLASS_LABELS = ("ImageClassification", "AudioClassification", "VideoClassification", "SequenceClassification")


@dataclass
class Named:
    """A model named by a spec: how to build it and its inputs, and what identifies it for a cache."""

    spec: str  # as given
    kind: str  # "hf", "diffusers" or "file"
    family: str  # the model type (hf), the class (diffusers), the file's stem
    head: str  # the task head (hf), "" otherwise
    config_hash: str  # the resolved configuration (hf, diffusers) or the file's bytes (file)
    params: dict[str, Any] = field(default_factory=dict)  # the resolved configuration, for the record
    fixes: dict[str, Any] = field(default_factory=dict)  # the fixes of the default configuration applied (hf)
    make_model: Callable[[], Any] = field(default=lambda: _unbuilt())  # load_spec(build=True) sets it
    make_inputs: Callable[[], Any] | None = None
    loss_fn: Callable[[Any, Any], Any] | None = None
    optimizer: Callable[[Any], Any] | None = None

    @property
    def source(self) -> dict[str, Any]:
        if self.kind == "file":
            return {"kind": "model", "path": self.params["path"], "factory": self.params["factory"]}
        return {"kind": "spec", "spec": self.spec, "family": self.family, "head": self.head}


def _unbuilt() -> Any:
    raise RuntimeError("the spec was resolved with build=False: it has no model factory")


def is_named(spec: str) -> bool:
    return spec.startswith(("hf:", "diffusers:", "timm:"))


def load_spec(spec: str, *, build: bool = True) -> Named:
    """Resolve ``spec``. ``build=False`` stops at the configuration (cheap: what a cache key needs);
    a model file is then hashed, not imported."""
    if spec.startswith("hf:"):
        _require(spec, "transformers", "hf")
        return _hf(spec, build)
    if spec.startswith("diffusers:"):
        return _diffusers(spec, build)
    if spec.startswith("timm:"):
        _require(spec, "timm", "timm")
        return _timm(spec, build)
    return _file(spec, build)


def precheck(spec: str) -> None:
    """The checks of ``spec`` that need neither torch nor the model's library imported: a model file that exists,
    a library that is installed, a hub model in the local cache. ``scan`` runs them before it builds and loads the
    CUDA stand-in (which comes before torch), so that a mistyped path says so at once, not after a first build;
    raises InputError as :func:`load_spec` would."""
    if spec.startswith("hf:"):
        _require(spec, "transformers", "hf")
        name = split_overrides(spec)[0].removeprefix("hf:")
        name = _split_head(name)[0]
        if not Path(name).expanduser().exists() and re.fullmatch(r"[\w.-]+/[\w.-]+", name) \
                and not name.startswith((".", "~")):
            from huggingface_hub import try_to_load_from_cache

            if not isinstance(try_to_load_from_cache(name, "config.json"), str):
                _cached_config(spec, name, {})  # its message and hint
    elif spec.startswith("diffusers:"):
        _require(spec, "diffusers", "diffusers")
    elif spec.startswith("timm:"):
        _require(spec, "timm", "timm")
    else:
        _model_path(spec)


def _require(spec: str, module: str, extra: str) -> None:
    """One line naming the extra that installs a spec's library (exit 2), not an import error."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise InputError(f"{spec}: {module} is not installed", hint=f"pip install 'opaudit[{extra}]'")


# -- model files -----------------------------------------------------------------------------------------


def _model_path(spec: str) -> tuple[Path, str | None]:
    """``model.py[:factory]`` -> (the file, the factory), the file checked to exist; torch is not imported (the
    split is opaudit.tracing.load.split_target's, whose package imports torch)."""
    head, sep, tail = spec.rpartition(":")
    file, factory = (head, tail) if sep and tail.isidentifier() and head else (spec, None)
    path = Path(file).expanduser()
    if not path.is_file():
        raise InputError(f"model file not found: {file}" if not path.exists() else
                         f"{file} is a folder; give the model file (a .py file with get_model())",
                         hint="a model file (model.py or model.py:factory), hf:<model_type>, hf:<path>, "
                              "hf:<org>/<name> or diffusers:<ClassName>")
    return path, factory


def _file(spec: str, build: bool) -> Named:
    path, factory = _model_path(spec)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    named = Named(spec, "file", path.stem, "", digest, {"path": str(path), "factory": factory or "get_model"})
    if build:
        from opaudit.tracing.load import load_model_file

        loaded = load_model_file(spec)
        named.make_model, named.make_inputs = loaded.make_model, loaded.make_inputs
        named.loss_fn, named.optimizer = loaded.loss_fn, loaded.optimizer
    return named


# -- overrides -------------------------------------------------------------------------------------------


def split_overrides(spec: str) -> tuple[str, dict[str, Any]]:
    """``"hf:llama?num_hidden_layers=2&rope_theta=1e4"`` -> ``("hf:llama", {"num_hidden_layers": 2, ...})``."""
    head, sep, query = spec.partition("?")
    overrides: dict[str, Any] = {}
    if not sep:
        return spec, overrides
    for part in filter(None, query.split("&")):
        key, eq, value = part.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][\w.]*", key):
            raise InputError(f"{spec}: bad override {part!r}", hint="overrides read key=value&key=value, "
                             "as in hf:llama?num_hidden_layers=2&hidden_size=256")
        try:
            overrides[key] = json.loads(value)
        except ValueError:
            overrides[key] = {"True": True, "False": False, "None": None}.get(value, value)
    return head, overrides


def _nest(overrides: dict[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        parts = key.split(".")
        d = nested
        for p in parts[:-1]:
            d = d.setdefault(p, {})
            if not isinstance(d, dict):
                raise InputError(f"override {key}: {p} is set both as a value and as a sub-configuration")
        d[parts[-1]] = value
    return nested


def _check_keys(spec: str, defaults: dict[str, Any], overrides: dict[str, Any], what: str) -> None:
    for key in overrides:
        d: Any = defaults
        for p in key.split("."):
            if not isinstance(d, dict) or p not in d:
                names = list(d) if isinstance(d, dict) else []
                close = difflib.get_close_matches(p, names, n=3, cutoff=0.6)
                raise InputError(f"{spec}: {what} has no configuration field {key!r}",
                                 hint=f"did you mean {', '.join(close)}?" if close else
                                 f"its fields: {', '.join(sorted(names))[:600]}")
            d = d[p]


def _hash(params: dict[str, Any], *extra: str) -> str:
    text = json.dumps(params, sort_keys=True, default=str) + "\0" + "\0".join(extra)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- transformers ----------------------------------------------------------------------------------------


def model_types() -> list[str]:
    """Every model type transformers knows a configuration for."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return sorted(CONFIG_MAPPING_NAMES)


def heads_of(model_type: str) -> dict[str, str]:
    """The heads ``model_type`` has in transformers' auto mappings: head name -> class name, HEADS' order."""
    import transformers.models.auto.modeling_auto as auto

    found: dict[str, str] = {}
    for head, mapping in HEADS.items():
        cls = getattr(auto, mapping, {}).get(model_type)
        if isinstance(cls, (tuple, list)):
            cls = cls[0]
        if cls:
            found[head] = cls
    return found


def default_head(model_type: str, heads: dict[str, str] | None = None, encoder_decoder: bool = False) -> str | None:
    """The most common task head of ``model_type``: the first of HEAD_ORDER it has, an encoder-decoder's
    own (Seq2SeqLM, SpeechSeq2Seq) before a decoder-only CausalLM class."""
    heads = heads_of(model_type) if heads is None else heads
    order = HEAD_ORDER
    if encoder_decoder:
        order = ("Seq2SeqLM", "SpeechSeq2Seq", *(h for h in HEAD_ORDER if h not in ("Seq2SeqLM", "SpeechSeq2Seq")))
    return next((h for h in order if h in heads), None)


LIBRARIES = ("hf", "diffusers", "timm")


def all_specs(library: str) -> list[str]:
    """``--all hf``: every model type that transformers builds with a task head (``hf:<model_type>``);
    ``--all diffusers``: every model class diffusers exports (``diffusers:<ClassName>``); ``--all timm``: every
    architecture timm registers (``timm:<name>``)."""
    if library not in LIBRARIES:
        raise InputError(f"--all {library}: no such library", hint=f"one of {', '.join(LIBRARIES)}")
    if library == "diffusers":
        return [f"diffusers:{n}" for n in diffusers_classes()]
    if library == "timm":
        return [f"timm:{n}" for n in timm_models()]
    _require("--all hf", "transformers", "hf")
    return [f"hf:{t}" for t in model_types() if default_head(t) is not None]


def diffusers_classes() -> list[str]:
    """Every model class diffusers exports (opaudit.zoo.diffusion.model_classes), or one line naming the extra."""
    _require("--all diffusers", "diffusers", "diffusers")
    from opaudit.zoo import diffusion

    return diffusion.model_classes()


def read_spec_file(path: Path) -> list[str]:
    """``--from FILE``: one spec a line; blank lines and ``#`` comments skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InputError(f"--from {path}: {e.strerror or e}") from None
    return [s for s in (line.split(" #")[0].strip() for line in lines) if s and not s.startswith("#")]


def _split_head(name: str) -> tuple[str, str | None]:
    """``llama:CausalLM`` -> (``llama``, ``CausalLM``): a trailing head name (any case) split off; else (name, None)."""
    where, sep, tail = name.rpartition(":")
    if sep and where and tail.lower() in {h.lower() for h in HEADS}:
        return where, next(h for h in HEADS if h.lower() == tail.lower())
    if sep and re.fullmatch(r"[A-Za-z][\w.-]*", where) and re.fullmatch(r"[A-Za-z]\w*", tail):
        return where, tail  # a model type and a head it may not have: said as such, with the heads it has
    return name, None


def _hf(spec: str, build: bool) -> Named:
    base, overrides = split_overrides(spec)
    name, head = _split_head(base.removeprefix("hf:"))
    if not name:
        raise InputError(f"{spec}: no model named", hint="hf:<model_type> (hf:llama), hf:<path to config.json> "
                         "or hf:<org>/<name> from the local Hugging Face cache")
    config, fixes = _hf_config(spec, name, overrides)
    model_type = getattr(config, "model_type", "") or name
    heads = heads_of(model_type)
    if head is None:
        head = default_head(model_type, heads, bool(getattr(config, "is_encoder_decoder", False))) \
            or ("Model" if "Model" in heads else None)
        if head is None:
            raise InputError(f"{spec}: transformers has no model class for model type {model_type!r}",
                             hint="it has a configuration only (a sub-model of a composite, or a tokenizer's)")
    elif head not in heads:
        raise InputError(f"{spec}: {model_type} has no {head} head",
                         hint=f"its heads: {', '.join(heads) or 'none'}")
    cls_name = heads[head]
    params = config.to_dict()
    params.pop("transformers_version", None)
    named = Named(spec, "hf", model_type, head, _hash(params, cls_name), params, fixes)
    if build:
        import transformers

        cls = getattr(transformers, cls_name, None)
        if cls is None:
            raise InputError(f"{spec}: transformers {transformers.__version__} does not export {cls_name}")
        config = _model_config(cls, config)
        built: dict[str, Any] = {}

        def make_model() -> Any:
            _without_cache(config)
            built["model"] = cls(config)
            return built["model"]

        named.make_model = make_model  # the inputs are fitted to the model built last (a dry run on meta)
        named.make_inputs = lambda: hf_inputs(cls, config, head, train=True, model=built.get("model"),
                                              model_type=model_type)
    return named


def _model_config(cls: Any, config: Any) -> Any:
    """The configuration ``cls`` is built from: a composite's sub-configuration where the class is made for that
    sub-configuration's class (a vision-language model's CausalLM class takes its text configuration), as
    transformers' own ``AutoModelFor*.from_config`` does; else ``config`` itself."""
    want = getattr(cls, "config_class", None)
    if not isinstance(want, type) or isinstance(config, want):
        return config
    for key, sub_cls in (getattr(config, "sub_configs", None) or {}).items():
        if sub_cls is want:
            sub = config.get_text_config() if key == "text_config" else getattr(config, key, None)
            if isinstance(sub, want):
                return sub
    return config


def _without_cache(config: Any) -> None:
    """A train step keeps no KV cache: ``use_cache`` off in the configuration and its sub-configurations, the
    default of a forward that takes it only through ``**kwargs`` (a hybrid's cache of linear-attention layers
    alone cannot even say its length)."""
    for c in (config, *(getattr(config, k, None) for k in getattr(config, "sub_configs", {}) or {})):
        if c is not None and getattr(c, "use_cache", None):
            c.use_cache = False


def _hf_config(spec: str, name: str, overrides: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The configuration ``name`` resolves to with ``overrides``, and the fixes of :func:`config_fixes` applied
    (a model type's default configuration only, each key the overrides leave alone)."""
    from transformers import AutoConfig

    path = Path(name).expanduser()
    if path.exists():
        folder = path if path.is_dir() else path.parent
        if path.is_dir() and not (path / "config.json").is_file():
            raise InputError(f"{spec}: {path} holds no config.json")
        if path.is_file() and path.name != "config.json":
            # AutoConfig reads a folder's config.json; a file of another name is read as JSON here
            return _config_from_dict(spec, _read_json(spec, path), overrides), {}
        return _config_from_dict(spec, _read_json(spec, folder / "config.json"), overrides), {}
    if re.fullmatch(r"[\w.-]+/[\w.-]+", name) and not name.startswith((".", "~")):
        return _cached_config(spec, name, overrides), {}
    if "/" in name or name.endswith(".json"):
        raise InputError(f"{spec}: no such file or folder: {name}")
    types = model_types()
    if name not in types:
        close = difflib.get_close_matches(name, types, n=5, cutoff=0.6)
        raise InputError(f"{spec}: transformers has no model type {name!r}",
                         hint=f"did you mean {', '.join(close)}?" if close else
                         "see transformers' CONFIG_MAPPING for the model types")
    fixes = {k: v for k, v in config_fixes(name).items()
             if not any(k == o or k.startswith(o + ".") or o.startswith(k + ".") for o in overrides)}
    top = {k: v for k, v in fixes.items() if "." not in k}  # the fixes a configuration needs to be built at all
    try:
        try:
            default = AutoConfig.for_model(name, **top)
        except Exception:
            if fixes == top:
                raise
            # a sub-configuration the composite's own checks reject: built from its fixed fields alone
            default = AutoConfig.for_model(name, **_nest(fixes))
    except Exception as e:  # noqa: BLE001 - a configuration class that rejects its own defaults
        raise InputError(f"{spec}: transformers cannot build the default configuration of {name}: "
                         f"{describe_exception(e)}") from None
    if not overrides and fixes == top:
        return default, fixes
    _check_keys(spec, default.to_dict(), overrides, name)
    return _build_config(spec, lambda kw: AutoConfig.for_model(name, **kw), {**fixes, **overrides}), fixes


FIXES_FILE = "curated/hf_config_fixes.toml"


def config_fixes(model_type: str) -> dict[str, Any]:
    """The fix of transformers' default configuration of ``model_type`` (coverage_db/curated/hf_config_fixes.toml):
    configuration keys and values that make the default consistent, so the model builds and runs a step with
    its parts all in place; ``{}`` for a default that needs none. ``hf:<model_type>`` applies it to every key the
    spec's overrides do not set, and the record names it.

    >>> config_fixes("esm")
    {'vocab_size': 33, 'pad_token_id': 1, 'mask_token_id': 32}
    """
    from opaudit.data import load_toml

    entry = load_toml("coverage_db", FIXES_FILE).get("fix", {}).get(model_type)
    return dict(entry["set"]) if entry else {}


def fixes_version() -> str:
    """A hash of the fixes file: a resolved spec is stale when it changes."""
    from opaudit.data import data_dir

    return hashlib.sha256((data_dir("coverage_db") / FIXES_FILE).read_bytes()).hexdigest()[:12]




LAYER_FIELDS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "decoder_layers",
                "num_encoder_layers", "num_decoder_layers",
                "num_self_attends_per_block",  # Perceiver: 26 self-attention layers over its latents
                "num_spatial_layers", "num_temporal_layers")  # VideoPrism's factorized encoder
SUB_CONFIGS = ("text_config", "vision_config", "audio_config", "encoder_config", "decoder_config")


def with_layers(spec: str, n: int) -> str:
    """``hf:llama`` -> ``hf:llama?num_hidden_layers=1``: a smaller model of the same op kinds. The layer counts
    of the configuration (and of its text, vision and audio sub-configurations) become at most ``n``, but a
    hybrid keeps one layer of each kind its per-layer lists name (``layer_types``: sliding and full attention,
    linear attention, dense and sparse MLPs), and a MoE whose first layers are dense keeps one sparse layer;
    the per-layer lists and tables follow the layers kept. A spec whose smaller model cannot be built (checked
    on meta) stays as it is: its default size, traced in meta mode where big."""
    base, overrides = split_overrides(spec)
    try:
        config = _hf_config(spec, base.removeprefix("hf:"), overrides)[0].to_dict()
    except Exception:  # noqa: BLE001 - the zoo reports the configuration's own error
        return spec
    sets = _shrunk(config, n, "")
    for sub in SUB_CONFIGS:
        if isinstance(config.get(sub), dict) and not (sub == "vision_config" and _picks_layers(config)):
            sets.update(_shrunk(config[sub], n, f"{sub}."))
    sets = {k: v for k, v in sets.items() if k not in overrides}
    if not sets:
        return spec
    text = "&".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in sets.items())
    smaller = f"{spec}{'&' if '?' in spec else '?'}{text}"
    try:  # built on meta (no memory): a model with cross-checks this does not know keeps its size
        import torch

        with torch.device("meta"):
            load_spec(smaller).make_model()
    except Exception:  # noqa: BLE001
        return spec
    return smaller


# fields that pick layers by index (a backbone's outputs, a vision tower's feature layers): a configuration
# holding one keeps its layers, since the indices would point past the layers kept
_LAYER_PICKS = ("out_indices", "backbone_out_indices", "insert_layer_id", "intermediate_layers_indices",
                "hybrid_layer_ids")


def _picks_layers(config: dict[str, Any]) -> bool:
    if any(config.get(k) not in (None, []) for k in _LAYER_PICKS):
        return True
    feature = config.get("vision_feature_layer")  # the parent's index into its vision tower's layers
    return isinstance(feature, list) or (isinstance(feature, int) and feature >= 0)


def _first_of_each_kind(kinds: list[str], among: range, each: int) -> list[int]:
    """The indices in ``among`` of the first ``each`` layers of each kind ``kinds`` names."""
    out: list[int] = []
    for kind in dict.fromkeys(kinds[i] for i in among):
        out += [i for i in among if kinds[i] == kind][:each]
    return out


def _shrunk(config: dict[str, Any], n: int, prefix: str, each: int = 1) -> dict[str, Any]:
    """The layer counts cut to at most ``n`` (with the per-layer lists and tables following the layers kept), but
    the first ``each`` layers of each kind a per-layer list names kept."""
    if _picks_layers(config):
        return {}
    derived = ("num_layers",) if "depths" in config else ()  # Swin-style: the length of depths, not a field
    counts = {k: config[k] for k in LAYER_FIELDS
              if k not in derived and isinstance(config.get(k), int) and not isinstance(config[k], bool)}
    if not counts or all(v <= n for v in counts.values()):
        return {}
    total = next(iter(counts.values()))
    # per-layer lists: a value per layer (layer_types, mlp_layer_types, intermediate_size ...)
    per_layer = {k: v for k, v in config.items() if isinstance(v, list) and len(v) == total and total > n}
    keep = list(range(min(n, total)))
    kinds = [v for v in per_layer.values() if all(isinstance(x, str) for x in v)]  # layer_types and the like
    for v in kinds:  # the first layers of each kind
        keep += _first_of_each_kind(v, range(total), each)
    dense = config.get("first_k_dense_replace")
    if isinstance(dense, int) and 0 < dense < total:  # keep one dense and one sparse layer
        keep += [0, dense]
    shared = config.get("num_kv_shared_layers")
    if isinstance(shared, int) and 0 < shared < total:  # the last layers reuse the KV of earlier ones of their kind
        for v in kinds:  # the first of each kind among them too
            keep += _first_of_each_kind(v, range(total - shared, total), each)
    keep = sorted(set(keep))
    out: dict[str, Any] = {}
    for k, v in counts.items():
        want = len(keep) if v == total else min(v, max(n, 1))
        if want < v:
            out[prefix + k] = want
    if prefix + next(iter(counts)) not in out:
        return out
    for k, v in per_layer.items():
        out[prefix + k] = [v[i] for i in keep]
    if isinstance(dense, int) and 0 < dense < total:
        out[prefix + "first_k_dense_replace"] = sum(1 for i in keep if i < dense)
    if isinstance(shared, int) and 0 < shared < total:
        out[prefix + "num_kv_shared_layers"] = sum(1 for i in keep if i >= total - shared)
    table = config.get("per_layer_config")
    if isinstance(table, dict):  # settings of some layers, by index
        out[prefix + "per_layer_config"] = {str(keep.index(int(i))): c for i, c in table.items() if int(i) in keep}
    return out


def _read_json(spec: str, path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{spec}: {path} is not a readable JSON configuration: {e}") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise InputError(f"{spec}: {path} has no model_type", hint="a transformers config.json names its model_type")
    return data


def _config_from_dict(spec: str, data: dict[str, Any], overrides: dict[str, Any]) -> Any:
    from transformers import AutoConfig

    model_type = data["model_type"]
    if model_type not in model_types():
        raise InputError(f"{spec}: transformers has no model type {model_type!r}",
                         hint="a model with its own code (trust_remote_code) cannot be built by name")
    _check_keys(spec, data, overrides, model_type)
    base = {k: v for k, v in data.items() if k not in ("model_type", "transformers_version", "architectures")}
    return _build_config(spec, lambda kw: AutoConfig.for_model(model_type, **{**base, **kw}), overrides)


def _cached_config(spec: str, repo: str, overrides: dict[str, Any]) -> Any:
    from huggingface_hub import constants, try_to_load_from_cache

    path = try_to_load_from_cache(repo, "config.json")
    if not isinstance(path, str):
        raise InputError(f"{spec}: {repo} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE})",
                         hint=f"opaudit downloads nothing; fetch its configuration only (no weights): "
                              f"hf download {repo} config.json  (or name a local config.json: hf:path/to/config.json)")
    return _config_from_dict(spec, _read_json(spec, Path(path)), overrides)


def _build_config(spec: str, make: Callable[[dict[str, Any]], Any], overrides: dict[str, Any]) -> Any:
    try:
        nested = _nest(overrides)
        try:
            config = make({k: v for k, v in nested.items() if not isinstance(v, dict)})
        except Exception:  # noqa: BLE001 - a default that only builds with its sub-configurations fixed
            config = make(nested)
        if overrides:
            for key, value in list(nested.items()):
                # only a sub-configuration is read (a per-layer field read globally raises)
                sub = _get(config, key) if isinstance(value, dict) else None
                if sub is not None and hasattr(sub, "to_dict"):
                    nested[key] = {**sub.to_dict(), **value}  # a sub-configuration: its fields, some changed
            config = make(nested)
    except InputError:
        raise
    except Exception as e:
        raise InputError(f"{spec}: the configuration cannot be built: {describe_exception(e)}") from None
    if overrides:
        _check_experts(spec, config, overrides)
    return config


# Mixture-of-Experts fields, as transformers' configurations name them (zoo/shrink.py cuts by the same lists)
EXPERT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts")
PER_TOKEN_FIELDS = ("num_experts_per_tok", "num_experts_per_token", "moe_topk", "top_k", "top_k_experts",
                    "num_selected_experts", "moe_k")
GROUP_FIELDS = ("n_group", "num_expert_group", "moe_n_group")


def _check_experts(spec: str, config: Any, overrides: dict[str, Any]) -> None:
    """A Mixture-of-Experts configuration whose router cannot pick (experts cut below the default experts per
    token, or not divisible into the default expert groups, or fewer groups than the router keeps) fails in the
    model's own ``torch.topk`` or ``view``: said before, naming the fields the configuration has, with the fix."""
    fields = set(_fields(config))
    named = [k for k in overrides if k in fields]  # the user's own spelling first

    def first(candidates: tuple[str, ...]) -> tuple[str, int] | None:
        for k in [*(k for k in named if k in candidates), *candidates]:
            v = _get(config, k)
            if k in fields and isinstance(v, int) and not isinstance(v, bool):
                return k, v
        return None

    experts, per_token = first(EXPERT_FIELDS), first(PER_TOKEN_FIELDS)
    if experts is None or per_token is None or experts[1] < 1:
        return
    (ek, e), (pk, p) = experts, per_token
    if e < p:
        raise InputError(f"{spec}: {pk}={p} is more than the {e} experts ({ek}): the router picks the top {p} "
                         "experts of each token", hint=f"set {pk}={e} or fewer too")
    groups = first(GROUP_FIELDS)
    if groups is not None and groups[1] > 1:
        gk, g = groups
        kept = _get(config, "topk_group")
        if e % g:
            raise InputError(f"{spec}: the {e} experts ({ek}) do not divide into {g} expert groups ({gk})",
                             hint=f"set {gk} to a divisor of {e} too (1 for none)")
        if e // g < 2:  # (DeepSeek-V3's router scores a group by the sum of its best two experts)
            raise InputError(f"{spec}: {g} expert groups ({gk}) of the {e} experts ({ek}) leave {e // g} expert in "
                             "each: the router scores a group by its top 2 experts",
                             hint=f"set {gk}={max(1, e // 2)} or fewer too")
        if isinstance(kept, int) and kept > g:
            raise InputError(f"{spec}: topk_group={kept} is more than the {g} expert groups ({gk})",
                             hint=f"set topk_group={g} or fewer too")
        if isinstance(kept, int) and p > kept * (e // g):
            raise InputError(f"{spec}: {pk}={p} is more than the {kept * (e // g)} experts of the {kept} groups the "
                             f"router keeps ({e // g} experts in each of {g} groups, topk_group={kept})",
                             hint=f"set {pk}, {gk} or topk_group so that {pk} <= topk_group * {ek} / {gk}")


def _fields(config: Any) -> list[str]:
    """The fields a configuration has as itself (``to_dict``'s keys): names a spec can set (aliases are not)."""
    try:
        return list(config.to_dict())
    except Exception:  # noqa: BLE001 - a configuration that cannot be written out: none known
        return []


def _first(config: Any, *names: str, default: Any = None, depth: int = 0) -> Any:
    """The first of ``names`` the configuration sets, else its sub-configurations' (two levels down: some
    sub-configurations are properties that build a configuration holding one again)."""
    for n in names:
        v = _get(config, n)
        if v is not None:
            return v
    if depth < 2:
        for sub in ("text_config", "vision_config", "audio_config", "encoder_config", "decoder_config"):
            c = _get(config, sub)
            if c is not None and c is not config:
                v = _first(c, *names, depth=depth + 1)
                if v is not None:
                    return v
    return default


def _get(config: Any, name: str) -> Any:
    try:
        return getattr(config, name, None)
    except Exception:  # noqa: BLE001 - a property of a configuration that cannot be computed
        return None


def _size(v: Any, default: int) -> tuple[int, int]:
    if isinstance(v, dict):
        v = v.get("height") or v.get("shortest_edge") or default
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[-1])) if v else (default, default)
    return (int(v), int(v)) if v else (default, default)


def hf_inputs(cls: Any, config: Any, head: str, *, train: bool, model: Any = None,
              model_type: str | None = None) -> dict[str, Any]:
    """Keyword inputs for ``cls`` made from ``config``: the main input (``cls.main_input_name``) and every input
    its forward requires, the text beside an image or audio input where the head predicts tokens (a captioner,
    a vision-language model), the boxes of a layout model, decoder inputs for an encoder-decoder, and the
    head's labels (the train step's loss is the model's own). A train step runs without a KV cache.

    Given the ``model`` itself, the inputs are fitted to it by dry runs on meta tensors (no memory, no data):
    of the layouts an audio input may have, the first the model takes; and for a vision-language model, the
    image with as many image tokens in the text as its vision tower makes features."""
    import torch

    g = torch.Generator().manual_seed(0)
    main = getattr(cls, "main_input_name", "input_ids")
    params = {k: p for k, p in inspect.signature(cls.forward).parameters.items()
              if k != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    required = [k for k, p in params.items() if p.default is inspect.Parameter.empty]
    vocab = int(_first(config, "vocab_size", default=1000) or 1000)
    positions = _first(config, "max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                       "max_sequence_length")
    seq = max(2, min(SEQ, int(positions) if isinstance(positions, int) and positions > 0 else SEQ))
    axial = _first(config, "axial_pos_shape")
    if train and isinstance(axial, (list, tuple)) and axial:  # Reformer trains on exactly its axial positions
        seq = math.prod(int(a) for a in axial)
    special = input_facts(str(model_type or getattr(config, "model_type", "") or ""))
    if isinstance(special.get("seq_field"), str):  # a model whose output positions are fixed by a field
        seq = int(_first(config, special["seq_field"], default=seq))
    ids = torch.randint(0, vocab, (BATCH, seq), generator=g)
    codebooks = int(_first(config, special["codebooks"], default=1)) if "codebooks" in special else 1
    if codebooks > 1:  # audio codes: a row of tokens per codebook, (batch x codebooks, length)
        ids = torch.randint(0, vocab, (BATCH * codebooks, seq), generator=g)
    wanted = [main, *(k for k in required if k != main)]
    if main not in ("input_ids", "inputs") and "input_ids" in params and head in _TOKEN_LABELS:
        wanted.append("input_ids")  # a captioner's or a vision-language model's text
    if "bbox" in params and "input_ids" in wanted:
        wanted.append("bbox")  # a layout model: a box per token
    if "visual_feats" in params:
        wanted += ["visual_feats", "visual_pos"]  # LXMERT-style: region features and their boxes
    wanted += [k for k in special.get("needs", ()) if k in params]  # what the forward reads beside the text
    probe = _Probe(model)
    image = _image_token(config) if "pixel_values" in params and "input_ids" in params else None
    if image is not None and image >= vocab:  # a default configuration whose image token is past its vocabulary
        image = None
    if image is not None and head in _TOKEN_LABELS:
        wanted += ["input_ids", "pixel_values"]
    inputs: dict[str, Any] = {}
    for name in dict.fromkeys(wanted):
        value = _make_input(name, head, config, ids, g, special)
        if value is None:
            raise InputError(f"opaudit cannot make the input {name!r} of {cls.__name__} from its configuration",
                             hint="write a model file with get_model() and get_inputs() for it")
        if isinstance(value, list) and name in _CHOICES:  # layouts to choose from (a time series is a list too)
            value = next((v for v in value if probe.runs({**inputs, name: v}) is not False), value[0])
        inputs[name] = value
    audio = inputs.get(main)
    mask = next((k for k in ("attention_mask", "padding_mask") if k in params), None)
    if head == "CTC" and mask and isinstance(audio, torch.Tensor) and audio.dim() in (2, 3):
        # a CTC loss reads the input lengths from the mask: every frame (audio as (batch, frames[, features]), or
        # raw audio of one channel as (batch, 1, samples))
        frames = (audio.shape[0], audio.shape[-1]) if audio.dim() == 3 and audio.shape[1] == 1 else audio.shape[:2]
        inputs[mask] = torch.ones(frames, dtype=torch.long)
    if image is not None and "pixel_values" in inputs:
        tokens = probe.image_features(inputs["pixel_values"])
        if tokens:  # the text: the image's tokens first, then the words (none of them an image token)
            words = torch.where(ids == image, (image + 1) % vocab, ids)
            ids = torch.cat([torch.full((BATCH, tokens), image, dtype=ids.dtype), words], dim=1)
            inputs["input_ids"] = ids
        elif main != "pixel_values":
            del inputs["pixel_values"]  # the count of image tokens is unknown: the text alone
    if "spatial_shapes" in params and isinstance(inputs.get("pixel_values"), torch.Tensor):
        # a NaFlex vision tower (SigLIP 2): the image as its patches, (batch, patches, channels x patch x patch), a
        # mask of the real ones and the grid they came from, the grid of num_patches it was trained at
        patches, patch = int(_first(config, "num_patches", default=256)), int(_first(config, "patch_size", default=16))
        side = max(1, math.isqrt(patches))
        channels = int(_first(config, "num_channels", default=3))
        inputs["pixel_values"] = torch.randn(BATCH, side * side, channels * patch * patch, generator=g)
        inputs["pixel_attention_mask"] = torch.ones(BATCH, side * side, dtype=torch.long)
        inputs["spatial_shapes"] = torch.tensor([[side, side]] * BATCH)
    if "image_embeds_position_mask" in params and "input_ids" in inputs and "pixel_values" in inputs:
        # Kosmos-2: the image's features (latent_query_num of them) take the places after the first token
        latent = int(_first(config, "latent_query_num", default=64))
        ids = torch.cat([ids[:, :1], torch.randint(0, vocab, (BATCH, latent), generator=g), ids[:, 1:]], dim=1)
        where = torch.zeros_like(ids)
        where[:, 1:1 + latent] = 1
        inputs["input_ids"], inputs["image_embeds_position_mask"] = ids, where
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        inputs["decoder_input_ids"] = ids
    if train and "use_cache" in params:
        inputs["use_cache"] = False  # as in training: a hybrid's cache of linear-attention layers only fails
    if train and "labels" in params:
        # a classifier that passes its labels on to its language model's loss (ShieldGemma 2): the token ids
        labels = ids if special.get("labels") == "tokens" else _labels(head, config, ids, g)
        if labels is not None:
            inputs["labels"] = labels
    if codebooks > 1 and isinstance(inputs.get("labels"), torch.Tensor):  # labels: (batch, length, codebooks)
        inputs["labels"] = ids.reshape(BATCH, codebooks, -1).transpose(1, 2)
    decoder = _get(config, "decoder_config")
    if isinstance(special.get("decoder_codebooks"), str) and decoder is not None and "decoder_input_ids" in inputs:
        # audio codes for the decoder, in its own vocabulary: labels of a row per codebook, (batch x codebooks,
        # length), the input the same codes as (batch, length, codebooks)
        rows = int(_first(decoder, special["decoder_codebooks"], default=1))
        codes = torch.randint(0, int(_first(decoder, "vocab_size", default=vocab)), (BATCH * rows, seq), generator=g)
        inputs["decoder_input_ids"] = codes.reshape(BATCH, rows, seq).transpose(1, 2).contiguous()
        if isinstance(inputs.get("labels"), torch.Tensor):
            inputs["labels"] = codes
    if isinstance(special.get("streams"), str) and isinstance(inputs.get("input_ids"), torch.Tensor):
        # the text beside a code of each audio codebook at every step: (batch, length, 1 + codebooks)
        n = int(_first(config, special["streams"], default=0))
        code_vocab = int(_first(config, str(special.get("stream_vocab", "codebook_vocab_size")), default=vocab))
        codes = torch.randint(0, code_vocab, (*inputs["input_ids"].shape, n), generator=g)
        inputs["input_ids"] = torch.cat([inputs["input_ids"][..., None], codes], dim=-1)
    if special.get("bbox") == "unit" and "bbox" in inputs:  # boxes as fractions of the page, not a 0..1000 grid
        inputs["bbox"] = inputs["bbox"].float() / 1000
    return _completed(inputs, params, head, config, image, g, probe)


# inputs a forward may need beside the text, tried (in this order) where the step fails on meta without them
_COMPLETIONS = ("pixel_values", "input_features", "input_values", "mm_token_type_ids")


def _completed(inputs: dict[str, Any], params: dict[str, Any], head: str, config: Any, image: int | None, g: Any,
               probe: _Probe) -> dict[str, Any]:
    """``inputs``, or with an input the forward takes but the text alone leaves out, where the step (its own
    loss included) fails on meta tensors without it: a captioner that puts its image's features before the
    text (GIT), a model that always reads its image or audio (IDEFICS, Voxtral Realtime), the multimodal token
    types a training step reads (Molmo2: 1 for an image token, else 0). The first that makes the dry run pass
    is kept; with none, the inputs stay as they were (and the trace says why the step fails)."""
    import torch

    missing = [k for k in _COMPLETIONS if k in params and k not in inputs]
    if not missing or head not in _TOKEN_LABELS or "input_ids" not in inputs or probe.runs(inputs) is not False:
        return inputs
    ids = inputs["input_ids"]
    further: dict[str, Any] | None = None  # the first that runs on meta as far as the data (None: it may run)
    for name in missing:
        if name == "mm_token_type_ids":
            kinds = (ids == image).long() if image is not None else torch.zeros_like(ids)
            candidates: list[Any] = [kinds]
        else:
            value = _make_input(name, head, config, ids, g)
            candidates = value if isinstance(value, list) else [value]
        for value in candidates:
            if value is None:
                continue
            added = {name: value}
            if name == "pixel_values" and value.dim() == 5 and "image_attention_mask" in params:
                # images per example (IDEFICS): which of them each token sees, all of them
                added["image_attention_mask"] = torch.ones(*ids.shape, value.shape[1], dtype=torch.long)
            ran = probe.runs({**inputs, **added})
            if ran:
                return {**inputs, **added}
            if ran is None and further is None:
                further = {**inputs, **added}
    return further or inputs


def input_facts(model_type: str) -> dict[str, Any]:
    """What a model type needs of its inputs beyond what its configuration says (the ``input`` tables of
    coverage_db/curated/hf_config_fixes.toml): ``seq_field``, the configuration field that fixes the text's
    length; ``bbox = "unit"``, boxes as fractions of the page; ``feature_size``, the features per frame of an
    audio input where the model stacks frames its configuration does not count; ``codebooks``, the field counting
    the rows of audio codes per example (the text is then (batch x codebooks, length), the labels (batch, length,
    codebooks)); ``needs``, inputs the forward reads beside the text though its signature makes them optional;
    ``labels = "tokens"``, a head whose labels are the text's token ids whatever its kind; ``decoder_codebooks``,
    the decoder configuration's field counting the rows of audio codes its input and labels have per example;
    ``streams`` (and ``stream_vocab``), the field counting the audio codes beside each text token (and the one
    bounding them); ``image_size``, the side of the image where the configuration's own does not fit the model;
    ``frames_per_token``, the audio frames each text token stands for (or the field that says), where the model
    adds them up."""
    from opaudit.data import load_toml

    return dict(load_toml("coverage_db", FIXES_FILE).get("input", {}).get(model_type, {}))


def _make_input(name: str, head: str, config: Any, ids: Any, g: Any, special: dict[str, Any] | None = None) -> Any:
    """One input by its name, from the configuration; None for a name opaudit does not know."""
    import torch

    if name == "input_ids" or (name == "inputs" and head in _TOKEN_LABELS + ("SequenceClassification",)
                               and head != "SpeechSeq2Seq"):
        return ids
    if name == "qformer_input_ids":  # InstructBLIP: the instruction, in the Q-Former's own vocabulary
        qformer = getattr(config, "qformer_config", None)
        return torch.randint(0, int(getattr(qformer, "vocab_size", 0) or 1000), ids.shape, generator=g)
    if name == "past_values":  # a time series per example: the context the configuration names, at most 512
        length = min(512, int(_first(config, "context_length", default=512)))
        return [torch.randn(length, generator=g) for _ in range(BATCH)]
    if name in ("visual_feats", "visual_pos"):
        dim = int(_first(config, "visual_feat_dim" if name == "visual_feats" else "visual_pos_dim", default=4))
        return torch.rand(BATCH, 8, dim, generator=g)
    if name == "flattened_patches":  # Pix2Struct: (row, column, the patch's pixels) per patch
        patch = int(_first(config, "patch_embed_hidden_size", default=768))
        rows = torch.arange(64).div(8, rounding_mode="floor").float() + 1
        where = torch.stack([rows, torch.arange(64).remainder(8).float() + 1], dim=-1).expand(BATCH, 64, 2)
        return torch.cat([where, torch.randn(BATCH, 64, patch, generator=g)], dim=-1)
    if name == "bbox":  # (x0, y0, x1, y1) per token, within the 0..1000 grid layout models embed
        low = torch.randint(0, 500, (*ids.shape, 2), generator=g)
        return torch.cat([low, low + torch.randint(0, 500, (*ids.shape, 2), generator=g)], dim=-1)
    if name in ("pixel_values", "pixel_values_videos"):
        channels = int(_first(config, "num_channels", "in_channels", "in_chans", default=3))
        h, w = _size((special or {}).get("image_size") or _first(config, "image_size", "img_size", "input_size"), 224)
        patch, ratios = _first(config, "patch_size"), _first(config, "scaled_images_ratios")
        if isinstance(patch, int) and isinstance(ratios, (list, tuple)) and ratios:
            # DepthPro-style: the image is seen at several scales, the smallest still a patch
            h = w = max(h, int(patch / min(ratios)))
        shape: tuple[int, ...] = (BATCH, channels, h, w)
        frames = (BATCH, int(_first(config, "num_frames", default=8)), channels, h, w)
        if name == "pixel_values_videos" or head == "VideoClassification" or "num_frames" in config.to_dict():
            return torch.randn(*frames, generator=g)
        if head in _TOKEN_LABELS and _image_token(config) is None:  # a captioner's images, else a video's frames
            layouts = [torch.randn(*shape, generator=g), torch.randn(*frames, generator=g)]
            # a model with a video token and none for images: its frames first
            video = any(isinstance(_get(config, k), int) for k in ("video_token_index", "video_token_id"))
            return layouts[::-1] if video else layouts
        return torch.randn(*shape, generator=g)
    if name == "input_features":  # the layouts it may have, the most likely first (the probe picks)
        mel = _first(config, "num_mel_bins")
        sources = _first(config, "max_source_positions")
        shapes: list[tuple[int, ...]] = []
        if mel is not None and sources is not None:  # Whisper-style: (batch, mel bins, frames), frames fixed
            shapes.append((BATCH, int(mel), 2 * int(sources)))
        channels = int(_first(config, "input_channels", default=1))
        sizes = [int(v) for v in ((special or {}).get("feature_size"), mel, _first(config, "input_feat_per_channel"),
                                  _first(config, "input_feat_size"),
                                  _first(config, "input_dim"), _first(config, "feature_size"),
                                  _first(config, "feature_projection_input_dim"), 80)
                 if isinstance(v, int) and v > 0]
        # frames: 64, or as many as the text's tokens take where each token is a stretch of the audio
        per = (special or {}).get("frames_per_token", 0)
        length = int(_first(config, per, default=0) if isinstance(per, str) else per) * ids.shape[-1] or 64
        for f in dict.fromkeys(sizes):  # (batch, frames, features), as Speech2Text and Parakeet take them
            shapes += [(BATCH, length, f * channels), (BATCH, f * channels, length)]
        return [torch.randn(*shape, generator=g) for shape in dict.fromkeys(shapes)]
    if name == "input_values" or (name == "inputs" and head in ("SpeechSeq2Seq", "CTC", "AudioClassification")):
        mel, frames = _first(config, "num_mel_bins"), _first(config, "max_length")
        if mel is not None and frames is not None:  # a spectrogram (AST)
            return torch.randn(BATCH, int(frames), int(mel), generator=g)
        rate = int(_first(config, "sampling_rate", default=16000))  # raw audio: one second, or one channel of it
        return [torch.randn(BATCH, rate, generator=g), torch.randn(BATCH, 1, rate, generator=g)]
    return None


_AUDIO = ("input_features", "input_values", "inputs")
_CHOICES = (*_AUDIO, "pixel_values")  # inputs made as a list of the layouts they may have


def _image_token(config: Any) -> int | None:
    """The id of the token that stands for an image's features in a vision-language model's text."""
    for name in ("image_token_id", "image_token_index"):
        v = getattr(config, name, None)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    return None


class _Probe:
    """Dry runs of a model on meta tensors: which inputs it takes, how many features its vision tower makes."""

    def __init__(self, model: Any):
        self.model = model
        self._meta: Any = None

    def _twin(self) -> Any:
        if self._meta is None:
            from opaudit.tracing.modes import twin

            params = list(self.model.parameters())
            self._meta = self.model if all(p.device.type == "meta" for p in params) else \
                twin(self.model, lambda t: t.to("meta"))
        return self._meta

    @staticmethod
    def _meta_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
        import torch

        return {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}

    def runs(self, inputs: dict[str, Any]) -> bool | None:
        """True: the forward ran; False: it failed on these inputs; None: no model, or a step that needs data."""
        import torch

        if self.model is None:
            return None
        try:
            with torch.no_grad():
                self._twin()(**self._meta_inputs(inputs))
        except Exception as e:  # noqa: BLE001 - a failure is the answer
            return None if "meta" in str(e).lower() else False
        return True

    def image_features(self, pixel_values: Any) -> int | None:
        """Features per image the model's vision tower makes of ``pixel_values`` (None: unknown)."""
        import torch

        get = getattr(self.model, "get_image_features", None) if self.model is not None else None
        if get is None:
            return None
        try:
            with torch.no_grad():
                out = self._twin().get_image_features(pixel_values=pixel_values.to("meta"))
        except Exception:  # noqa: BLE001 - a tower that needs more than the pixels: the text alone
            return None
        feats = getattr(out, "pooler_output", out)
        if isinstance(feats, (list, tuple)) and feats and all(isinstance(f, torch.Tensor) for f in feats):
            total = sum(f.shape[:-1].numel() for f in feats)
        elif isinstance(feats, torch.Tensor) and feats.dim() >= 2:
            total = feats.shape[:-1].numel()
        else:
            return None
        return total // BATCH if total % BATCH == 0 else None


def _labels(head: str, config: Any, ids: Any, g: Any) -> Any:
    import torch

    classes = int(getattr(config, "num_labels", 2) or 2)
    if head in _TOKEN_LABELS:
        return ids
    if head in _CLASS_LABELS:
        return torch.randint(0, classes, (BATCH,), generator=g)
    if head == "TokenClassification":
        return torch.randint(0, classes, ids.shape, generator=g)
    if head == "CTC":
        vocab = int(getattr(config, "vocab_size", 32) or 32)
        return torch.randint(1, vocab, (BATCH, 4), generator=g)
    return None  # other heads: the sum of the outputs is the loss


# -- timm ------------------------------------------------------------------------------------------------


_TIMM: list[Any] = []  # timm, or the ImportError it gave: tried once a process (a failed import leaves no module)


def _import_timm(what: str) -> Any:
    """timm itself, or one line saying why it does not import (timm's layers import torchvision at the top)."""
    if not _TIMM:
        try:
            import timm

            _TIMM.append(timm)
        except ImportError as failed:
            _TIMM.append(failed)
    if isinstance(_TIMM[0], ImportError):
        missing = getattr(_TIMM[0], "name", None) or str(_TIMM[0])
        raise InputError(f"{what}: timm does not import: No module named {missing!r}",
                         hint="timm imports torchvision: install the torchvision built for this torch "
                              "(PyPI's torchvision does not import beside a CPU build of torch)" if
                         str(missing).startswith("torchvision") else "pip install 'opaudit[timm]'")
    return _TIMM[0]


def timm_models() -> list[str]:
    """Every architecture timm registers: ``timm.list_models()``, or, where timm does not import, the names its
    model files register (``@register_model``), read from its installed sources, so a zoo still lists each model
    and records why it could not be built."""
    _require("--all timm", "timm", "timm")
    try:
        return list(_import_timm("--all timm").list_models())
    except InputError:
        pass
    import ast
    import importlib.util

    found = importlib.util.find_spec("timm")
    names: set[str] = set()
    for folder in (found.submodule_search_locations or []) if found else []:
        for path in sorted(Path(folder, "models").glob("*.py")):
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (OSError, SyntaxError, UnicodeDecodeError):
                continue
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and any(
                        getattr(d, "id", None) == "register_model" or getattr(d, "attr", None) == "register_model"
                        for d in node.decorator_list):
                    names.add(node.name)
    return sorted(names)


TIMM_INPUT = "input_size"  # a timm spec's override of the input's size, opaudit's own (not passed to timm)


def timm_input_size(default: Any, overrides: dict[str, Any]) -> tuple[int, int, int]:
    """The (C, H, W) of a timm model's input: ``input_size`` of the overrides (an int for H = W, [H, W] or
    [C, H, W]), else ``img_size`` (the model's own: a model built for that size takes it), else the pretrained
    configuration's; ``in_chans`` sets C."""
    c, h, w = tuple(default or (3, 224, 224))
    size = overrides.get(TIMM_INPUT, overrides.get("img_size"))
    if isinstance(size, int) and not isinstance(size, bool):
        h = w = size
    elif isinstance(size, (list, tuple)) and len(size) in (2, 3) and all(isinstance(x, int) for x in size):
        *cs, h, w = size
        c = cs[0] if cs else c
    chans = overrides.get("in_chans")
    if isinstance(chans, int) and not isinstance(chans, bool) and chans > 0:
        c = chans
    return int(c), int(h), int(w)


def _set_path(value: Any, path: list[str], new: Any) -> Any:
    """``value`` with ``path`` set to ``new``: a field of a configuration object (a dataclass), an item of a
    dict or list; a list of counts given for a list of stages keeps that many blocks of each stage (its first
    ones and its last)."""
    import dataclasses

    if not path:
        if isinstance(value, (list, tuple)) and value and all(isinstance(x, (list, tuple)) for x in value) \
                and isinstance(new, list) and len(new) == len(value) and all(isinstance(n, int) for n in new):
            # each stage's first n - 1 blocks and its last (where a stage ends in a block of its own kind)
            return type(value)(type(stage)(([*stage[:n - 1], *stage[-1:]] if n > 0 else [])
                                           if n < len(stage) else stage) for stage, n in zip(value, new, strict=True))
        return tuple(new) if isinstance(value, tuple) and isinstance(new, list) else new
    head, rest = path[0], path[1:]
    if isinstance(value, (list, tuple)) and head.isdigit() and int(head) < len(value):
        items = list(value)
        items[int(head)] = _set_path(items[int(head)], rest, new)
        return type(value)(items)
    if isinstance(value, dict) and head in value:
        return {**value, head: _set_path(value[head], rest, new)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and hasattr(value, head):
        return dataclasses.replace(value, **{head: _set_path(getattr(value, head), rest, new)})
    raise InputError(f"override {'.'.join(path)}: {type(value).__name__} has no field {head!r}")


def timm_constructor(timm: Any, name: str, edits: dict[str, Any] | None = None) -> tuple[type, dict[str, Any]]:
    """The class of timm's model ``name`` and the keyword arguments its constructor runs with (its signature's
    defaults, then what the entrypoint passed), read from a build on meta with ``edits`` applied."""
    import torch

    if not edits and name in _TIMM_BUILT:
        return _TIMM_BUILT[name]
    with torch.device("meta"):
        cls = type(timm.create_model(name, pretrained=False))
    seen: dict[str, Any] = {}
    with torch.device("meta"), _timm_edited(cls, edits or {}, seen):
        timm.create_model(name, pretrained=False)
    if not edits:
        _TIMM_BUILT[name] = cls, seen
    return cls, seen


_TIMM_BUILT: dict[str, tuple[type, dict[str, Any]]] = {}  # a process's reads of timm_constructor (a model's cut,
# its overrides' split between the constructor and create_model: the same model's read several times)


class _timm_edited:
    """While open, the first call of ``cls``'s constructor (the model's own, not an instance it builds inside)
    runs with ``edits`` applied to its arguments; ``seen`` gets the arguments it ran with (defaults included)."""

    def __init__(self, cls: type, edits: dict[str, Any], seen: dict[str, Any] | None = None) -> None:
        self.cls, self.edits, self.seen = cls, edits, seen

    def __enter__(self) -> None:
        original = self.cls.__dict__.get("__init__")
        init = self.cls.__init__  # type: ignore[misc]
        signature = inspect.signature(init)
        state = {"done": False}
        edits, seen = self.edits, self.seen

        def edited(obj: Any, *args: Any, **kwargs: Any) -> None:
            if state["done"] or type(obj) is not self.cls:
                return init(obj, *args, **kwargs)
            state["done"] = True
            bound = signature.bind_partial(obj, *args, **kwargs)
            bound.apply_defaults()
            values = dict(bound.arguments)
            extra = values.pop(next((p.name for p in signature.parameters.values()
                                     if p.kind is inspect.Parameter.VAR_KEYWORD), ""), None) or {}
            values.update(extra)
            for key, new in edits.items():
                top, *rest = key.split(".")
                if top not in values and (rest or not any(p.kind is inspect.Parameter.VAR_KEYWORD
                                                          for p in signature.parameters.values())):
                    raise InputError(f"override {key}: {self.cls.__name__} takes no argument {top!r}")
                values[top] = _set_path(values.get(top), rest, new)
            if seen is not None:
                seen.update({k: v for k, v in values.items() if k != next(iter(signature.parameters))})
            names = list(signature.parameters)
            self_name = names[0]
            values.pop(self_name, None)
            positional = [values.pop(p.name) for p in signature.parameters.values()
                          if p.kind is inspect.Parameter.POSITIONAL_ONLY and p.name in values]
            var = next((p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_POSITIONAL),
                       None)
            star = tuple(values.pop(var, ()) or ()) if var else ()
            return init(obj, *positional, *star, **values)

        self.original = original
        self.cls.__init__ = edited  # type: ignore[misc]

    def __exit__(self, *exc: Any) -> None:
        if self.original is None:
            del self.cls.__init__  # type: ignore[misc]
        else:
            self.cls.__init__ = self.original  # type: ignore[misc]


def _timm(spec: str, build: bool) -> Named:
    """A timm architecture. Its overrides are its constructor's arguments: a key the model class's constructor
    takes (``depth``, ``cfg.depths`` for a field of a configuration object it takes, ``block_args`` as blocks
    per stage) is applied to the arguments the entrypoint calls it with; any other key goes to
    ``timm.create_model``; ``input_size`` (opaudit's) sets the input's size."""
    base, overrides = split_overrides(spec)
    name = base.removeprefix("timm:")
    timm = _import_timm(spec)
    if name not in timm.list_models():
        close = difflib.get_close_matches(name, timm.list_models(), n=5, cutoff=0.6)
        raise InputError(f"{spec}: timm {timm.__version__} has no model {name!r}",
                         hint=f"did you mean {', '.join(close)}?" if close else "e.g. timm:resnet50")
    cfg = timm.models.get_pretrained_cfg(name)
    size = timm_input_size(cfg.input_size if cfg is not None else None, overrides)
    params = {"model": name, "input_size": list(size), **overrides}
    named = Named(spec, "timm", name, "", _hash(params, name, timm.__version__), params)
    if build:
        import torch

        given = {k: v for k, v in overrides.items() if k != TIMM_INPUT}
        split: dict[str, dict[str, Any]] = {}

        def make_model() -> Any:
            if not given:
                return timm.create_model(name, pretrained=False)
            if not split:
                cls, seen = timm_constructor(timm, name)
                split["init"] = {k: v for k, v in given.items() if k.split(".")[0] in seen}
                split["create"] = {k: v for k, v in given.items() if k not in split["init"]}
                split["cls"] = cls  # type: ignore[assignment]
            with _timm_edited(split["cls"], split["init"]):  # type: ignore[arg-type]
                return timm.create_model(name, pretrained=False, **split["create"])

        named.make_model = make_model
        named.make_inputs = lambda: torch.randn(BATCH, *size, generator=torch.Generator().manual_seed(0))
    return named


# -- diffusers -------------------------------------------------------------------------------------------


def _diffusers(spec: str, build: bool) -> Named:
    from opaudit.zoo import diffusion

    base, overrides = split_overrides(spec)
    name = base.removeprefix("diffusers:")
    try:
        import diffusers
    except ImportError:
        raise InputError(f"{spec}: diffusers is not installed", hint="pip install 'opaudit[diffusers]'") from None
    cls = getattr(diffusers, name, None)
    if not (isinstance(cls, type) and issubclass(cls, diffusers.ModelMixin) and hasattr(cls, "forward")):
        models = [n for n in dir(diffusers) if n.endswith("Model")]
        close = difflib.get_close_matches(name, models, n=5, cutoff=0.6)
        raise InputError(f"{spec}: diffusers {diffusers.__version__} has no model class {name!r}",
                         hint=f"did you mean {', '.join(close)}?" if close else "e.g. diffusers:UNet2DModel")
    # a wrapper of several models (a multi-ControlNet) is configured as the one model it is built with
    inner = diffusion.wrapped_class(cls)
    defaults = diffusion.class_defaults(inner or cls)
    _check_keys(spec, defaults, overrides, name)
    params = {**defaults, **overrides}
    named = Named(spec, "diffusers", name, "", _hash(params, name, diffusers.__version__), params)
    if build:
        make = diffusion.builder(cls, params, overrides)
        built: dict[str, Any] = {}

        def make_model() -> Any:
            built["model"] = make()
            return built["model"]

        named.make_model = make_model  # the inputs are fitted to the model built last (dry runs on meta)
        named.make_inputs = lambda: diffusion.diffusers_inputs(cls, params, built.get("model"), make)
    return named


def diffusers_inputs(cls: Any, config: dict[str, Any], model: Any = None,
                     make: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Keyword inputs for a diffusers model class (:func:`opaudit.zoo.diffusion.diffusers_inputs`)."""
    from opaudit.zoo.diffusion import diffusers_inputs as made

    return made(cls, config, model, make)


__all__ = ["HEADS", "HEAD_ORDER", "Named", "all_specs", "default_head", "diffusers_inputs", "heads_of", "hf_inputs",
           "is_named", "load_spec", "model_types", "precheck", "read_spec_file", "split_overrides", "with_layers"]
