"""diffusers models by name: each class built from its signature and default configuration, its inputs made from
that configuration and its forward's parameters.

diffusers' model classes share no input convention: a UNet takes ``sample, timestep, encoder_hidden_states``, a
video VAE its frames as ``(batch, channels, frames, height, width)``, an audio VAE a waveform, a Flux-style
transformer its latents as a sequence of tokens with their position ids, a ControlNet a conditioning image, and
many a second timestep, pooled text embeddings, sizes, masks or ids. The inputs are therefore made by role, from
each parameter's name and annotation (:data:`ROLES`), as a few candidate layouts and widths read from the
configuration, and the model picks among them by dry runs on meta tensors (no memory, no data): the first
candidate of each input with which the forward runs (:func:`diffusers_inputs`).

The constructor's required arguments come from the class itself: a wrapper of other models (``controlnets``,
``adapters``) gets one model of the class its annotation (or its own name without ``Multi``) names, with that
class's default configuration; a scalar the library's other classes give a default gets the value most of them
give (:func:`_library_defaults`). What the signature cannot say (a default configuration the class itself
refuses, a required value no class has a default for, an input only the class's pipeline knows how to make) is in
:mod:`opaudit.zoo.diffusers_fixes`, each with why.
"""

from __future__ import annotations

import ast
import inspect
import operator
import re
import typing
from collections import Counter
from collections.abc import Callable
from functools import cache
from typing import Any

from opaudit.errors import InputError

BATCH = 2
WORDS = 8  # text tokens
TOKENS = 16  # latent tokens, where the latents are a sequence
FRAMES = (2, 5, 1, 9, 8, 4)  # video frames to try: even for a temporal patch of 2, 1 + 4k for a causal VAE
SAMPLES = (4096, 2048, 1024, 64)  # waveform samples to try (an audio VAE's hop length must divide them)
OMIT = object()  # an optional input left out
TRIES = 200  # dry runs at most, for a model's inputs (the same picks on any machine)
ALTERNATIVES = 6  # other library defaults of a name tried where the most common does not build
REAL_TRIES = 16  # of which run for real on the CPU, where meta cannot decide or was wrong (a cut model: a second or
# less each)

# roles by parameter name: the first pattern that matches the whole name
ROLES: tuple[tuple[str, str], ...] = (
    (r"(img|txt)_ids", "ids_grid"),
    (r"(controlnet_cond|control_context|controlnet_cond_image|control_image|cond_image|conditioning_image)", "cond"),
    (r"\w+_drop", "drop"),
    (r"(sample|hidden_states|x|z|latents?|z_latent|inputs_embeds|mel|\w+_hidden_states_packed|"
     r"(\w+_)?latents|input_img_latents|controls_latents)", "latent"),
    (r"(timesteps?|t|timestep_(r|ratio|img|text|\d)|r_timestep|\w+_timesteps?|\w+_time|fps|(\w+_)?seconds)", "time"),
    (r"(\w+_)?(attention_mask|mask)", "mask"),
    (r"(pooled_projections|pooled_text_emb|clip_text_pooled|text_embeds|image_embeds|image_embeddings|proj_embedding|"
     r"global_hidden_states|pooled_\w+|\w+_pooled)", "pooled"),
    (r"(encoder_hidden_states(_\w+)?|\w+_hidden_states|hidden_states_\d|prompt_embeds|cap_feats|text_bth|\w+_embeds|"
     r"encoder_hidden_states_t5)", "text"),
    (r"(original_size|target_size|crop_coords|image_meta_size)", "size"),
    (r"(\w+_)?(input_ids|token_ids?|tokens)", "ids"),
    (r"(conditioning_scale|\w+_scale|scale)", "scale"),
    (r"guidance", "guidance"),
    (r"(controlnet_mode|control_mode)", "mode"),
    (r"(img_shapes|\w+_shapes|video_fhw)", "shapes"),
    (r"(\w+_)?(lens|lengths|seq_lens)", "lengths"),
    (r"(added_time_ids|add_time_ids|micro_conds?)", "micro"),
    (r"control_type", "control_type"),
    (r"control_type_idx", "control_index"),
    (r"position_ids", "positions"),
    (r"(segment_ids|indicator|token_type_ids)", "segments"),
    (r"(style|class_labels|\w+_labels?)", "label"),
    (r"(num_frames|height|width|(audio|latent)_num_frames)", "extent"),
)

# configuration fields that name a width of the text (or other condition) the model attends to, the likeliest first
_TEXT_WIDTHS = ("cross_attention_dim", "joint_attention_dim", "text_dim", "caption_channels", "text_embed_dim",
                "context_in_dim", "encoder_hid_dim", "text_hidden_dim", "context_dim", "text_states_dim",
                "caption_projection_dim", "cap_feat_dim", "encoder_hidden_size", "text_encoder_dim",
                "condition_dim", "cond_dim")
_POOLED_WIDTHS = ("pooled_projection_dim", "projection_dim", "clip_embeddings_dim", "embedding_dim",
                  "image_embed_dim", "clip_text_pooled_dim", "text_embed_dim", "global_dim", "time_embed_dim")
# (an encoder's input before the latent's: a consistency decoder's VAE takes RGB, its latent 4 channels; a mel
# spectrogram's bins are its channels, an audio DiT's io_channels its latent's)
_CHANNELS = ("in_channels", "encoder_in_channels", "latent_channels", "num_channels", "audio_channels", "in_chans",
             "in_dim", "input_channels", "io_channels", "num_mels", "mel_bins", "channels", "out_channels")
_SIZES = ("sample_size", "image_size", "input_size", "resolution")
_VOCAB = ("vocab_size", "codebook_size", "num_vq_embeddings", "num_embeds", "num_embeddings", "n_vocab")


# optional inputs given first: what a model is conditioned on (the forward mostly runs without, unconditioned)
_GIVEN = ("text", "pooled", "ids_grid", "guidance", "latent", "cond", "shapes")


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def role(name: str) -> str | None:
    for pattern, r in ROLES:
        if re.fullmatch(pattern, name):
            return r
    return None


# -- building ----------------------------------------------------------------------------------------------


def model_classes() -> list[str]:
    """Every model class diffusers exports: the ModelMixin subclasses of its top level, in name order."""
    import diffusers

    base = diffusers.ModelMixin
    found = []
    for name in sorted(dir(diffusers)):
        try:
            cls = getattr(diffusers, name)
        except Exception:  # noqa: BLE001 - a lazy export whose own imports fail is no model class here
            continue
        if isinstance(cls, type) and issubclass(cls, base) and cls is not base:
            found.append(name)
    return found


@cache
def _library_defaults() -> dict[str, Any]:
    """For each constructor parameter name of diffusers' model classes, the default most of them give it (a
    required argument of one class is often a defaulted one of others: ``in_channels``, ``layers_per_block``)."""
    return {n: values[0] for n, values in _library_values().items()}


@cache
def _library_values() -> dict[str, list[Any]]:
    """For each constructor parameter name of diffusers' model classes, the defaults they give it, the most
    given first."""
    import diffusers

    seen: dict[str, Counter[str]] = {}
    values: dict[str, Any] = {}
    for name in model_classes():
        try:
            params = inspect.signature(getattr(diffusers, name).__init__).parameters.values()
        except (TypeError, ValueError):
            continue
        for p in params:
            if p.default is inspect.Parameter.empty or p.default is None:
                continue
            key = repr(p.default)
            seen.setdefault(p.name, Counter())[key] += 1
            values[f"{p.name}\0{key}"] = p.default
    return {n: [values[f"{n}\0{key}"] for key, _ in c.most_common()] for n, c in seen.items()}


def wrapped_class(cls: type) -> type | None:
    """The model class a wrapper of several (``controlnets``, ``adapters``) holds: the one its annotation names,
    else the class of its own name without ``Multi`` (``FluxMultiControlNetModel``: ``FluxControlNetModel``)."""
    import diffusers

    params = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    p = next((p for k, p in params.items() if k in ("controlnets", "adapters", "models")), None)
    if p is None:
        return None
    text = p.annotation if isinstance(p.annotation, str) else repr(p.annotation)
    for found in re.findall(r"(\w+)'?\]", text) + re.findall(r"\.(\w+)\]", text):
        inner = getattr(diffusers, found, None)
        if isinstance(inner, type) and inner is not cls:
            return inner
    inner = getattr(diffusers, cls.__name__.replace("Multi", "", 1), None)
    return inner if isinstance(inner, type) and inner is not cls else None


def required_arguments(cls: type) -> dict[str, Any]:
    """Values for the constructor's required arguments (not the wrapped models'): the table of
    diffusers_fixes.REQUIRED for the class, else the default most of diffusers' classes give that name."""
    from opaudit.zoo.diffusers_fixes import REQUIRED

    table = REQUIRED.get(cls.__name__, {}).get("set", {})
    found: dict[str, Any] = {}
    for k, p in inspect.signature(cls.__init__).parameters.items():  # type: ignore[misc]
        if k == "self" or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or p.default is not inspect.Parameter.empty:
            continue
        if k in ("controlnets", "adapters", "models"):
            continue
        if k in table:
            found[k] = table[k]
        elif k in _library_defaults():  # read once, where a class needs it (it imports every model class)
            found[k] = _library_defaults()[k]
    return {**found, **{k: v for k, v in table.items() if k not in found}}


def _builds(cls: type, kwargs: dict[str, Any]) -> bool:
    import torch

    try:
        with torch.device("meta"):
            cls(**kwargs)
    except Exception:  # noqa: BLE001 - the answer
        return False
    return True


@cache
def filled_defaults(cls: type) -> dict[str, Any]:
    """Where a class does not build with its own defaults because one it reads is None (``in_channels``,
    ``patch_size``, ``num_kv_heads``), the fewest of its None defaults set to the value most of diffusers'
    classes default that name to, so that it builds (on meta, no memory); ``{}`` where it builds as it is."""
    from opaudit.zoo.diffusers_fixes import FIXES

    given = {**required_arguments(cls), **FIXES.get(cls.__name__, {}).get("set", {})}
    if _builds(cls, given):
        return {}
    common = _library_defaults()
    nones = [k for k, p in inspect.signature(cls).parameters.items()
             if p.default is None and k in common and k not in given]
    fill: dict[str, Any] = {}
    for k in nones:
        fill[k] = common[k]
        if _builds(cls, {**given, **fill}):
            break
    else:
        # the most common values together do not build (16 channels where the class's group norm takes 32
        # groups): one of them alone at another value the library gives that name, the most given first, else
        # each in turn so among all of them
        others = [(k, v) for k in nones for v in _library_values()[k][1:ALTERNATIVES + 1]]
        fill = next((trial for base in ({}, fill) for k, v in others
                     if _builds(cls, {**given, **(trial := {**base, k: v})})), {})
        if not fill:
            return {}
    for k in list(fill):  # the fewest: each fill the class builds without is dropped
        trial = {x: v for x, v in fill.items() if x != k}
        if _builds(cls, {**given, **trial}):
            fill = trial
    return fill


def class_defaults(cls: type) -> dict[str, Any]:
    """The configuration a class is built with when a spec sets nothing: its signature's defaults, the required
    arguments made (:func:`required_arguments`), the fixes of its defaults (diffusers_fixes.FIXES) and the None
    defaults it cannot build with filled (:func:`filled_defaults`)."""
    from opaudit.zoo.diffusers_fixes import FIXES

    defaults = {k: p.default for k, p in inspect.signature(cls).parameters.items()
                if p.default is not inspect.Parameter.empty}
    return {**defaults, **required_arguments(cls), **FIXES.get(cls.__name__, {}).get("set", {}),
            **filled_defaults(cls)}


def builder(cls: type, config: dict[str, Any], overrides: dict[str, Any]) -> Callable[[], Any]:
    """A factory of the model: ``cls`` with the required arguments, the fixes and the overrides; a wrapper with one
    model of the class it wraps (or as many as diffusers_fixes.FIXES's ``models`` says it needs), built so (the
    spec's overrides are that model's)."""
    from opaudit.zoo.diffusers_fixes import FIXES

    inner = wrapped_class(cls)
    if inner is not None:
        init = cls.__init__  # type: ignore[misc]
        key = next(k for k in inspect.signature(init).parameters if k in ("controlnets", "adapters", "models"))
        make_inner = builder(inner, config, overrides)
        n = FIXES.get(cls.__name__, {}).get("models", 1)
        return lambda: cls(**{key: [make_inner() for _ in range(n)]})

    given = {k: v for k, v in config.items() if k in inspect.signature(cls).parameters}
    fixed = {k: v for k, v in given.items() if k in overrides or k in _made(cls)}
    entry = FIXES.get(cls.__name__, {})
    calls, borrows, attributes = entry.get("call", ()), entry.get("borrows"), entry.get("attributes", {})

    def make() -> Any:
        model = cls(**fixed)
        for method in calls:  # what the class's pipelines call on it before it runs (diffusers_fixes, with why)
            getattr(model, method)()
        for name, value in attributes.items():  # one the forward reads and the class never sets (with why)
            setattr(model, name, value)
        if borrows:  # the modules it shares with the model it is paired with, built with the sizes both name
            import diffusers

            other = getattr(diffusers, borrows["class"])
            shared = {k: v for k, v in config.items() if k in inspect.signature(other).parameters}
            model = getattr(cls, borrows["call"])(model, other(**{**class_defaults(other), **shared}))
        return model

    return make


def _made(cls: type) -> set[str]:
    from opaudit.zoo.diffusers_fixes import FIXES

    return set(required_arguments(cls)) | set(FIXES.get(cls.__name__, {}).get("set", {})) | set(filled_defaults(cls))


# -- inputs ------------------------------------------------------------------------------------------------


def _config_ints(config: dict[str, Any], keys: tuple[str, ...], like: str = "") -> list[int]:
    """The positive ints of ``keys`` the configuration sets (the first of a list), then those of every other key
    holding one of ``like``'s words (``lyric`` of ``lyric_hidden_states``) and ending in a width's suffix."""
    out: list[int] = []

    def add(v: Any) -> None:
        v = v[0] if isinstance(v, (list, tuple)) and v else v
        if _int(v) and v > 0 and v not in out:
            out.append(v)

    words = [w for w in like.split("_") if w not in ("hidden", "states", "embeds", "encoder", "")]
    for k in config:
        if words and any(w in k and k.removesuffix(f"_{w}").endswith(("_dim", "_channels", "_size", "_features"))
                         for w in words):  # lyric_hidden_dim, cross_attention_dim_t5
            add(config[k])
    for k in keys:
        add(config.get(k))
    return out


def _hw(config: dict[str, Any]) -> tuple[int, int]:
    v = next((config[k] for k in _SIZES if config.get(k)), 32)
    if isinstance(v, (list, tuple)):
        v = v[-2:] if len(v) >= 2 else (v[0], v[0])
        return int(v[0]), int(v[1])
    return (int(v), int(v)) if _int(v) else (32, 32)


def _patches(config: dict[str, Any]) -> int:
    """How many patches the image latent of the configuration's size is cut into (its patch_size, else 2)."""
    h, w = _hw(config)
    patch: Any = config.get("patch_size")
    p = patch if _int(patch) and patch > 0 else 2
    return max(1, (h // p) * (w // p))


def _video(cls: type, config: dict[str, Any]) -> bool:
    patch = config.get("patch_size")
    return bool(re.search(r"3D|Video|Temporal|Motion|Wan|Mochi|Cogvideo", cls.__name__, re.I)) or \
        (isinstance(patch, (list, tuple)) and len(patch) == 3) or "patch_size_t" in config or \
        "temporal_compression_ratio" in config


def _audio(cls: type, config: dict[str, Any]) -> bool:
    return bool(re.search(r"Audio|Oobleck|Music|Vocoder|1D", cls.__name__)) or "sampling_rate" in config \
        or "audio_channels" in config


_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod}


def arithmetic(text: str, names: dict[str, int]) -> int:
    """An integer expression of a data entry (``"2 * in_visual_dim + 1"``): numbers, ``names``, + - * // % and
    parentheses; anything else is an error of the data (no Python is run)."""
    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name) and node.id in names:
            return int(names[node.id])
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError(f"not a size expression of the configuration: {text!r} ({ast.dump(node)[:60]})")

    return value(ast.parse(text, mode="eval").body)


def fixed_input(cls: type, name: str, config: dict[str, Any], g: Any) -> list[Any]:
    """The input ``name`` as diffusers_fixes.FIXES gives it for ``cls`` (what its pipeline passes), as a list of
    one candidate, the only one :func:`diffusers_inputs` tries; [] where no entry names it. A tensor is given by
    its ``shape``, each size a number or an expression of the configuration's numbers (``"in_channels - 64"``,
    read after the cut) and of ``batch``, ``height`` and ``width`` (the latents'), ``words`` and ``tokens`` (the
    other inputs' counts), and its ``dtype`` (float, complex: random, or a float ``fill`` where set; long, bool:
    ``fill``, 0 unless set); or, a row per example (one for all with ``flat``, or ``rows`` of them), by its
    ``runs`` of one value each (``[[0, "words"], [1, 4]]``); the positions of a packed sequence's part by its
    ``range`` (``["words", "words + tokens"]``: long, one row for all examples); a ``tuple`` or ``list`` of such
    (or a ``list`` of ``times`` of one), a ``dict`` of such by key (a conditioning dict); an ``object`` of a class
    of the model's own module by its name, with ``args`` of such sizes (a cache the forward fills); an int by its
    ``number`` (an expression as the sizes are); anything else by its ``value``."""
    import torch

    from opaudit.zoo.diffusers_fixes import FIXES

    spec = FIXES.get(cls.__name__, {}).get("inputs", {}).get(name)
    if spec is None:
        return []
    h, w = _hw(config)  # the latents' grid, the batch and the text and token counts the other inputs have
    numbers = {k: v for k, v in config.items() if _int(v)} | \
        {"batch": BATCH, "height": h, "width": w, "words": WORDS, "tokens": TOKENS}

    def number(d: int | str) -> int:
        return arithmetic(d, numbers) if isinstance(d, str) else d

    def made(spec: dict[str, Any]) -> Any:
        if "value" in spec:
            return spec["value"]
        if "tuple" in spec:  # a rotary embedding's (cos, sin)
            return tuple(made(s) for s in spec["tuple"])
        if "list" in spec:  # each of them, or one ``times`` (per block: a text encoder's layers)
            if isinstance(spec["list"], list):
                return [made(s) for s in spec["list"]]
            return [made(spec["list"]) for _ in range(number(spec["times"]))]
        if "number" in spec:  # a count the forward takes as an int (a packed sequence's length)
            return number(spec["number"])
        if "dict" in spec:  # a conditioning dict: each key's input
            return {k: made(s) for k, s in spec["dict"].items()}
        if "range" in spec:  # the positions of one part of a packed sequence
            start, stop = (number(x) for x in spec["range"])
            return torch.arange(start, stop, dtype=torch.long)
        if "object" in spec:  # a class of the model's own module (a cache the forward fills), by name
            import importlib

            made_cls = getattr(importlib.import_module(cls.__module__), spec["object"])
            return made_cls(**{k: number(v) for k, v in spec.get("args", {}).items()})
        dtype = spec.get("dtype", "float")
        if "runs" in spec:  # a row per example of runs of one value, (value, count) each: which tokens are image
            kind = {"long": torch.long, "bool": torch.bool}[dtype]
            rows = () if spec.get("flat") else (number(spec.get("rows", BATCH)),)
            return torch.cat([torch.full((*rows, number(n)), v, dtype=kind) for v, n in spec["runs"]], dim=-1)
        shape = [number(d) for d in spec["shape"]]
        if dtype == "float" and "fill" in spec:  # a float mask of ones
            return torch.full(shape, float(spec["fill"]))
        if dtype in ("float", "complex"):
            return torch.randn(*shape, generator=g, dtype=torch.float if dtype == "float" else torch.cfloat)
        return torch.full(shape, spec.get("fill", 0), dtype={"long": torch.long, "bool": torch.bool}[dtype])

    return [made(spec)]


def _candidates(name: str, p: inspect.Parameter, cls: type, config: dict[str, Any], params: dict[str, Any],
                g: Any) -> list[Any]:
    """The values ``name`` may take by its role, the likeliest first; [] where opaudit knows no value of it."""
    import torch

    r = role(name)
    h, w = _hw(config)
    channels = _config_ints(config, _CHANNELS) or [4]
    c = channels[0]
    out: list[Any] = []
    if r == "latent" and name not in ("sample", "hidden_states", "x", "z", "latents", "latent", "mel"):
        # a second latent (context, condition, control): the main one's channels first
        r = "latent"
    if r == "latent":
        packed = "img_ids" in params or "txt_ids" in params
        image = [torch.randn(BATCH, ch, h, w, generator=g) for ch in channels[:3]]
        video = [torch.randn(BATCH, c, f, h, w, generator=g) for f in FRAMES] + \
            [torch.randn(BATCH, f, c, h, w, generator=g) for f in FRAMES[:3]]
        packed_widths = dict.fromkeys([*channels[:3], *_config_ints(config, _TEXT_WIDTHS)[:2]])
        tokens = [torch.randn(BATCH, TOKENS, ch, generator=g) for ch in packed_widths]
        size: Any = config.get("sample_size")  # a 1-D UNet's sample size is its length: the first to try
        first = [size] if _int(size) and 16 <= size <= max(SAMPLES) else []
        wave = [torch.randn(BATCH, ch, n, generator=g) for n in dict.fromkeys([*first, *SAMPLES])
                for ch in dict.fromkeys((1, 2, c))] + \
            [torch.randn(BATCH, n, c, generator=g) for n in (64, 16)]
        # last: tokens of any other width the configuration names (an image encoder's hidden size, Redux's
        # 1152), and one vector per example (a prior's image embedding)
        others = [v for k, v in config.items() if _int(v) and 1 < v <= 8192 and v not in packed_widths
                  and re.search(r"(_dim|_size|_features|_channels)$", k) and k not in _SIZES]
        wide = [torch.randn(BATCH, TOKENS, d, generator=g) for d in dict.fromkeys(others)]
        flat = [torch.randn(BATCH, d, generator=g) for d in dict.fromkeys([*packed_widths, *others])]
        if packed:
            out = tokens + image + video
        elif _video(cls, config):
            out = video + image + tokens
        elif _audio(cls, config):
            out = wave + tokens + image
        else:
            out = image + video + tokens + wave
        out += wide + flat
    elif r == "cond":
        cond = int(config.get("conditioning_channels") or config.get("in_channels") or 3)
        blocks = config.get("block_out_channels") or ()
        scale = 2 ** max(0, len(blocks) - 1) if "sample" in params else 1
        big = torch.randn(BATCH, cond, h * scale, w * scale, generator=g)
        out = [big, *(_candidates("hidden_states", p, cls, config, params, g)[:8])]
        if typing.get_origin(p.annotation) is list or "list" in str(p.annotation):
            out = [[v] for v in out]
    elif r == "time":
        out = [torch.full((BATCH,), 10, dtype=torch.long), torch.full((BATCH,), 0.5),
               torch.tensor(10), torch.full((BATCH, 1), 0.5)]
        if not name.startswith("timestep") or name.endswith(("ratio", "_r")):
            out = [out[1], out[0], out[3]]
    elif r == "mask":
        out = [torch.ones(BATCH, WORDS, dtype=torch.long), torch.ones(BATCH, WORDS, dtype=torch.bool)]
        if "padding" in name or name in ("img_mask", "condition_mask"):
            out = [torch.ones(BATCH, TOKENS, dtype=torch.bool), *out]
        if "order" in name:  # which example each packed item belongs to (ACE-Step's reference clips): one each
            out = [torch.arange(BATCH), *out]
        if re.search(r"padding|condition", name):
            # a mask laid over the latents, one channel concatenated to theirs (Cosmos' padding and condition
            # masks, SparseCtrl's conditioning mask): an image's or a video's layout
            h, w = _hw(config)
            out += [torch.zeros(BATCH, 1, h, w), torch.zeros(1, 1, h, w)] + \
                [torch.zeros(BATCH, 1, f, h, w) for f in FRAMES[:3]]
    elif r == "text":
        widths = _config_ints(config, _TEXT_WIDTHS, name) + [768, 4096]
        lengths = [WORDS] + [v for k, v in config.items() if _int(v) and 0 < v <= 512 and re.search(
            r"(text|caption|max)_(seq_)?len|sequence_length|text_tokens", k)]
        out = [torch.randn(BATCH, n, d, generator=g) for d in dict.fromkeys(widths) for n in dict.fromkeys(lengths)]
        # a text encoder's hidden states of several layers at once, (batch, words, layers, width), where the
        # model names how many of its layers it fuses (Krea 2's num_text_layers)
        layers = [v for k, v in config.items() if _int(v) and 1 < v <= 64 and re.fullmatch(r"num_text_\w*layers", k)]
        out += [torch.randn(BATCH, WORDS, n, d, generator=g) for n in layers for d in dict.fromkeys(widths[:2])]
    elif r == "pooled":
        widths = _config_ints(config, _POOLED_WIDTHS, name) + _config_ints(config, _TEXT_WIDTHS) + [768]
        out = [torch.randn(BATCH, d, generator=g) for d in dict.fromkeys(widths)] + \
            [torch.randn(BATCH, 1, d, generator=g) for d in dict.fromkeys(widths)]
    elif r == "size":
        out = [torch.tensor([[float(h * 8), float(w * 8)]] * BATCH), torch.zeros(BATCH, 2),
               # an image's sizes together: original, target and crop corner (HunyuanDiT's image_meta_size)
               torch.tensor([[float(h * 8), float(w * 8)] * 2 + [0.0, 0.0]] * BATCH)]
    elif r == "ids_grid":
        axes = config.get("axes_dims_rope")
        cols = len(axes) if isinstance(axes, (list, tuple)) and axes else 3
        n = TOKENS if name == "img_ids" else WORDS
        out = [torch.zeros(n, cols), torch.zeros(BATCH, n, cols)]
    elif r == "ids":
        vocab = next((int(config[k]) for k in _VOCAB if _int(config.get(k)) and config[k] > 1), 1000)
        # a token per word, per latent token, or per patch of the image latent (GLM-Image's prior image tokens)
        out = [torch.randint(0, vocab, (BATCH, n), generator=g)
               for n in dict.fromkeys((WORDS, TOKENS, _patches(config)))]
    elif r == "scale":
        out = [[1.0], 1.0] if "list" in str(p.annotation) else [1.0, [1.0]]
        if p.default is inspect.Parameter.empty:  # a required scale may be an upscaler's factor: 1 is none
            out += [2.0, 2]
    elif r == "shapes":  # (frames, rows, columns) of each example's latent tokens: TOKENS of them
        side = int(TOKENS ** 0.5)
        out = [[[(1, side, side)]] * BATCH, [(1, side, side)] * BATCH]
    elif r == "lengths":  # each example's text length, as a pipeline counts its padded prompt: all WORDS
        out = [torch.full((BATCH,), WORDS, dtype=torch.long), [WORDS] * BATCH]
    elif r == "micro":
        # micro-conditions, one number each (SVD's fps, motion bucket and noise strength; aMUSEd's size, crop and
        # aesthetic score), embedded one by one: how many, the dry runs pick
        out = [torch.full((BATCH, n), 6.0) for n in (3, 5, 6, 2, 1, 4)]
    elif r == "control_type":  # which of the union's control types the condition is: a one-hot row each
        kinds = int(config.get("num_control_type") or 6)
        out = [torch.nn.functional.one_hot(torch.zeros(BATCH, dtype=torch.long), kinds).float()]
    elif r == "control_index":
        out = [[0]]
    elif r == "positions":  # a rotary position per token and axis: zeros are valid positions of any grid
        axes = config.get("axes_dims_rope") or config.get("axes_dim") or config.get("rope_axes_dim")
        cols = len(axes) if isinstance(axes, (list, tuple)) and axes else 3
        out = [torch.zeros(n, cols, dtype=torch.long) for n in (WORDS + TOKENS, TOKENS)] + \
            [torch.zeros(BATCH, n, cols, dtype=torch.long) for n in (WORDS + TOKENS, TOKENS)] + \
            [torch.zeros(cols, BATCH, n, dtype=torch.long) for n in (WORDS + TOKENS, TOKENS)] + \
            [torch.zeros(BATCH, n, dtype=torch.long) for n in (WORDS + TOKENS, WORDS, TOKENS)]
    elif r == "segments":  # a label per token (its sample's segment, text or image): one label for all is valid
        out = [torch.ones(BATCH, n, dtype=torch.long) for n in (WORDS + TOKENS, TOKENS, WORDS)]
    elif r == "extent":  # the latent grid a sequence of TOKENS tokens was packed from: one frame of a square
        side = int(TOKENS ** 0.5)
        out = [1, 2, TOKENS] if "frames" in name else [side, h, 1]
    elif r == "drop":  # which tokens are dropped for guidance, shaped as the ids they go with: none
        out = [torch.zeros(BATCH, n, dtype=torch.bool) for n in dict.fromkeys((WORDS, TOKENS, _patches(config)))] + \
            [torch.zeros(BATCH, dtype=torch.bool)]
    elif r == "label":  # a class index per example (HunyuanDiT's style, a UNet's class labels): the first class
        out = [torch.zeros(BATCH, dtype=torch.long)]
    elif r == "mode":
        out = [torch.zeros(BATCH, dtype=torch.long), None]
    elif r == "guidance" and (config.get("guidance_embeds") or p.default is inspect.Parameter.empty):
        out = [torch.full((BATCH,), 3.5)]
    return out


def _params(cls: type) -> dict[str, inspect.Parameter]:
    return {k: p for k, p in inspect.signature(cls.forward).parameters.items()  # type: ignore[attr-defined]
            if k != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


# what torch says where a forward fails only because its tensors are on meta (no data, no meta kernel, an op that
# refuses the meta device): meta cannot decide whether the inputs fit. A shape error names the meta tensor's type
# (``expand(MetaFloatType{[2, 1]}, ...)``) and is an answer.
_META_ONLY = ("meta tensor", "meta device", "'meta' backend", "meta kernel", "on meta")


def meta_only(error: str) -> bool:
    """Whether a dry run's ``error`` is meta's, not the inputs' (:data:`_META_ONLY`, the data reads of
    opaudit.tracing.modes.needs_data)."""
    from opaudit.tracing.modes import needs_data

    text = error.lower()
    return needs_data(error) or any(m in text for m in _META_ONLY)


def _real(model: Any) -> bool:
    """Whether ``model`` holds real parameters on the CPU (a dry run of it for real costs only time), none on
    meta: a model built on meta for its measure is not run."""
    params = list(model.parameters()) if model is not None else []
    return bool(params) and all(p.device.type == "cpu" for p in params)


@cache
def _matmuls() -> tuple[Any, ...]:
    import torch

    aten = torch.ops.aten
    return (aten.mm, aten.addmm, aten.bmm, aten.baddbmm, aten.convolution)


def _counter(count: list[int]) -> Any:
    """A dispatch mode that counts the ops run under it in ``count[0]``, and refuses a matrix product of two
    dtypes as the real kernels do (an integer timestep into a Linear: meta's kernels let it through)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    matmuls = _matmuls()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            count[0] += 1
            if func.overloadpacket in matmuls:  # meta's kernels check the shapes, the real ones the dtypes too
                dtypes = {a.dtype for a in args if isinstance(a, torch.Tensor)}
                if len(dtypes) > 1:
                    raise RuntimeError(f"{func}: mat1 and mat2 must have the same dtype, got {sorted(map(str, dtypes))}"
                                       )
            return func(*args, **(kwargs or {}))

    return Count


class _Reach:
    """Dry runs of a model on meta tensors: whether the forward ran, and how many ops it ran before it stopped
    (a candidate input that gets further is the better one). The meta model is ``model``'s twin, or where it
    cannot be copied (weight norm's computed weights), one that ``make`` builds on meta."""

    def __init__(self, model: Any, make: Callable[[], Any] | None = None):
        self.model, self.make = model, make
        self._meta: Any = None
        self.error = ""
        self.real = 0  # dry runs made for real, where meta could not decide
        self.only_real = False  # meta let through what the real run refused: the rest of the search is real

    def _twin(self) -> Any:
        import torch

        from opaudit.tracing.modes import twin

        if self._meta is None:
            try:
                if all(p.device.type == "meta" for p in self.model.parameters()):
                    self._meta = self.model
                else:
                    self._meta = twin(self.model, lambda t: t.to("meta"))
            except Exception:
                if self.make is None:
                    raise
                with torch.device("meta"):
                    self._meta = self.make()
        return self._meta

    def reach(self, inputs: dict[str, Any]) -> tuple[bool | None, int]:
        import torch

        if self.model is None:
            return None, 0
        count = [0]
        Count = _counter(count)
        if self.only_real:
            if self.real >= REAL_TRIES:
                return False, 0
            self.real += 1
            return self._real_reach(inputs, Count, count)

        from torch.utils import _pytree as pytree

        try:
            model = self._twin()
            meta = pytree.tree_map(lambda v: v.to("meta") if isinstance(v, torch.Tensor) else v, inputs)
            with torch.no_grad(), Count():
                model(**meta)
        except Exception as e:  # noqa: BLE001 - a failure is the answer
            self.error = f"{type(e).__name__}: {e}"
            if not meta_only(self.error):
                return False, count[0]
            if self.real < REAL_TRIES and _real(self.model):
                # meta cannot decide (the forward reads a value, an op has no meta kernel): the same inputs
                # for real, on the model as built, small after --shrink
                self.real += 1
                return self._real_reach(inputs, Count, count)
            return None, count[0]
        return True, count[0]

    def reach_real(self, inputs: dict[str, Any]) -> tuple[bool | None, int]:
        """A dry run of the model as built, for real."""
        count = [0]
        return self._real_reach(inputs, _counter(count), count)

    def backprops(self, inputs: dict[str, Any]) -> bool | None:
        """Whether the forward's output on ``inputs`` has a float tensor that requires grad (a training step
        has something to backpropagate), on meta; None where meta cannot run it."""
        import torch
        from torch.utils import _pytree as pytree

        try:
            model = self._twin()
            meta = pytree.tree_map(lambda v: v.to("meta") if isinstance(v, torch.Tensor) else v, inputs)
            with torch.enable_grad():
                out = model(**meta)
        except Exception:  # noqa: BLE001 - no answer
            return None
        leaves = pytree.tree_leaves(out.to_tuple() if hasattr(out, "to_tuple") else out)
        return any(isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad for t in leaves)

    def _real_reach(self, inputs: dict[str, Any], count_mode: Any, count: list[int]) -> tuple[bool | None, int]:
        import torch

        count[0] = 0
        modes = [(m, m.training) for m in self.model.modules()]
        rng = torch.random.get_rng_state()
        self.model.eval()
        try:
            with torch.no_grad(), count_mode():
                self.model(**inputs)
        except Exception as e:  # noqa: BLE001 - a failure is the answer
            self.error = f"{type(e).__name__}: {e}"
            return False, count[0]
        finally:
            for m, training in modes:
                m.training = training
            torch.random.set_rng_state(rng)
        return True, count[0]


def diffusers_inputs(cls: Any, config: dict[str, Any], model: Any = None,
                     make: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Keyword inputs for a diffusers model: for each parameter of its forward with a role (:data:`ROLES`), the
    first of its candidate values with which ``model``'s forward runs on meta tensors (each input in turn, the
    others at their current pick, until a round changes nothing); an optional input is left out where the
    forward runs without it but not with it. A required parameter without a role is an InputError."""
    import torch

    g = torch.Generator().manual_seed(0)
    inner = wrapped_class(cls)
    params = _params(cls)
    choices: dict[str, list[Any]] = {}
    for name, p in params.items():
        required = p.default is inspect.Parameter.empty
        # what the class's pipeline passes (a wrapper's own entry, else its models')
        fixed = fixed_input(cls, name, config, g) or fixed_input(inner or cls, name, config, g)
        # (the role's candidates only where no fix gives it: they are made at the configuration's sizes, which a
        # fix may be there to avoid)
        found = fixed or _candidates(name, p, inner or cls, config, params, g)
        if inner is not None and found and name not in ("conditioning_scale",) and "list" in str(p.annotation) \
                and not isinstance(found[0], list):
            found = [[v] for v in found]
        if not found:
            if required:
                raise InputError(f"opaudit cannot make the input {name!r} of diffusers' {cls.__name__}",
                                 hint="write a model file with get_model() and get_inputs() for it")
            else:
                continue
        # an optional input: left out first, but the conditioning a model is made for (a fixed input is what the
        # pipeline passes: the only candidate)
        if not fixed and not required:
            found = [*found, OMIT] if role(name) in _GIVEN else [OMIT, *found]
        choices[name] = found
    picks = {k: 0 for k in choices}

    def inputs(at: dict[str, int]) -> dict[str, Any]:
        return {k: choices[k][i] for k, i in at.items() if choices[k][i] is not OMIT}

    probe = _Reach(model, make)
    probe.reach(inputs(picks))  # once first: what a model computes on its first call only (caches) not counted
    best = probe.reach(inputs(picks))
    budget = TRIES
    # a second start where the first fails: every optional second latent or condition left out at once (an
    # inpainting or a control latent is concatenated to the main one on channels: the first layer takes them
    # all or none, so one left out alone never runs)
    extra = {k: len(c) - 1 for k, c in choices.items() if c[-1] is OMIT and role(k) in ("latent", "cond")
             and picks[k] != len(c) - 1}
    if best[0] is False and extra:
        trial = {**picks, **extra}
        got = probe.reach(inputs(trial))
        budget -= 1
        if got[0] is not False or got[1] > best[1]:
            picks, best = trial, got
    def search(picks: dict[str, int], best: tuple[bool | None, int], budget: int,
               order: list[str]) -> tuple[dict[str, int], Any]:
        for _ in range(3):  # rounds: an input's pick can depend on another's
            if best[0] is not False or budget <= 0:
                break
            changed = False
            for k in order:
                for i in range(len(choices[k])):
                    if i == picks[k] or budget <= 0:
                        continue
                    trial = {**picks, k: i}
                    got = probe.reach(inputs(trial))
                    budget -= 1
                    if got[0] is not False or got[1] > best[1]:  # it ran, or got further before it failed
                        picks, best, changed = trial, got, True
                        if got[0] is not False:
                            break
                if best[0] is not False:
                    break
            if not changed:
                break
        return picks, best

    picks, best = search(picks, best, budget, list(choices))
    if best[0] is not False and _real(model) and probe.real < REAL_TRIES:
        # what meta let through, checked once for real: a meta kernel checks shapes, not always dtypes (an
        # integer timestep into a Linear); where the real run fails, the search goes on for real
        probe.real += 1
        checked = probe.reach_real(inputs(picks))
        if checked[0] is False:
            probe.only_real = True
            # the inputs with the fewest candidates first (a timestep's dtype, a mask's): the layout of the
            # latents, which meta checks, is the least likely to be what the real run refused
            fewest = sorted(choices, key=lambda k: len(choices[k]))
            picks, best = search(picks, checked, REAL_TRIES - probe.real, fewest)
    if best[0] is True and probe.backprops(inputs(picks)) is False:
        # the forward runs but nothing it returns depends on a parameter (a projection that is the identity
        # for the text and embeds only the optional numbers): the first optional input left out that makes
        # the output one a training step can backpropagate is given
        for k, c in choices.items():
            if c[picks[k]] is not OMIT:
                continue
            trial = {**picks, k: next(i for i, v in enumerate(c) if v is not OMIT)}
            if probe.reach(inputs(trial))[0] is True and probe.backprops(inputs(trial)):
                picks = trial
                break
    made = inputs(picks)
    if inner is not None and "return_dict" in _params(cls):
        made["return_dict"] = False  # a wrapper unpacks each model's output as a tuple only so
    return made


__all__ = ["ROLES", "builder", "class_defaults", "diffusers_inputs", "required_arguments", "role", "wrapped_class"]
