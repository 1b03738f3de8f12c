"""opaudit zoo --shrink: a default configuration cut until the model runs on real kernels (the MoE routing
included), less where the configuration refuses, and the cut named in the record and zoo.csv."""

from __future__ import annotations

import importlib.util

import pytest

from opaudit.errors import InputError
from opaudit.zoo.report import cut_text
from opaudit.zoo.run import Job, work
from opaudit.zoo.shrink import cut, levels
from opaudit.zoo.specs import all_specs, load_spec


def test_a_cut_keeps_heads_dividing_and_experts_routable():
    sets = cut("hf:mixtral", "small")  # 4096 wide, 32 heads of 128 (8 key/value), 8 experts of which 2 a token
    assert sets["hidden_size"] == 128 and sets["num_hidden_layers"] == 1
    heads, kv = sets["num_attention_heads"], sets.get("num_key_value_heads", 1)
    assert heads * 128 == 128 and heads % kv == 0  # each head keeps its size (rotary sections still add up)
    assert sets["num_local_experts"] == 4 and sets["vocab_size"] == 1024
    config = load_spec("hf:mixtral?" + "&".join(f"{k}={v}" for k, v in sets.items()), build=False).params
    assert config["num_experts_per_tok"] == 2 <= config["num_local_experts"]
    # the spec's own overrides stay as given
    assert "hidden_size" not in cut("hf:mixtral?hidden_size=256&num_attention_heads=2", "small")
    # deepseek's expert groups follow the experts: 2 groups of 2, the best group of them
    ds = cut("hf:deepseek_v3", "small")
    assert (ds["n_routed_experts"], ds["n_group"], ds["topk_group"], ds["num_experts_per_tok"]) == (4, 2, 1, 2)


def test_hashed_embedding_rows_are_cut_like_a_vocabulary():
    """BLT's byte n-gram embeddings (500,002 rows for each of 6 group sizes, indexed by a hash modulo the rows) were
    most of its cut model: 1.5 GB, beyond the memory cap of a zoo of 2 jobs, so it ran on meta and met nonzero."""
    import torch

    for level in ("small", "narrow"):
        sets = cut("hf:blt", level)
        assert sets["encoder_hash_byte_group_vocab"] == 1024, level
    named = load_spec("hf:blt?" + "&".join(f"{k}={v}" for k, v in cut("hf:blt", "small").items()))
    with torch.device("meta"):
        model = named.make_model()
    assert sum(p.numel() for p in model.parameters()) < 20_000_000


def test_layer_counts_of_other_names_are_cut():
    """Perceiver's 26 self-attention layers and VideoPrism's spatial and temporal layers were kept whole: the two
    slowest models of the atlas after the cut (20 s a train step each on one core)."""
    assert cut("hf:perceiver", "small")["num_self_attends_per_block"] == 1
    prism = cut("hf:videoprism", "layers")
    assert prism["vision_config.num_spatial_layers"] == prism["vision_config.num_temporal_layers"] == 1


def test_each_level_cuts_less_down_to_the_spec_itself():
    found = levels("hf:llama")  # each built on meta first: a cut the configuration refuses is left out
    assert [level for level, _, _ in found] == ["small", "narrow", "layers", "full"]
    assert found[-1] == ("full", "hf:llama", {}) and found[2][2] == {"num_hidden_layers": 1}
    assert "hidden_size" in found[0][2] and "hidden_size" not in found[1][2] and found[1][2]["intermediate_size"] == 512


def test_a_moe_model_is_traced_for_real_on_the_cuda_path():
    """Qwen3-MoE's routing calls torch.histc on an int tensor on CUDA; the default configuration (30 B) only
    passed on meta, where no kernel checks a dtype."""
    record = work(Job("hf:qwen3_moe", "k", "qwen3_moe", "CausalLM", "hf", "h", ["xpu@2.14"], train=True,
                      shrink=True))
    assert (record["status"], record["mode"]) == ("ok", "real"), record.get("error")
    assert record["cut"]["level"] == "small" and record["cut"]["set"]["num_local_experts"] == 4
    assert cut_text(record).startswith("small: num_hidden_layers=1; num_local_experts=4;")
    assert record["calls"] > 0 and record["targets"][0]["target"] == "xpu@2.14"


def test_every_library_lists_its_models_or_says_why_not():
    with pytest.raises(InputError, match="no such library"):
        all_specs("keras")
    if importlib.util.find_spec("timm") is None:
        with pytest.raises(InputError) as e:
            load_spec("timm:resnet50")
        assert e.value.hint == "pip install 'opaudit[timm]'"
        return
    assert "timm:resnet50" in all_specs("timm")  # listed even where timm does not import (its sources read)
    try:
        import timm  # noqa: F401
    except ImportError as e:
        with pytest.raises(InputError, match=f"timm does not import: No module named '{e.name}'"):
            load_spec("timm:resnet50")
    else:
        assert load_spec("timm:resnet50").make_model() is not None


def test_what_a_model_type_needs_of_its_cut_is_data():
    from opaudit.zoo.shrink import shrink_facts

    assert shrink_facts("rwkv")["layers"] == 2 and shrink_facts("llama") == {}
    # RWKV's initialization divides by the layers less one: two layers, the attention's width with the model's
    rwkv = cut("hf:rwkv", "small")
    assert rwkv["num_hidden_layers"] == 2 and rwkv["attention_hidden_size"] == rwkv["hidden_size"] == 128
    # Zamba ties its shared block from the first hybrid layer to the others: two of each kind
    kinds = cut("hf:zamba", "layers")["layers_block_type"]
    assert len(kinds) == 4 and all(kinds.count(k) == 2 for k in kinds)
    # Dory's interleaved layer list and its input, recurrent and output blocks: the layers as data say
    dory = cut("hf:dory", "layers")
    assert dory["n_input_layers"] + dory["n_recurrent_layers"] + dory["n_output_layers"] == dory["num_hidden_layers"]
    # rotary sections the code falls back to are cut with the head: still half of it
    ernie = cut("hf:ernie4_5_vl_moe", "small")
    head = ernie["text_config.hidden_size"] // ernie["text_config.num_attention_heads"]
    assert sum(ernie["text_config.rope_parameters"]["mrope_section"]) * 2 == head


def test_a_cut_keeps_the_layers_that_share_a_cache_and_the_tower_an_adapter_picks():
    # Gemma 3n's last layers reuse the KV of earlier ones of their kind: a producer and a user of each kind
    g = cut("hf:gemma3n_text", "layers")
    shared = g["num_kv_shared_layers"]
    assert 0 < shared < g["num_hidden_layers"]
    assert set(g["layer_types"][:-shared]) == set(g["layer_types"][-shared:])
    # Molmo 2's adapter picks vision layers 24 and 18: the tower keeps its layers (its width is still cut)
    molmo = cut("hf:molmo2", "small")
    assert "vision_config.num_hidden_layers" not in molmo and "vision_config.hidden_size" in molmo
    # the widths one sub-configuration names of another follow it (Dots 3's adapters, Dia's cross-attention)
    dots = cut("hf:dots3_note", "small")
    assert dots["vision_config.adapter_out_dim"] == dots["text_config.hidden_size"]
    assert dots["audio_config.adapter_input_size"] == dots["audio_config.hidden_size"]
    dia = cut("hf:dia", "small")
    assert dia["decoder_config.cross_hidden_size"] == dia["encoder_config.hidden_size"]
