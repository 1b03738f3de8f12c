"""A zoo traced for real: each model's configuration cut until the model fits and runs on real kernels.

A default configuration is often too big to run (``hf:llama`` is 6.7 B parameters), and a model too big runs on
meta tensors, where no kernel checks a dtype or an index. ``opaudit zoo --shrink`` cuts each configuration to a
small model of the same op kinds, in levels, the most cut first:

=========  ===================================================================================================
``small``  the layers as :func:`opaudit.zoo.specs.with_layers` cuts them (one of each kind), and every width
           divided by one power of two (hidden sizes to about 128, the same factor in every sub-configuration so
           that the sizes one configuration names of another stay equal), the attention heads divided by the same
           factor where they can be, keeping each head's size (rotary sections, sizes a model hard-codes hold),
           else at most 4 heads with the head size following the width; the key/value heads, linear-attention
           heads and the like divided with them, so their ratios hold; at most 4 experts and 2 per token (expert
           groups following); the vocabulary cut to 1,024 or past the highest special token the configuration
           names
``narrow`` the layers, the vocabulary, the experts and the feed-forward widths only (no hidden size or head is
           touched: fewer of a configuration's cross-checks to meet)
``layers`` the layers only (``--layers 1`` of the bench)
``full``   the configuration as it is
=========  ===================================================================================================

Each level is built on meta first (no memory); one that does not build (a configuration's own cross-checks)
is skipped, and the zoo falls back to the next where the model's trace fails at one (run.py). The cut a model
was traced with is named in its record (``cut``: the level and the fields it set).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeGuard

from opaudit.zoo.specs import (
    EXPERT_FIELDS,
    FIXES_FILE,
    GROUP_FIELDS,
    PER_TOKEN_FIELDS,
    SUB_CONFIGS,
    _hf_config,
    _picks_layers,
    _shrunk,
    load_spec,
    split_overrides,
)

LEVELS = ("small", "narrow", "layers", "full")
WIDTH = 128  # about the hidden size a cut model keeps
HEADS = 4  # at most this many attention heads
EXPERTS, PER_TOKEN = 4, 2
VOCAB = 1024

# the main width of a configuration, the first it sets
_MAIN = ("hidden_size", "d_model", "n_embd", "embed_dim", "dim")
# sizes that scale with the width (divided by the factor where it divides them)
_WIDTHS = (*_MAIN, "intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "d_inner",
           "n_inner", "moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size",
           "moe_ffn_hidden_size", "dense_intermediate_size", "kv_lora_rank", "q_lora_rank", "out_hidden_size",
           "text_hidden_size", "vision_hidden_size", "audio_hidden_size", "encoder_hidden_size", "output_hidden_size",
           "projector_hidden_size", "projection_dim", "embedding_size", "word_embed_proj_dim", "mlp_dim",
           "hidden_size_per_layer_input", "cross_attention_hidden_size", "decoder_hidden_size", "hidden_dim",
           "mm_hidden_size", "vision_embed_dim", "text_embed_dim", "pooler_output_size", "classifier_proj_size",
           "mamba_d_state", "state_size", "time_step_rank", "conv_dim_out", "fusion_hidden_size",
           "output_channels", "encoder_hidden_dim", "decoder_ffn_hidden_size", "attention_hidden_size",
           "num_filters", "adapter_input_size", "downsample_hidden_size", "conv_output_size",
           "adapter_in_dim", "adapter_out_dim", "cross_hidden_size",
           "hidden_size_global")
_INNER = ("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "d_inner", "n_inner",
          "moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size",
          "moe_ffn_hidden_size", "dense_intermediate_size")
# rows of hashed n-gram embeddings (BLT's byte groups: 500,002 rows for each of 6 sizes, most of a cut model)
_HASHED = ("encoder_hash_byte_group_vocab",)
# head counts: the first is the attention's, the others divided by the same factor
_HEAD_COUNTS = ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads",
                "decoder_attention_heads", "attention_heads")
_GROUPED = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "linear_num_key_heads", "linear_num_value_heads",
            "swa_num_attention_heads", "swa_num_key_value_heads", "index_n_heads", "mamba_n_heads",
            "linear_num_heads", "encoder_attention_heads", "decoder_attention_heads", "num_heads", "n_head",
            "n_heads", "attention_heads")
# sizes per head, cut by the heads' own factor
_PER_HEAD = ("head_dim", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "qk_head_dim", "index_head_dim",
             "linear_key_head_dim", "linear_value_head_dim", "swa_head_dim", "d_kv", "mamba_d_head", "dim_head",
             "rotary_dim", "linear_head_dim", "attention_head_dim", "kv_channels")
_EXPERTS, _PER_TOKEN, _GROUPS = EXPERT_FIELDS, PER_TOKEN_FIELDS, GROUP_FIELDS


def _int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _special_ids(config: Any, out: list[int]) -> list[int]:
    """Every token id the configuration names (``*_token_id``, ``*_token_index`` and their lists), at any depth."""
    if isinstance(config, dict):
        for k, v in config.items():
            if isinstance(v, dict):
                _special_ids(v, out)
            elif str(k).endswith(("token_id", "token_index", "token_ids")):
                out += [v] if _int(v) else [x for x in v if _int(x)] if isinstance(v, list) else []
    return out


def _factor(config: dict[str, Any]) -> int:
    """The power of two that takes the model's main width to about WIDTH (the text's, where a composite has one)."""
    for c in (config, config.get("text_config"), config.get("decoder"), config.get("decoder_config")):
        if isinstance(c, dict):
            d = next((c[k] for k in _MAIN if _int(c.get(k))), None)
            if d:
                return 2 ** max(0, int(math.log2(max(1, d) / WIDTH)))
    return 1


def _cut_dict(c: dict[str, Any], s: int, prefix: str, level: str, root: dict[str, Any],
              follow: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def put(k: str, v: Any) -> None:
        if c.get(k) != v:
            out[prefix + k] = v

    # experts: at most EXPERTS, PER_TOKEN per token, groups following
    experts = next((k for k in _EXPERTS if _int(c.get(k)) and c[k] > EXPERTS), None)
    if experts:
        put(experts, EXPERTS)
        for g in _GROUPS:  # expert groups: 2 of 2 experts, the best 1 of them
            if _int(c.get(g)) and c[g] > 1:
                put(g, 2)
                if _int(c.get("topk_group")):
                    put("topk_group", 1)
        for k in _PER_TOKEN:
            if _int(c.get(k)) and c[k] > PER_TOKEN:
                put(k, PER_TOKEN)
        if _int(c.get("n_shared_experts")) and c["n_shared_experts"] > 1:
            put("n_shared_experts", 1)
    # the vocabulary: past every special token
    vocab = c.get("vocab_size")
    if _int(vocab) and vocab > VOCAB:
        ids = _special_ids(root, [])
        want = max(VOCAB, max(ids, default=0) + 1)
        if want < vocab:
            put("vocab_size", want)
    for k in _HASHED:  # rows of embeddings indexed by a hash modulo their count: no token id reaches past them
        if _int(c.get(k)) and c[k] > VOCAB:
            put(k, VOCAB)
    if level == "narrow":
        for k in _INNER:
            v = c.get(k)
            if _int(v) and v > WIDTH * 4:
                put(k, WIDTH * 4)
        return out
    if s <= 1:
        return out
    for k in _WIDTHS:
        v = c.get(k)
        if k in _INNER and _int(v) and v > 64:
            # feed-forward widths: at least 64 and a multiple of 16 (grouped matmuls want 16-byte strides)
            put(k, min(v, -(-max(64, v // s) // 16) * 16))
        elif _int(v) and v >= s and v % s == 0:
            put(k, v // s)
        elif isinstance(v, list) and v and all(_int(x) and x % s == 0 and x >= s for x in v):
            put(k, [x // s for x in v])
    # heads: at most HEADS, the head's size following the width (hd * q / s), at least 16 and even
    heads_key = next((k for k in _HEAD_COUNTS if _int(c.get(k)) and c[k] > 0), None)
    main = next((c[k] for k in _MAIN if _int(c.get(k))), None)
    if heads_key is None:
        return out
    h = c[heads_key]
    # a head size the configuration names is kept, unless the model type's cut says it follows the width (code
    # that reads the width over the heads beside code that reads head_dim)
    explicit = _int(c.get("head_dim")) and not (follow and main and c["head_dim"] * h == main)
    hd = c["head_dim"] if explicit else (main // h if main and main % h == 0 else None)
    q = None
    if h % s == 0 or explicit:
        # fewer heads of the same size: rotary sections, hard-coded head sizes and the like still hold
        q = s if h % s == 0 else max(d for d in range(1, min(s, h) + 1) if h % d == 0)
        hd = None
    else:  # at most HEADS heads, the head's size following the width (hd * q / s), at least 16 and even
        for want in (HEADS, 2, 1, 8, 16, h):
            if want > h or h % want:
                continue
            cand = h // want
            if hd is None or (hd * cand % s == 0 and hd * cand // s >= 16 and (hd * cand // s) % 2 == 0):
                q = cand
                break
    if q is None or q == 1:
        return out
    put(heads_key, h // q)
    for k in _GROUPED:
        v = c.get(k)
        if k != heads_key and _int(v) and v > 0:
            put(k, max(1, v // q) if v % q == 0 or v >= q else 1)
    kv = out.get(prefix + "num_key_value_heads", c.get("num_key_value_heads"))
    if _int(kv) and kv > 0 and (h // q) % kv:
        put("num_key_value_heads", 1)
    if hd is not None and (hd * q) % s == 0:
        for k in _PER_HEAD:
            v = c.get(k)
            if _int(v) and v > 1 and (v * q) % s == 0 and v * q // s >= 2:
                put(k, v * q // s)
        for rope in ("rope_parameters", "rope_scaling"):  # multimodal rotary sections add up to half a head
            r = c.get(rope)
            if isinstance(r, dict):
                sections = r.get("mrope_section")
                if isinstance(sections, list) and sections and all(_int(x) for x in sections) \
                        and (sum(sections) * q) % s == 0:
                    # each section scaled with the head, the last taking what rounding leaves
                    new = [x * q // s for x in sections]
                    new[-1] += sum(sections) * q // s - sum(new)
                    if all(x > 0 for x in new):
                        put(rope, {**r, "mrope_section": new})
    return out


# a diffusers class's arguments: layer counts (cut to 1), sizes of its input (to at most 32)
_DIFFUSERS_LAYERS = ("num_layers", "layers_per_block", "num_single_layers", "num_refiner_layers", "num_encoder_layers",
                     "num_decoder_layers", "num_mid_layers", "num_context_refiner_layers", "num_noise_refiner_layers",
                     "num_res_blocks", "depth", "n_layers", "n_refiner_layers", "dit_depth", "enc_num_layers")
_DIFFUSERS_HEADS = ("num_attention_heads", "n_heads", "dit_heads", "num_heads")
# the model width a head count divides, where the class names no head size (Z-Image's dim, LongCat's dit_dim)
_DIFFUSERS_WIDTHS = ("dim", "hidden_size", "inner_dim")
# any other layer or block count by its name (AceStep's num_hidden_layers, HunyuanDiT's transformer_num_layers,
# Kandinsky 5's num_visual_blocks, a VAE's decoder_layers_per_block): cut to 1 at ``small`` only, since a count so
# named may be a period or a layer index as well (a block every n)
_DIFFUSERS_COUNT = re.compile(r"\w*(layers|blocks|depth)(_per_block)?")
_DIFFUSERS_VOCAB = 8192  # a vocabulary above this is cut to it: a head over 150k tokens is most of a model
# grouped-query attention's key and value heads: at most the heads left, so that they still divide them
_DIFFUSERS_KV_HEADS = ("num_kv_heads", "num_key_value_heads", "num_attention_kv_heads")


def _diffusers_cut(spec: str, level: str) -> dict[str, Any]:
    """A diffusers class's cut: its layer counts to 1 (or to what diffusers_fixes.FIXES' ``layers`` keeps), its
    sample size to at most 32 (``layers``); the attention heads to at most 2, a width that is not theirs by a power
    of two, a width without a head count to two heads of its head size, the block widths divided so the first
    is 32 (the group norms' 32 groups still dividing them) or else the widest to _BLOCK_MAX, the heads per block
    to what divides the cut blocks, and a group count halved where the cut blocks are narrower than its groups
    (``narrow``); every other count its name calls layers or blocks to 1 as well (``small``: where one of them is
    not a count the model needs more of, ``narrow`` is the cut that was before them)."""
    named = load_spec(spec, build=False)
    params = named.params
    out: dict[str, Any] = {}
    for k in _DIFFUSERS_LAYERS:
        if _int(params.get(k)) and params[k] > 1:
            out[k] = 1
    for k, v in params.items():  # layers per block given block by block: (8, 24) to (1, 1)
        if re.fullmatch(r"(down|up)_num_layers_per_block", k) and isinstance(v, (list, tuple)) and v \
                and all(_int(x) for x in v) and max(v) > 1:
            out[k] = [1] * len(v)
    if out.get("num_layers") == 1:  # the indices of the layers that get something (Wan VACE's vace_layers): the
        # first, the one layer left (a later index is past the model, which then does not build)
        for k, v in params.items():
            if k.endswith("_layers") and isinstance(v, (list, tuple)) and v and all(_int(x) for x in v) \
                    and max(v) > 0:
                out[k] = [0]
    size = params.get("sample_size")
    if _int(size) and size > 32:
        out["sample_size"] = 32
    _layers_kept(spec, params, out)
    if level not in ("small", "narrow"):
        return out
    for k in _DIFFUSERS_HEADS:
        if _int(params.get(k)) and params[k] > 2:
            out[k] = 2
            # the widths that are the attention's (heads x head size: a caption projection, a cross-attention
            # width) follow it, so the sizes the class's parts name of each other stay equal
            head = params.get("attention_head_dim") or params.get("head_dim")
            prefix = k[: -len("heads")].removeprefix("num_attention_").removeprefix("num_").removeprefix("n_")
            width = next((w for w in (f"{prefix}{x}" for x in _DIFFUSERS_WIDTHS) if _int(params.get(w))), None)
            if (k != "num_attention_heads" or not _int(head)) and width and params[width] % params[k] == 0:
                head = params[width] // params[k]  # the width is the heads' (no head size named)
            if _int(head) and head > 0:
                inner, smaller = params[k] * head, 2 * head
                for name, v in params.items():
                    if _int(v) and v == inner and name not in out and name not in _DIFFUSERS_LAYERS:
                        out[name] = smaller
                # a model width that is not the attention's (MiniMax H3: 5376 wide, 56 heads of 128 projected from
                # it): divided by the power of two that takes it nearest above two heads, its feed-forward and
                # the fields of its value with it
                key = next((w for w in (f"{prefix}{x}" for x in _DIFFUSERS_WIDTHS) if _int(params.get(w))
                            and w not in out and params[w] != inner and params[w] > smaller), None)
                if key is not None:
                    _width_divided(params, out, key, 2 ** int(math.log2(params[key] / smaller)))
            for name in (*_DIFFUSERS_KV_HEADS, "n_kv_heads"):
                v = params.get(name)
                if _int(v) and v > out[k] and name not in out:
                    out[name] = out[k]
    vocab = params.get("vocab_size")
    if _int(vocab) and vocab > _DIFFUSERS_VOCAB:
        out["vocab_size"] = _DIFFUSERS_VOCAB
    loose = []  # the block lists cut by their widest (no group norm's 32 groups kept dividing them)
    for key, blocks in params.items():  # block_out_channels, encoder_/decoder_block_out_channels, stage_channels
        if _DIFFUSERS_CHANNELS.fullmatch(key):
            narrowed, by_widest = _narrowed_blocks(blocks)
            if narrowed is not None:
                out[key] = narrowed
                if by_widest:
                    loose.append(key)
    _head_counts_per_block(params, out)
    _width_without_heads(params, out)
    heads = params.get("attention_head_dim")  # a UNet's heads (diffusers' UNets read this name as a head count)
    if "block_out_channels" in out and "num_attention_heads" not in out and not _int(params.get("num_attention_heads")):
        # 64 heads on a 32-wide block leave no channel to a head: at most 8, so 4 channels each at least
        if _int(heads) and heads > 8:
            out["attention_head_dim"] = 8
        elif isinstance(heads, (list, tuple)) and heads and all(_int(x) for x in heads) and max(heads) > 8:
            out["attention_head_dim"] = [min(x, 8) for x in heads]
    ch = params.get("ch")  # a VAE's base width, its blocks multiples of it (ch_mult)
    if _int(ch) and ch > 32 and ch % 32 == 0:
        out["ch"] = 32
    if level == "small":
        out.update({k: 1 for k, v in params.items()
                    if k not in out and _int(v) and v > 1 and _DIFFUSERS_COUNT.fullmatch(k)})
    _layers_kept(spec, params, out)
    _groups_dividing(spec, params, out)
    if loose and not _builds_cut(spec, out):  # (a consistency decoder's 320 to 1024 to 80 to 256: 80 channels
        for key in loose:  # in 32 groups): those lists kept whole
            del out[key]
    return out


def _builds_cut(spec: str, sets: dict[str, Any]) -> bool:
    """Whether ``spec`` with the cut ``sets`` (less what the spec sets itself) builds, on meta (no memory)."""
    import torch

    own = split_overrides(spec)[1]
    try:
        with torch.device("meta"):
            load_spec(with_cut(spec, {k: v for k, v in sets.items() if k not in own})).make_model()
    except Exception:  # noqa: BLE001 - the answer
        return False
    return True


def _layers_kept(spec: str, params: dict[str, Any], out: dict[str, Any]) -> None:
    """The layer counts a class needs more of than the cut leaves (diffusers_fixes.FIXES' ``layers``, with why):
    raised to them, or left uncut where the class's own count is no more."""
    from opaudit.zoo.diffusers_fixes import FIXES

    name = split_overrides(spec)[0].removeprefix("diffusers:")
    for k, n in FIXES.get(name, {}).get("layers", {}).items():
        if k in out and _int(out[k]) and out[k] < n:
            if _int(params.get(k)) and params[k] > n:
                out[k] = n
            else:
                del out[k]


# the lists of a class's block widths: cut alike (_narrowed_blocks)
_DIFFUSERS_CHANNELS = re.compile(r"(\w+_)?(block_out|stage)_channels")
_BLOCK_MAX = 256  # a block list whose first is not a multiple of 32 (16, 128, ... 1024): its widest cut to this
# a configuration's width without a head count (Kandinsky 6's model_dim, its heads its head size's many): cut to
# two heads, its feed-forward widths by the same factor
_DIFFUSERS_MODEL_WIDTHS = ("model_dim", "hidden_size", "dim", "inner_dim")
_DIFFUSERS_FF = re.compile(r"(ff|ffn|mlp|feed_forward)(_inner)?_dim|intermediate_size")
# group norms' group counts: fewer where the cut leaves a block narrower than them
_DIFFUSERS_GROUPS = ("groups", "norm_num_groups", "norm_groups", "resnet_groups")


def _narrowed_blocks(blocks: Any) -> tuple[list[int] | None, bool]:
    """A list of block widths cut (None: not cut), and whether by its widest: by the factor that takes the first
    to 32 where every width is its multiple (a UNet's 320, 640, 1280: the group norms' 32 groups still divide
    them), else by the power of two that takes the widest to _BLOCK_MAX, none below 16 or its own width (a VAE's
    16, 128, ..., 1024; an upscaler's stages 2048, 1024, 512)."""
    if not (isinstance(blocks, (list, tuple)) and blocks and all(_int(b) and b > 0 for b in blocks)):
        return None, False
    if blocks[0] > 32 and blocks[0] % 32 == 0 and all(b % blocks[0] == 0 for b in blocks):
        return [b // (blocks[0] // 32) for b in blocks], False
    top = max(blocks)
    f = 2 ** int(math.log2(top / _BLOCK_MAX)) if top > _BLOCK_MAX else 1
    if f == 1 or not all(b % f == 0 or b <= 16 for b in blocks):
        return None, False
    return [b if b <= 16 else max(16, b // f) for b in blocks], True


def _head_counts_per_block(params: dict[str, Any], out: dict[str, Any]) -> None:
    """A UNet's heads given block by block (Stable Video Diffusion's 5, 10, 20, 20 on 320 to 1280 channels): on
    the cut blocks each at most what divides the block's width into heads of 4 channels or more."""
    blocks, heads = out.get("block_out_channels"), params.get("num_attention_heads")
    if not (isinstance(blocks, list) and isinstance(heads, (list, tuple)) and len(heads) == len(blocks)
            and all(_int(h) and h > 0 for h in heads)) or "num_attention_heads" in out:
        return
    fit = [max(d for d in range(1, min(h, b // 4) + 1) if b % d == 0) for h, b in zip(heads, blocks, strict=True)]
    if fit != list(heads):
        out["num_attention_heads"] = fit


def _width_without_heads(params: dict[str, Any], out: dict[str, Any]) -> None:
    """A model width whose heads the class counts from their size (the size named ``attention_head_dim`` or
    ``head_dim``, or the sum of the rotary axes' sizes, ``axes_dims``): cut to two heads, the feed-forward
    widths and the other fields of that width divided by the same factor."""
    if any(k in out for k in (*_DIFFUSERS_HEADS, *_DIFFUSERS_MODEL_WIDTHS)) or any(
            _int(params.get(k)) for k in _DIFFUSERS_HEADS):
        return
    key = next((k for k in _DIFFUSERS_MODEL_WIDTHS if _int(params.get(k))), None)
    axes = next((v for k, v in params.items() if re.fullmatch(r"axes_dims?(_rope)?", k)
                 and isinstance(v, (list, tuple)) and v and all(_int(x) for x in v)), None)
    head = next((params[k] for k in ("attention_head_dim", "head_dim") if _int(params.get(k))),
                sum(axes) if axes else None)
    if key is None or not head or params[key] % head or params[key] // head <= 2:
        return
    _width_divided(params, out, key, params[key] // (2 * head))


def _width_divided(params: dict[str, Any], out: dict[str, Any], key: str, f: int) -> None:
    """``key``'s width divided by ``f``, and with it every other field of that value and the feed-forward widths
    (``ff_dim``, ``ffn_dim``, ...) that ``f`` divides."""
    width = params[key]
    if f <= 1 or width % f:
        return
    for name, v in params.items():
        if name in out or not _int(v):
            continue
        if v == width:
            out[name] = width // f
        elif _DIFFUSERS_FF.fullmatch(name) and v % f == 0 and v // f >= 16:
            out[name] = v // f


def _groups_dividing(spec: str, params: dict[str, Any], out: dict[str, Any]) -> None:
    """Where the cut blocks are narrower than a group norm's groups take (Kandinsky 3's ResNet blocks halve
    their 32 channels inside: 16 for 32 groups), the group count halved until the cut model builds (on meta)."""
    import torch

    key = next((k for k in _DIFFUSERS_GROUPS if _int(params.get(k)) and params[k] > 1 and k not in out), None)
    if key is None or not any(_DIFFUSERS_CHANNELS.fullmatch(k) for k in out):
        return

    def builds(sets: dict[str, Any]) -> bool:
        try:
            with torch.device("meta"):
                load_spec(with_cut(spec, sets)).make_model()
        except Exception as e:  # noqa: BLE001 - the answer
            return "group" not in str(e).lower()
        return True

    own = split_overrides(spec)[1]
    if key in own or builds({k: v for k, v in out.items() if k not in own}):
        return
    groups = params[key]
    while groups > 1:
        groups //= 2
        if builds({**{k: v for k, v in out.items() if k not in own}, key: groups}):
            out[key] = groups
            return


# a timm model constructor's block counts: an int, or a list of them (one per stage); in a configuration object it
# takes (a dataclass: ``cfg``), its fields of these names, and ``d`` of its block configurations
_TIMM_DEPTHS = ("depth", "depths", "layers", "depth_list", "num_blocks", "num_blocks_list", "depth_token_only",
                "serial_depths", "parallel_depth", "transformer_depths", "global_block_counts", "num_rnn_layers",
                "cls_attn_layers", "stages", "block_config", "num_layers", "n_layers", "stage_blocks", "levels")
TIMM_BLOCKS = 2  # blocks a stage keeps: the first of a stage often differs (a downsampling, an unshifted window)
_TIMM_INPUT_KEYS = ("img_size", "input_size")
TIMM_SIZE = 256  # inputs larger than this are halved while they stay a multiple of 32


def _depth_cut(value: Any, path: str, out: dict[str, Any], depth: int = 0) -> None:
    import dataclasses

    key = path.rsplit(".", 1)[-1]
    if key in _TIMM_DEPTHS or (key == "d" and depth > 0):
        if _int(value) and value > TIMM_BLOCKS:
            out[path] = TIMM_BLOCKS
            return
        if isinstance(value, (list, tuple)) and value and all(_int(x) for x in value) and max(value) > TIMM_BLOCKS:
            out[path] = [min(x, TIMM_BLOCKS) for x in value]
            return
    if key == "block_args" and isinstance(value, (list, tuple)) and value \
            and all(isinstance(x, (list, tuple)) for x in value) and max(len(x) for x in value) > TIMM_BLOCKS:
        out[path] = [min(len(x), TIMM_BLOCKS) for x in value]  # blocks per stage, as its arch string repeats them
        return
    if depth >= 3:
        return
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _depth_cut(getattr(value, f.name), f"{path}.{f.name}", out, depth + 1)
    elif isinstance(value, (list, tuple)) and depth > 0 and len(value) <= 16 and any(
            dataclasses.is_dataclass(x) for x in value):  # a configuration's stages, each a block configuration
        for i, x in enumerate(value):
            _depth_cut(x, f"{path}.{i}", out, depth + 1)


def _timm_cut(spec: str, level: str) -> dict[str, Any]:
    """A timm architecture's cut: each stage's blocks to at most TIMM_BLOCKS, wherever its constructor takes
    them (``layers``); and (``small``) an input larger than TIMM_SIZE halved while it stays a multiple of 32, the
    model built for that size where it is built for one (``img_size``), at the pretrained configuration's
    ``min_input_size`` at least."""
    from opaudit.zoo.specs import TIMM_INPUT, _import_timm, timm_constructor, timm_input_size

    base, own = split_overrides(spec)
    name = base.removeprefix("timm:")
    timm = _import_timm(spec)
    _, seen = timm_constructor(timm, name)
    out: dict[str, Any] = {}
    for key, value in seen.items():
        _depth_cut(value, key, out)
    if level != "small":
        return out
    cfg = timm.models.get_pretrained_cfg(name)
    c, h, w = timm_input_size(cfg.input_size if cfg is not None else None, own)
    floor = max((cfg.min_input_size or (0, 0, 0))[1:] if cfg is not None else (0,))
    size = h
    while h == w and size > TIMM_SIZE and size % 64 == 0 and size // 2 >= floor:
        size //= 2
    if size != h:
        if "img_size" in seen and not ("img_size" in own or TIMM_INPUT in own):
            out["img_size"] = size
            out[TIMM_INPUT] = [c, size, size]
        elif cfg is not None and not getattr(cfg, "fixed_input_size", False) and TIMM_INPUT not in own:
            out[TIMM_INPUT] = [c, size, size]
    return out


def _runs_on_meta(spec: str) -> bool:
    """Whether ``spec``'s model builds and runs its forward pass on meta tensors (no memory): a cut whose sizes
    do not agree fails here; a model that reads its data, or an op without a meta kernel, is given the benefit."""
    import torch

    from opaudit.tracing.modes import needs_data

    named = load_spec(spec)
    try:
        with torch.device("meta"):
            model = named.make_model()
        x = torch.empty(2, *named.params["input_size"], device="meta")
        with torch.no_grad():
            model(x)
    except NotImplementedError:
        return True
    except Exception as e:  # noqa: BLE001
        text = str(e)
        return needs_data(text) or "meta" in text.lower()
    return True


def _timm_levels(spec: str) -> list[tuple[str, str, dict[str, Any]]]:
    """A timm architecture's levels: ``small`` (blocks and input cut), ``layers`` (blocks only), ``input`` (the
    input only), ``full``; each cut kept where its model runs on meta."""
    own = split_overrides(spec)[1]
    try:
        small = {k: v for k, v in _timm_cut(spec, "small").items() if k not in own}
    except Exception:  # noqa: BLE001 - the model's own error shows when the spec itself runs
        return [("full", spec, {})]
    blocks = {k: v for k, v in small.items() if k not in _TIMM_INPUT_KEYS}
    found: list[tuple[str, str, dict[str, Any]]] = []
    for level, sets in (("small", small), ("layers", blocks),
                        ("input", {k: v for k, v in small.items() if k in _TIMM_INPUT_KEYS})):
        smaller = with_cut(spec, sets)
        if not sets or any(s == smaller for _, s, _ in found):
            continue
        try:
            if _runs_on_meta(smaller):
                found.append((level, smaller, sets))
        except Exception:  # noqa: BLE001 - a cut that does not build is left out
            continue
    found.append(("full", spec, {}))
    return found


def _sub_configs(config: dict[str, Any], prefix: str, depth: int = 0) -> Any:
    """``(prefix, sub-configuration)`` for each sub-configuration, nested ones too (a vision tower's own
    encoder): the dict fields named ``*_config``, ``encoder`` or ``decoder``."""
    for key, value in config.items():
        if isinstance(value, dict) and (key in SUB_CONFIGS or key.endswith("_config") or key in ("encoder", "decoder")):
            yield f"{prefix}{key}.", value
            if depth < 2:
                yield from _sub_configs(value, f"{prefix}{key}.", depth + 1)


def _at(config: dict[str, Any], prefix: str) -> Any:
    for part in prefix.rstrip(".").split(".") if prefix else []:
        config = config.get(part) if isinstance(config, dict) else None  # type: ignore[assignment]
    return config


def _applied(config: dict[str, Any], sets: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the dotted ``sets`` applied (a copy)."""
    out = json.loads(json.dumps(config, default=str))
    for key, value in sets.items():
        *parents, last = key.split(".")
        d = out
        for p in parents:
            d = d.setdefault(p, {})
        d[last] = value
    return out


def cut(spec: str, level: str) -> dict[str, Any]:
    """The overrides that cut ``spec``'s configuration at ``level`` (``{}`` where nothing is cut); a spec's own
    overrides are kept."""
    if level == "full":
        return {}
    if spec.startswith("diffusers:"):
        own = split_overrides(spec)[1]
        return {k: v for k, v in _diffusers_cut(spec, level).items() if k not in own}
    if spec.startswith("timm:"):
        own = split_overrides(spec)[1]
        return {k: v for k, v in _timm_cut(spec, level if level == "small" else "layers").items() if k not in own}
    if not spec.startswith("hf:"):
        return {}
    base, overrides = split_overrides(spec)
    config = _hf_config(spec, base.removeprefix("hf:"), overrides)[0].to_dict()
    subs = list(_sub_configs(config, ""))  # (prefix, sub-configuration), at any depth
    facts = shrink_facts(str(config.get("model_type", "")))
    n = int(facts.get("layers", 1))
    sets = _shrunk(config, n, "", each=n)
    sets.update(facts.get("set", {}))  # what the rules cannot cut, as data
    # a vision tower whose layers its parent or an adapter beside it picks by index keeps them
    picked = _picks_layers(config) or any(_picks_layers({"vision_feature_layer": sub.get("vision_feature_layer")})
                                          for _, sub in subs)
    for prefix, sub in subs:
        if not (prefix == "vision_config." and picked):
            sets.update(_shrunk(sub, n, prefix, each=n))
    if level != "layers":
        s = _factor(config)
        cut_config = _applied(config, sets)  # the widths of the layers kept (per-layer lists already cut)
        # rotary sections the model reads where its configuration names none: named, so they follow the head
        cut_config = _applied(cut_config, {f"{k}.mrope_section": v for k, v in facts.get("rope_sections", {}).items()
                                           if isinstance(_at(cut_config, k), dict)})
        follow = facts.get("head_dim") == "width"
        sets.update(_cut_dict(cut_config, s, "", level, config, follow))
        for prefix, _ in subs:
            sub = _at(cut_config, prefix)
            if isinstance(sub, dict):
                sets.update(_cut_dict(sub, s, prefix, level, config, follow))
        for prefix, c in (("", cut_config), *((p, _at(cut_config, p)) for p, _ in subs)):
            table = c.get("per_layer_config") if isinstance(c, dict) else None
            if isinstance(table, dict) and table and level == "small":  # settings of some layers: cut alike
                sets[prefix + "per_layer_config"] = {i: {**v, **{k.removeprefix(f"{i}."): x for k, x in _cut_dict(
                    v, s, f"{i}.", level, config).items()}} if isinstance(v, dict) else v for i, v in table.items()}
    return {k: v for k, v in sets.items() if k not in overrides}


def shrink_facts(model_type: str) -> dict[str, Any]:
    """What a model type needs of its cut beyond what its configuration says (the ``shrink`` tables of
    coverage_db/curated/hf_config_fixes.toml): ``layers``, the layers it keeps at least, and of each kind its
    per-layer lists name (a model whose initialization divides by the layers less one, weights tied from one
    layer of a kind to the others); ``rope_sections``, the multimodal rotary sections its code falls back to where
    a rotary table (``text_config.rope_parameters``) names none, to be cut with the head; ``head_dim = "width"``,
    a head size that is the width over the heads and must stay so (the code reads both); ``set``, fields the rules
    cannot cut (layers listed in a way of their own, a family's scaling coefficients), set at every level."""
    from opaudit.data import load_toml

    return dict(load_toml("coverage_db", FIXES_FILE).get("shrink", {}).get(model_type, {}))


def with_cut(spec: str, sets: dict[str, Any]) -> str:
    if not sets:
        return spec
    text = "&".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in sets.items())
    return f"{spec}{'&' if '?' in spec else '?'}{text}"


_TEXT = ("text_config.", "decoder_config.", "decoder.", "language_config.", "llm_config.")


def levels(spec: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``(level, spec, overrides)`` for each level that builds on meta, the most cut first, distinct specs only;
    the spec as given always last."""
    import torch

    if spec.startswith("timm:"):
        return _timm_levels(spec)
    found: list[tuple[str, str, dict[str, Any]]] = []
    seen: set[str] = set()
    for level in LEVELS[:-1]:
        try:
            sets = cut(spec, level)
        except Exception:  # noqa: BLE001 - the configuration's own error shows when the spec itself runs
            break
        # a vocabulary some range of the configuration reaches past (tokens counted from an id): kept whole; a
        # vision or audio tower with cross-checks of its own: kept at its width (its layers still cut)
        kept_vocab = {k: v for k, v in sets.items() if not k.endswith("vocab_size")}
        layers = cut(spec, "layers") if level != "layers" else sets
        text = {k: v for k, v in sets.items() if k in layers or "." not in k or k.startswith(_TEXT)}
        candidates = [sets, kept_vocab, text, {k: v for k, v in text.items() if k in kept_vocab}]
        for candidate in [c for i, c in enumerate(candidates) if c not in candidates[:i]]:
            smaller = with_cut(spec, candidate)
            if not candidate or smaller in seen:
                continue
            try:  # built on meta (no memory): a cut that a configuration's cross-checks refuse is skipped
                with torch.device("meta"):
                    load_spec(smaller).make_model()
            except Exception:  # noqa: BLE001
                continue
            seen.add(smaller)
            found.append((level, smaller, candidate))
            break
    found.append(("full", spec, {}))
    return found


def cut_text(record: dict[str, Any]) -> str:
    """A record's cut for the CSV and the page: ``small: hidden_size=128; ...``, ``full`` or "" (not cut)."""
    c = record.get("cut")
    if not isinstance(c, dict) or not c.get("level"):
        return ""
    sets = c.get("set") or {}
    return c["level"] + (": " + "; ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in sets.items())
                         if sets else "")


__all__ = ["LEVELS", "cut", "cut_text", "levels", "shrink_facts", "with_cut"]
