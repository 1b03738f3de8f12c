"""Models named by spec: transformers' default configurations with their task heads, overrides, config files
and folders, the local Hugging Face cache (offline), diffusers classes; inputs made from the configuration."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import run_cli

import opaudit
from opaudit.errors import InputError
from opaudit.tracing.modes import prepare
from opaudit.zoo.specs import load_spec, split_overrides, with_layers

TINY_GPT2 = "hf:gpt2?n_layer=1&n_embd=32&n_head=2"
TINY_T5 = "hf:t5?num_layers=1&num_decoder_layers=1&d_model=32&d_ff=64&num_heads=2&d_kv=16&vocab_size=100"


def test_overrides_are_read_as_json_where_they_parse():
    assert split_overrides("hf:llama?num_hidden_layers=2&rope_theta=1e4&hidden_act=gelu&tie_word_embeddings=false") \
        == ("hf:llama", {"num_hidden_layers": 2, "rope_theta": 1e4, "hidden_act": "gelu", "tie_word_embeddings": False})
    assert split_overrides("hf:llama") == ("hf:llama", {})


@pytest.mark.parametrize("model_type, head", [("llama", "CausalLM"), ("bert", "MaskedLM"), ("t5", "Seq2SeqLM"),
                                              ("bart", "Seq2SeqLM"), ("whisper", "SpeechSeq2Seq"),
                                              ("vit", "ImageClassification"), ("wav2vec2", "CTC")])
def test_the_most_common_head(model_type, head):
    named = load_spec(f"hf:{model_type}", build=False)
    assert (named.family, named.head) == (model_type, head)


def test_a_tiny_causal_lm_trains_on_its_own_loss_with_labels_from_the_config():
    named = load_spec(TINY_GPT2)
    model, inputs = named.make_model(), named.make_inputs()
    assert type(model).__name__ == "GPT2LMHeadModel" and model.config.n_layer == 1
    assert set(inputs) == {"input_ids", "labels", "use_cache"} and inputs["use_cache"] is False
    assert int(inputs["input_ids"].max()) < model.config.vocab_size
    trace = opaudit.trace(named.make_model, named.make_inputs, train=True, source=named.source)
    assert trace.meta.mode == "real" and trace.meta.source["spec"] == TINY_GPT2
    assert {"aten::embedding_dense_backward.default", "aten::nll_loss_forward.default"} <= set(trace.ops())
    assert opaudit.audit(trace, ["ascend"], landscape=False).verdicts


def test_a_named_head_and_decoder_inputs_for_an_encoder_decoder():
    named = load_spec(TINY_T5.replace("hf:t5", "hf:t5:SequenceClassification"))
    assert named.head == "SequenceClassification"
    inputs = named.make_inputs()
    assert set(inputs) == {"input_ids", "decoder_input_ids", "labels", "use_cache"} and inputs["labels"].shape == (2,)
    with pytest.raises(InputError, match="t5 has no ImageClassification head"):
        load_spec("hf:t5:ImageClassification", build=False)


def test_the_config_hash_follows_the_configuration_not_the_spec_text():
    a = load_spec("hf:gpt2?n_layer=1", build=False)
    assert a.config_hash == load_spec("hf:gpt2?n_layer=1&n_head=12", build=False).config_hash  # 12 is the default
    assert a.config_hash != load_spec("hf:gpt2?n_layer=2", build=False).config_hash
    assert a.config_hash != load_spec("hf:gpt2:SequenceClassification?n_layer=1", build=False).config_hash


def test_a_big_default_configuration_goes_to_meta_by_the_auto_rule():
    named = load_spec("hf:llama")  # 6.7 B parameters
    prepared = prepare(named.make_model, named.make_inputs, "auto", True)
    assert prepared.mode == "meta" and prepared.inputs["input_ids"].device.type == "meta"


def test_images_and_mel_features_from_the_configuration():
    vit = load_spec("hf:vit?image_size=48&num_channels=1", build=True).make_inputs()
    assert vit["pixel_values"].shape == (2, 1, 48, 48) and vit["labels"].shape == (2,)
    whisper = load_spec("hf:whisper?num_mel_bins=40&max_source_positions=50").make_inputs()
    assert whisper["input_features"].shape == (2, 40, 100) and "decoder_input_ids" in whisper


def test_a_config_file_and_a_model_folder(tmp_path):
    config = load_spec(TINY_GPT2).make_model().config
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(config.to_json_string())
    (tmp_path / "other.json").write_text(config.to_json_string())
    by_folder = load_spec(f"hf:{folder}?n_layer=2", build=True)
    assert by_folder.family == "gpt2" and by_folder.make_model().config.n_layer == 2
    assert load_spec(f"hf:{tmp_path / 'other.json'}", build=False).config_hash == \
        load_spec(f"hf:{folder}", build=False).config_hash
    (tmp_path / "bad.json").write_text(json.dumps({"hidden_size": 3}))
    with pytest.raises(InputError, match="has no model_type"):
        load_spec(f"hf:{tmp_path / 'bad.json'}")


def test_the_local_hugging_face_cache_and_offline_message(tmp_path, monkeypatch):
    config = load_spec(TINY_GPT2).make_model().config
    snap = tmp_path / "models--acme--tiny-gpt" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(config.to_json_string())
    (tmp_path / "models--acme--tiny-gpt" / "refs").mkdir()
    (tmp_path / "models--acme--tiny-gpt" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    named = load_spec("hf:acme/tiny-gpt?n_layer=2")
    assert (named.family, named.head, named.make_model().config.n_layer) == ("gpt2", "CausalLM", 2)
    code, out, err = run_cli("scan", "hf:acme/absent-model", "-q", env={"HF_HUB_CACHE": str(tmp_path)})
    assert code == 2 and "Traceback" not in err
    assert f"error: hf:acme/absent-model: acme/absent-model is not in the local Hugging Face cache ({tmp_path})" in err
    assert "hf download acme/absent-model config.json" in err


@pytest.mark.parametrize("spec, message", [
    ("hf:lama", "transformers has no model type 'lama'"),
    ("hf:llama?num_hiden_layers=2", "llama has no configuration field 'num_hiden_layers'"),
    ("hf:llama:ImageClassification", "llama has no ImageClassification head"),
    ("hf:bert:Nonsense", "bert has no Nonsense head"),  # a head no model has (was: no model type 'bert:Nonsense')
    ("hf:llama?num_hidden_layers=x", "the configuration cannot be built"),
    ("diffusers:UNet9000", "has no model class 'UNet9000'"),
    # experts cut below the router's default top-k: said, where the model's own torch.topk failed in the forward
    ("hf:qwen3_moe?num_local_experts=4", r"num_experts_per_tok=8 is more than the 4 experts \(num_local_experts\)"),
    # the fields the configuration has, as the user spelt them: ERNIE's moe_k, OLMoE's num_experts
    ("hf:ernie4_5_moe?moe_num_experts=2", r"moe_k=6 is more than the 2 experts \(moe_num_experts\)"),
    ("hf:olmoe?num_experts=4", r"num_experts_per_tok=8 is more than the 4 experts \(num_experts\)"),
    # DeepSeek-V3's groups: 8 groups of 8 experts leave one each, where the router sums a group's best two
    ("hf:deepseek_v3?n_routed_experts=8&num_experts_per_tok=2", r"leave 1 expert in each"),
])
def test_bad_specs_are_input_errors(spec, message):
    with pytest.raises(InputError, match=message):
        load_spec(spec, build=False)


def test_a_diffusers_class_with_its_default_configuration_made_small():
    pytest.importorskip("diffusers", reason="diffusers is in .[test]")
    named = load_spec("diffusers:UNet2DModel?sample_size=8&block_out_channels=[8,8,16,16]&norm_num_groups=4"
                      "&layers_per_block=1")
    assert named.family == "UNet2DModel"
    trace = opaudit.trace(named.make_model, named.make_inputs, source=named.source)
    assert "aten::native_group_norm.default" in trace.ops() and torch.is_tensor(named.make_inputs()["timestep"])


def test_fewer_layers_keep_one_layer_of_each_kind_and_the_per_layer_lists_follow():
    # a hybrid keeps a linear-attention and a full-attention layer, its layer_types cut to match
    assert with_layers("hf:qwen3_next", 1) == \
        'hf:qwen3_next?num_hidden_layers=2&layer_types=["linear_attention","full_attention"]'
    # a sub-configuration's table of per-layer settings is renumbered with the layers kept
    gemma4 = with_layers("hf:gemma4", 1)
    assert 'text_config.per_layer_config={"1":{"head_dim":512}}' in gemma4
    assert load_spec(gemma4, build=False).params["text_config"]["num_hidden_layers"] == 2
    # a MoE whose first layers are dense keeps one dense and one sparse layer
    assert with_layers("hf:deepseek_v3", 1) == "hf:deepseek_v3?num_hidden_layers=2&first_k_dense_replace=1"
    # overrides given stay; a backbone whose outputs pick layers by index keeps its layers
    assert with_layers("hf:gpt2?n_layer=3&n_embd=96", 1) == "hf:gpt2?n_layer=3&n_embd=96"
    assert with_layers("hf:gpt2?n_embd=96", 2) == "hf:gpt2?n_embd=96&n_layer=2"
    assert with_layers("hf:gpt2?n_embd=64", 1) == "hf:gpt2?n_embd=64"  # 12 heads do not divide 64: as it is
    assert with_layers("hf:dpt", 1) == "hf:dpt"


TINY_MOE = ("hf:qwen3_moe?num_hidden_layers=1&hidden_size=32&intermediate_size=64&moe_intermediate_size=16"
            "&num_local_experts=4&num_experts_per_tok=2&num_attention_heads=2&num_key_value_heads=1"
            "&vocab_size=100")


def test_a_moe_traces_on_meta_in_float32_through_grouped_mm():
    # torch's meta kernel of _grouped_mm takes bf16 only; the CPU kernel and CUDA's fallback take float32
    named = load_spec(TINY_MOE)
    trace = opaudit.trace(named.make_model, named.make_inputs, train=True, mode="meta", source=named.source)
    assert "aten::_grouped_mm.default" in trace.ops()
    real = opaudit.trace(named.make_model, named.make_inputs, train=True, mode="real", source=named.source)
    assert set(trace.ops()) >= {op for op in real.ops() if "grouped_mm" in op}


def test_a_hybrid_trains_without_a_cache():
    spec = ("hf:bamba?num_hidden_layers=1&hidden_size=32&intermediate_size=64&num_attention_heads=2"
            "&num_key_value_heads=1&mamba_n_heads=4&mamba_d_head=16&mamba_d_state=8&mamba_n_groups=1"
            "&mamba_chunk_size=8&vocab_size=100&attn_layer_indices=[]")
    named = load_spec(spec)
    assert named.make_inputs()["use_cache"] is False
    trace = opaudit.trace(named.make_model, named.make_inputs, train=True, mode="meta", source=named.source)
    assert trace.meta.total_calls > 0
    # a causal LM that takes use_cache only through **kwargs: the configuration's default is off
    spec = ("hf:granitemoehybrid?num_hidden_layers=1&layer_types=[\"linear_attention\"]&hidden_size=32"
            "&intermediate_size=64&shared_intermediate_size=32&num_attention_heads=2&num_key_value_heads=1"
            "&num_local_experts=2&vocab_size=100&mamba_n_heads=4&mamba_d_head=16&mamba_d_state=8&mamba_chunk_size=8")
    named = load_spec(spec)
    assert "use_cache" not in named.make_inputs()
    trace = opaudit.trace(named.make_model, named.make_inputs, train=True, mode="meta", source=named.source)
    assert trace.meta.total_calls > 0


def test_the_text_of_a_captioner_the_boxes_of_a_layout_model_and_parakeet_features():
    blip = load_spec("hf:blip?text_config.num_hidden_layers=1&vision_config.num_hidden_layers=1"
                     "&vision_config.image_size=32&vision_config.patch_size=16").make_inputs()
    assert blip["pixel_values"].shape == (2, 3, 32, 32) and blip["input_ids"].shape == blip["labels"].shape
    bros = load_spec("hf:bros?num_hidden_layers=1").make_inputs()
    box = bros["bbox"]
    assert box.shape == (*bros["input_ids"].shape, 4) and bool((box[..., 2:] >= box[..., :2]).all())
    assert int(box.max()) <= 1000
    # a mel spectrogram as (batch, frames, mel bins) where the encoder has no fixed positions (Whisper's has)
    canary = load_spec("hf:canary?encoder_config.num_hidden_layers=1&decoder_config.num_hidden_layers=1").make_inputs()
    assert canary["input_features"].shape[-1] == 128 and "decoder_input_ids" in canary


def test_a_vision_language_model_gets_an_image_and_a_token_per_image_feature():
    spec = ("hf:llava?text_config.num_hidden_layers=1&text_config.hidden_size=32&text_config.intermediate_size=64"
            "&text_config.num_attention_heads=2&text_config.num_key_value_heads=1&text_config.vocab_size=200"
            "&vision_config.num_hidden_layers=1&vision_config.hidden_size=32&vision_config.intermediate_size=64"
            "&vision_config.num_attention_heads=2&vision_config.image_size=32&vision_config.patch_size=8"
            "&vision_config.projection_dim=32&image_token_index=150")
    named = load_spec(spec)
    named.make_model()
    inputs = named.make_inputs()
    # 16 patches (the class token dropped by the default feature selection): 16 image tokens before the words
    assert inputs["pixel_values"].shape == (2, 3, 32, 32)
    assert inputs["input_ids"].shape == (2, 16 + 16) and bool((inputs["input_ids"][:, :16] == 150).all())
    trace = opaudit.trace(named.make_model, named.make_inputs, train=True, mode="real", source=named.source)
    assert "aten::masked_scatter.default" in trace.ops() and "aten::convolution.default" in trace.ops()
    # an image token past the vocabulary (a default configuration's slip): the text alone, as before
    named = load_spec(spec.replace("image_token_index=150", "image_token_index=250"))
    named.make_model()
    assert set(named.make_inputs()) == {"input_ids", "labels"}


def test_inputs_of_other_kinds_a_forward_requires():
    series = load_spec("hf:timesfm?num_hidden_layers=1").make_inputs()["past_values"]
    assert len(series) == 2 and series[0].shape == (512,)  # the configured context
    lxmert = load_spec("hf:lxmert?l_layers=1&x_layers=1&r_layers=1").make_inputs()
    assert lxmert["visual_feats"].shape == (2, 8, 2048) and lxmert["visual_pos"].shape == (2, 8, 4)
    patches = load_spec("hf:pix2struct?text_config.num_layers=1&vision_config.num_hidden_layers=1").make_inputs()
    assert patches["flattened_patches"].shape == (2, 64, 768 + 2) and float(patches["flattened_patches"][0, 9, 0]) == 2
    instruct = load_spec("hf:instructblip?text_config.num_hidden_layers=1&vision_config.num_hidden_layers=1"
                         "&qformer_config.vocab_size=77").make_inputs()
    assert int(instruct["qformer_input_ids"].max()) < 77 and "pixel_values" in instruct
    # apertus1p5's audio tokenizer builds its encoder_config as a property holding one again: read two levels down
    assert load_spec("hf:apertus1p5?text_config.num_hidden_layers=1").make_inputs()["input_ids"].shape == (2, 16)
    reformer = load_spec("hf:reformer?axial_pos_shape=[8,4]&axial_pos_embds_dim=[64,192]").make_inputs()
    assert reformer["input_ids"].shape == (2, 32)  # a Reformer trains on exactly its axial positions


def test_a_ctc_head_gets_a_mask_of_every_frame_for_its_input_lengths():
    named = load_spec("hf:parakeet_ctc?encoder_config.num_hidden_layers=1&encoder_config.hidden_size=64"
                      "&encoder_config.intermediate_size=128&encoder_config.num_attention_heads=2"
                      "&encoder_config.num_key_value_heads=2")
    named.make_model()
    inputs = named.make_inputs()
    # the dry run picked (batch, frames, mel bins); the mask covers the frames
    assert inputs["input_features"].shape == (2, 64, 80) and inputs["attention_mask"].shape == (2, 64)
    trace = opaudit.trace(named.make_model, named.make_inputs, train=True, mode="real", source=named.source)
    assert "aten::_ctc_loss_backward.default" in trace.ops()
