"""diffusers classes by name: required constructor arguments and None defaults from the library's own signatures,
inputs by role from the forward's parameters, their layouts picked by dry runs on meta; each model below is cut by
--shrink and traced for real on the CUDA path (a trace on meta would not check a shape or a channel count)."""

from __future__ import annotations

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
