"""diffusers classes by name: required constructor arguments and None defaults from the library's own signatures,
inputs by role from the forward's parameters, their layouts picked by dry runs on meta; each model below is cut by
--shrink and traced for real on the CUDA path (a trace on meta would not check a shape or a channel count)."""

from __future__ import annotations

import ast

import pytest

pytest.importorskip("diffusers", reason="diffusers is in .[test]")

from opaudit.zoo.diffusion import filled_defaults, required_arguments, role, wrapped_class  # noqa: E402
from opaudit.zoo.run import Job, work  # noqa: E402
from opaudit.zoo.specs import load_spec  # noqa: E402


def _traced(cls: str) -> dict:
    spec = f"diffusers:{cls}"
    named = load_spec(spec, build=False)
    record = work(Job(spec, "k", named.family, "", "diffusers", named.config_hash, ["xpu@2.14"], train=True,
                      shrink=True))
    assert (record["status"], record["mode"]) == ("ok", "real"), record.get("error")
    assert record["cut"]["level"] and record["calls"] > 0  # full: a model with nothing to cut, still real
    return record


def test_roles_come_from_the_parameter_names():
    assert [role(n) for n in ("sample", "hidden_states", "timestep", "timestep_r", "encoder_hidden_states",
                              "pooled_projections", "encoder_attention_mask", "img_ids", "controlnet_cond",
                              "original_size", "img_shapes")] == \
        ["latent", "latent", "time", "time", "text", "pooled", "mask", "ids_grid", "cond", "size", "shapes"]
    assert role("timestep_cond") is None and role("return_dict") is None  # an embedding, a flag: left alone


def test_constructor_arguments_from_the_class_and_the_library():
    import diffusers

    # a wrapper of several ControlNets holds one of the class its annotation (or its name without Multi) names
    assert wrapped_class(diffusers.MultiControlNetModel) is diffusers.ControlNetModel
    assert wrapped_class(diffusers.FluxMultiControlNetModel) is diffusers.FluxControlNetModel
    # a None default the class reads: the value most diffusers classes give that name, the fewest of them
    assert filled_defaults(diffusers.HunyuanDiT2DModel) == {"in_channels": 16, "patch_size": 2}
    assert filled_defaults(diffusers.UNet2DModel) == {}
    # required widths no class defaults: the table of diffusers_fixes, each with why
    assert required_arguments(diffusers.AudioLDM2ProjectionModel) == \
        {"text_encoder_dim": 512, "text_encoder_1_dim": 1024, "langauge_model_dim": 768}


def test_a_video_vae_gets_its_frames_as_a_fifth_dimension():
    """CogVideoX's VAE unpacks (batch, channels, frames, height, width): the 4-D image it got before failed."""
    named = load_spec("diffusers:AutoencoderKLCogVideoX?layers_per_block=1&block_out_channels=[32,32,32,32]"
                      "&norm_num_groups=8&latent_channels=4&sample_height=16&sample_width=16")
    model = named.make_model()
    assert named.make_inputs()["sample"].dim() == 5
    assert model is not None


@pytest.mark.parametrize("cls", ["AutoencoderKLWan", "AudioLDM2ProjectionModel"])
def test_bespoke_models_are_traced_for_real(cls):
    """Wan's VAE takes its frames as a fifth dimension (the 4-D image it got before failed); AudioLDM 2's
    projection has three required widths and a forward whose every input is optional (it got none before)."""
    _traced(cls)


def _inputs(spec: str) -> dict:
    named = load_spec(spec)
    named.make_model()
    return named.make_inputs()


def test_meta_errors_that_cannot_decide_and_those_that_can():
    from opaudit.zoo.diffusion import meta_only

    assert meta_only("RuntimeError: cannot repeat_interleave a meta tensor without output_size")
    assert meta_only("NotImplementedError: Cannot copy out of meta tensor; no data!")
    assert meta_only("ValueError: FlexAttention is only supported on CUDA, CPU, HPU, or MPS devices. Found input "
                     "tensors on meta device.")
    # a shape error names the meta tensor's type: an answer, not meta's limit
    assert not meta_only("RuntimeError: expand(MetaFloatType{[2, 1]}, size=[2]): the number of sizes provided (1) "
                         "must be greater or equal to the number of dimensions in the tensor (2)")


def test_a_shape_error_on_meta_rules_a_candidate_out():
    """I2VGenXL's UNet expands its timestep to the batch: the (batch, 1) candidate fails on meta with an error that
    names MetaFloatType, which was once taken for meta's own limit and picked."""
    inputs = _inputs("diffusers:I2VGenXLUNet?layers_per_block=1&block_out_channels=[32,32,32,32]&norm_num_groups=8"
                     "&num_attention_heads=2&attention_head_dim=8&cross_attention_dim=32")
    assert inputs["timestep"].dim() <= 1


def test_a_dry_run_meta_cannot_decide_is_run_for_real():
    """A model whose dry run reads a value (or calls an op meta refuses) is run for real on the cut model, and
    a candidate the real run refuses is not picked (meta lets an integer timestep into a Linear through)."""
    import torch
    from torch import nn

    from opaudit.zoo.diffusion import _Reach

    class ReadsData(nn.Module):  # the shape of what the sample is read as, as a MoE reads its routing
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)

        def forward(self, sample):
            return self.proj(sample[: int(sample.shape[0])].float() if sample.sum().item() else sample)

    probe = _Reach(ReadsData())
    assert probe.reach({"sample": torch.ones(2, 4)})[0] is True and probe.real == 1
    assert probe.reach({"sample": torch.ones(2, 3)})[0] is False and probe.real == 2
    with torch.device("meta"):
        on_meta = ReadsData()
    assert _Reach(on_meta).reach({"sample": torch.ones(2, 4)})[0] is None  # a model built on meta: no answer


def test_a_second_latent_concatenated_on_channels_is_left_out_with_the_others():
    """EasyAnimate's transformer concatenates its inpainting and control latents to the sample: its first layer
    takes 16 channels, so both are left out at once (neither alone runs)."""
    inputs = _inputs("diffusers:EasyAnimateTransformer3DModel?num_layers=1&num_attention_heads=2")
    assert "inpaint_latents" not in inputs and "control_latents" not in inputs
    assert inputs["hidden_states"].dim() == 5


def test_an_output_with_nothing_to_backpropagate_gets_an_optional_input():
    """Stable Audio's projection is the identity for T5's width: only the seconds it embeds train."""
    inputs = _inputs("diffusers:StableAudioProjectionModel")
    assert {"start_seconds", "end_seconds"} & set(inputs)


def test_a_wrapper_unpacks_its_models_outputs_as_tuples():
    inputs = _inputs("diffusers:MultiControlNetModel?layers_per_block=1&block_out_channels=[32,32,32,32]"
                     "&norm_num_groups=8&attention_head_dim=2&cross_attention_dim=32")
    assert inputs["return_dict"] is False


def test_roles_of_sizes_lengths_and_conditions():
    assert [role(n) for n in ("text_lens", "added_time_ids", "micro_conds", "control_type", "control_type_idx",
                              "position_ids", "segment_ids", "style", "num_frames", "start_seconds")] == \
        ["lengths", "micro", "micro", "control_type", "control_index", "positions", "segments", "label", "extent",
         "time"]
    # SVD's added time ids: as many micro-conditions as its projection takes, picked by the dry runs
    inputs = _inputs("diffusers:UNetSpatioTemporalConditionModel?layers_per_block=1&block_out_channels=[32,32,32,32]"
                     "&num_attention_heads=[2,2,2,2]&cross_attention_dim=32&addition_time_embed_dim=8"
                     "&projection_class_embeddings_input_dim=24")
    assert tuple(inputs["added_time_ids"].shape) == (2, 3)


def test_a_none_default_is_filled_with_another_library_value_where_the_commonest_does_not_build():
    """Transformer2DModel's in_channels: 16, the commonest, does not divide into its norm's 32 groups."""
    import diffusers

    fill = filled_defaults(diffusers.Transformer2DModel)
    assert list(fill) == ["in_channels"] and fill["in_channels"] % 32 == 0


def test_the_diffusers_cut_follows_heads_without_a_head_size_and_layers_by_block():
    from opaudit.zoo.shrink import cut

    z = cut("diffusers:ZImageTransformer2DModel", "small")  # dim 3840 = 30 heads of 128, grouped keys and values
    assert (z["n_heads"], z["dim"], z["n_kv_heads"], z["n_layers"]) == (2, 256, 2, 1)
    assert cut("diffusers:Krea2Transformer2DModel", "small")["num_key_value_heads"] == 2
    assert cut("diffusers:StableCascadeUNet", "small")["down_num_layers_per_block"] == [1, 1]
    assert cut("diffusers:Ideogram4PromptEnhancerHead", "small")["vocab_size"] == 8192


def test_a_fix_calls_what_the_pipelines_call_on_the_model():
    """Allegro's VAE encodes only tiled; its pipeline turns tiling on (diffusers_fixes.FIXES, with why)."""
    from opaudit.zoo.diffusers_fixes import FIXES

    assert FIXES["AutoencoderKLAllegro"]["call"] == ["enable_tiling"] and FIXES["AutoencoderKLAllegro"]["why"]
    named = load_spec("diffusers:AutoencoderKLAllegro?layers_per_block=1&block_out_channels=[32,32,32,32]"
                      "&sample_size=32")
    assert named.make_model().use_tiling


def test_a_cut_unet_keeps_a_channel_for_each_head():
    """UNet3D reads attention_head_dim (64) as its head count: on 32-wide blocks a head had no channel left."""
    from opaudit.zoo.shrink import cut

    assert cut("diffusers:UNet3DConditionModel", "small")["attention_head_dim"] == 8
    assert "attention_head_dim" not in cut("diffusers:UNet2DConditionModel", "small")  # 8 already


def test_packed_reference_clips_get_their_examples_and_dropped_tokens_none():
    """ACE-Step's condition encoder takes its reference clips packed, each with the example it belongs to (it
    counts them from the data: meta cannot, the dry run is real); GLM-Image drops none of its prior tokens."""
    assert [role(n) for n in ("refer_audio_acoustic_hidden_states_packed", "refer_audio_order_mask",
                              "prior_token_drop", "prior_token_id")] == ["latent", "mask", "drop", "ids"]
    inputs = _inputs("diffusers:AceStepConditionEncoder?num_attention_heads=2&num_key_value_heads=2")
    assert inputs["refer_audio_order_mask"].tolist() == [0, 1]


def test_the_small_cut_takes_every_count_named_layers_or_blocks():
    """ACE-Step's 24 num_hidden_layers and HunyuanDiT ControlNet's 40 transformer_num_layers were no name the
    cut knew: a billion parameters left. ``narrow`` is the cut without them, where one is not a count."""
    from opaudit.zoo.shrink import cut, levels

    small = cut("diffusers:AceStepTransformer1DModel", "small")
    assert small["num_hidden_layers"] == 1 and small["num_attention_heads"] == 2
    assert "num_hidden_layers" not in cut("diffusers:AceStepTransformer1DModel", "narrow")
    assert cut("diffusers:HunyuanDiT2DControlNetModel", "small")["transformer_num_layers"] == 1
    assert [level for level, _, _ in levels("diffusers:AceStepTransformer1DModel")] == ["small", "narrow", "full"]
    # the layers Wan VACE adds its control to, by index: the one layer left (index 5 of a 1-layer model: no build)
    assert cut("diffusers:WanVACETransformer3DModel", "small")["vace_layers"] == [0]


def test_an_encoders_input_channels_and_a_spectrograms_bins_are_channels():
    """The consistency decoder's VAE encodes RGB (encoder_in_channels 3; its latent has 4); a vocoder's mel
    spectrogram has num_mels channels: neither was among the channels tried."""
    import diffusers

    from opaudit.zoo.diffusion import _CHANNELS, _config_ints, class_defaults

    assert _config_ints(class_defaults(diffusers.ConsistencyDecoderVAE), _CHANNELS)[0] == 3
    assert _config_ints(class_defaults(diffusers.MMAudioVocoder), _CHANNELS) == [128]


def test_inputs_a_pipeline_makes_come_from_the_fixes():
    """What a class's own pipeline passes and no role can guess (a rotary embedding, a packed sequence's mask, a
    text encoder's states per block) is data in diffusers_fixes.FIXES, each with why; the only candidate tried."""
    import diffusers
    import torch

    from opaudit.zoo.diffusers_fixes import FIXES
    from opaudit.zoo.diffusion import _params, class_defaults, fixed_input

    for name, fix in FIXES.items():  # every input an entry gives is a parameter of the class's forward
        assert fix["why"] and set(fix.get("inputs", {})) <= set(_params(getattr(diffusers, name))), name
    g = torch.Generator().manual_seed(0)

    def made(cls: str, name: str, **config: object) -> object:
        c = getattr(diffusers, cls)
        return fixed_input(c, name, {**class_defaults(c), **config}, g)[0]

    assert made("PriorTransformer", "encoder_hidden_states").shape == (2, 77, 768)
    cos, sin = made("HunyuanDiT2DModel", "image_rotary_emb")  # 32x32 latent, 2x2 patches, heads of 88
    assert cos.shape == sin.shape == (256, 88)
    assert made("QwenImage21Transformer2DModel", "img_mask").tolist() == [[False] * 8 + [True] * 4] * 2
    layers = made("BriaFiboTransformer2DModel", "text_encoder_layers", num_layers=1, num_single_layers=1)
    assert len(layers) == 2 and layers[0].shape == (2, 8, 2048)
    assert made("LuminaNextDiT2DModel", "image_rotary_emb", sample_size=32).dtype == torch.complex64
    assert fixed_input(diffusers.UNet2DModel, "sample", {}, g) == []


@pytest.mark.parametrize("cls", ["PriorTransformer", "MiniMaxMusic3Transformer1DModel", "MultiAdapter"])
def test_models_given_their_pipelines_inputs_are_traced_for_real(cls):
    """The prior adds a position embedding to exactly its 77 + 4 tokens (a 27-token guess failed); MiniMax
    Music 3 concatenates latents and a condition of the same length on channels (a 4096-sample wave failed);
    MultiAdapter refuses one adapter (FIXES' models: two) and zips a list of images with them."""
    _traced(cls)


def test_the_sizes_of_the_pipeline_inputs_are_arithmetic_of_the_configuration():
    """diffusers_fixes' input sizes are expressions of the configuration's numbers, read without running Python:
    every one of the data's evaluates, and anything but arithmetic of known names is refused."""
    from opaudit.zoo.diffusers_fixes import FIXES
    from opaudit.zoo.diffusion import arithmetic

    texts: list[str] = []

    def walk(x: object) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "shape":
                    texts.extend(d for d in v if isinstance(d, str))
                elif k == "times" and isinstance(v, str):
                    texts.append(v)
                elif k == "runs":
                    texts.extend(n for _, n in v if isinstance(n, str))
                elif k in ("range", "args"):  # a part's positions, an object's sizes
                    texts.extend(n for n in (v.values() if isinstance(v, dict) else v) if isinstance(n, str))
                elif k in ("number", "rows") and isinstance(v, str):
                    texts.append(v)
                else:
                    walk(v)
        elif isinstance(x, list | tuple):
            for v in x:
                walk(v)

    for entry in FIXES.values():
        walk(entry.get("inputs", {}))
    assert len(texts) > 100
    names = {n.id: 3 for t in texts for n in ast.walk(ast.parse(t, mode="eval")) if isinstance(n, ast.Name)}
    assert all(isinstance(arithmetic(t, names), int) for t in texts)
    assert arithmetic("2 * in_visual_dim + 1", {"in_visual_dim": 16}) == 33
    assert arithmetic("-(tokens // 4 - 10) % 7", {"tokens": 8}) == 1
    for bad in ('__import__("os")', "in_channels.real", "2 ** 64", "x", "1 / 2"):
        with pytest.raises(ValueError, match="not a size expression"):
            arithmetic(bad, {"in_channels": 4})


def test_the_cut_narrows_widths_the_heads_do_not_name():
    """Five classes stayed over a billion parameters after the cut, traced on meta only: Kandinsky 6's model_dim
    (4096: heads of its rotary axes' 128) with no head count, MiniMax H3's hidden_size (5376) that is not its
    heads x head size, block lists whose first is not a multiple of 32 (a VAE's 16, 128, ... 1024) or that narrow
    (an upscaler's stages 2048, 1024, 512), SVD's heads per block (5 on a 32-wide block), Kandinsky 3's 32 norm
    groups on the 16 channels its ResNets halve 32 to; and a UNet whose up blocks need two layers each."""
    from opaudit.zoo.shrink import cut

    k6 = cut("diffusers:Kandinsky6Transformer3DModel", "small")
    assert (k6["model_dim"], k6["ff_dim"]) == (256, 1024)  # two heads of 32 + 48 + 48, the feed-forward / 16
    h3 = cut("diffusers:MiniMaxH3Transformer3DModel", "small")
    assert (h3["num_attention_heads"], h3["hidden_size"], h3["ffn_dim"], h3["time_embed_hidden_dim"]) == \
        (2, 336, 896, 336)
    assert cut("diffusers:Kandinsky6SRVAE", "small")["encoder_block_out_channels"] == [16, 32, 64, 128, 256]
    assert cut("diffusers:Kandinsky6SRLatentUpscalerBank", "small")["stage_channels"] == [256, 128, 64]
    assert cut("diffusers:UNetSpatioTemporalConditionModel", "small")["num_attention_heads"] == [4, 8, 16, 16]
    k3 = cut("diffusers:Kandinsky3UNet", "small")
    assert (k3["groups"], k3["layers_per_block"], k3["block_out_channels"]) == (16, 2, [32, 64, 128, 256])
    # a list cut by its widest that does not build is kept (the consistency decoder's 80 channels in 32 groups)
    assert "decoder_block_out_channels" not in cut("diffusers:ConsistencyDecoderVAE", "small")
    assert cut("diffusers:UNet2DConditionModel", "small")["block_out_channels"] == [32, 64, 128, 128]  # as before


@pytest.mark.parametrize("cls", ["Kandinsky6SRVAE", "Kandinsky6SRLatentUpscalerBank", "Kandinsky3UNet"])
def test_models_over_a_billion_parameters_are_cut_to_run_for_real(cls):
    assert _traced(cls)["cut"]["level"] == "small"


def test_packed_sequences_ranges_dicts_and_objects_come_from_the_fixes():
    """A packed sequence's parts by their positions in it (a range of the other inputs' counts), its tags one
    row for all examples, a count the forward takes as an int, a conditioning dict, and a cache object of the
    model's own module: the pipelines pass these where no role can."""
    import diffusers
    import torch

    from opaudit.zoo.diffusion import class_defaults, fixed_input

    g = torch.Generator().manual_seed(0)

    def made(cls: str, name: str) -> object:
        c = getattr(diffusers, cls)
        return fixed_input(c, name, class_defaults(c), g)[0]

    assert made("MiniMaxH3Transformer3DModel", "audio_indices").tolist() == list(range(8, 24))
    assert made("MiniMaxH3Transformer3DModel", "token_tags").tolist() == [1] * 8 + [2] * 16 + [0] * 16
    assert made("Cosmos3OmniTransformer", "sequence_length") == 24
    conditioning = made("RFD4ProteinaTransformer", "conditioning")
    assert conditioning["supports_local_latent"].all() and conditioning["condition_hbond_1_atom"].shape == (2, 16, 37)
    cache = made("WanAnimate2Transformer3DModel", "kv_cache")
    assert type(cache).__name__ == "WanAnimate2KVCache" and len(cache.layer_caches) == 40
    assert made("WanAnimate2Transformer3DModel", "offset_grid_sizes").tolist() == [[1, 4, 4]]


@pytest.mark.parametrize("cls", ["MiniMaxH3Transformer3DModel", "SanaWMLTX2RefinerTransformer3DModel",
                                 "RFD4ProteinaTransformer", "RFD4ProteinaAutoencoder", "Cosmos3OmniTransformer",
                                 "WanAnimate2Transformer3DModel", "OmniGenTransformer2DModel",
                                 "AutoencoderKLMiniMaxH3", "WanAnimateTransformer3DModel", "SanaWMTransformer3DModel",
                                 "BriaFibo2Transformer2DModel", "AutoencoderKLAllegro"])
def test_models_given_their_packed_inputs_are_traced_for_real(cls):
    """MiniMax H3 and Cosmos 3 pack text, audio or video rows into one sequence with their positions in it;
    Sana-WM's refiner takes the rotary embedding its pipeline builds; RFD4 Proteina its protein features as a
    dict (its autoencoder its residue tables, required); Wan-Animate 2's reference pass the cache it fills;
    OmniGen the rotary factors its default leaves None, and its prompt and mask over the joint sequence;
    MiniMax H3's VAE two chunks of frames (one decodes to nothing); Wan-Animate its pose latents and face
    pixels; SANA-WM latents of a few rows, not its 720-pixel image size; FIBO 2 its text bundles stacked;
    Allegro's tiled VAE one video of one whole tile (a smaller one encoded to zeros, nothing to train)."""
    _traced(cls)


def test_a_model_that_borrows_its_pairs_modules_is_built_with_them():
    """Z-Image's ControlNet runs with the embedders and refiners of the transformer its pipeline pairs it with
    (from_transformer; FIXES' borrows), built at the sizes both name; its forward reads an attribute its
    __init__ never sets (FIXES' attributes)."""
    named = load_spec("diffusers:ZImageControlNetModel?dim=256&n_heads=2&n_kv_heads=2&n_refiner_layers=1")
    model = named.make_model()
    assert model.t_embedder is not None and model.noise_refiner[0].attention.heads == 2
    assert model.gradient_checkpointing is False
    assert _traced("ZImageControlNetModel")["cut"]["level"] == "small"


def test_a_fixed_input_makes_no_candidates_of_its_role():
    """SANA-WM's latents by role were made at its 720-pixel image size, 2.6 GB each, though its fix gives them:
    a fixed input is the only value made."""
    from unittest import mock

    import opaudit.zoo.diffusion as diffusion

    made: list[str] = []
    real = diffusion._candidates

    def spy(name, *args):
        made.append(name)
        return real(name, *args)

    with mock.patch.object(diffusion, "_candidates", spy):
        inputs = _inputs("diffusers:SanaWMTransformer3DModel?num_layers=1&num_attention_heads=2")
    assert "hidden_states" not in made and tuple(inputs["hidden_states"].shape) == (2, 128, 2, 8, 8)


def test_a_vaes_decoder_blocks_are_cut_by_their_own_name():
    """Cosmos' VAE names its decoder's widths decode_block_out_channels: cut with the encoder's, it runs for real
    within the timeout (it timed out at 512 wide)."""
    from opaudit.zoo.shrink import cut

    assert cut("diffusers:AutoencoderKLCosmos", "small")["decode_block_out_channels"] == [32, 64, 64, 64]
