"""What a diffusers class's signature cannot say, for ``diffusers:<Class>``: each entry with why it is needed.

``FIXES``: configuration values for a class whose own default configuration does not build or run (a field left
None that the class needs, a size its parts disagree on); applied to the keys a spec does not set, and part of
the configuration the zoo records; ``call``: methods called on the model once built, as the class's pipelines
call them. ``REQUIRED``: values of required constructor arguments that no diffusers
class gives a default to (what the library's other classes default to is used for the rest,
opaudit.zoo.diffusion.required_arguments). Checked on diffusers 0.42.1.
"""

from __future__ import annotations

from typing import Any

FIXES: dict[str, dict[str, Any]] = {
    "AutoencoderKLAllegro": {
        "why": "its encode raises 'Encoding without tiling has not been implemented yet' unless tiling is on; "
               "Allegro's pipeline example turns it on (pipe.vae.enable_tiling())",
        "call": ["enable_tiling"],
    },
}

REQUIRED: dict[str, dict[str, Any]] = {
    "AudioLDM2ProjectionModel": {
        "why": "the widths of the encoders it joins: CLAP's projection (512), Flan-T5-large (1024) and GPT-2 (768), "
               "as AudioLDM 2's pipeline pairs them",
        "set": {"text_encoder_dim": 512, "text_encoder_1_dim": 1024, "langauge_model_dim": 768},
    },
    "StableAudioProjectionModel": {
        "why": "T5-base's width (768) for the text and the conditioning, and the seconds range (0 to 512) that "
               "Stable Audio Open's start and end times are normalised by",
        "set": {"text_encoder_dim": 768, "conditioning_dim": 768, "min_value": 0, "max_value": 512},
    },
    "UniDiffuserTextDecoder": {
        "why": "the CLIP text encoder's 77 tokens of 768 (the pipeline checks prefix_inner_dim against its width), "
               "projected to UniDiffuser's 64",
        "set": {"prefix_length": 77, "prefix_inner_dim": 768, "prefix_hidden_dim": 64},
    },
    "AutoencoderKLHunyuanImage": {
        "why": "every size is required: an RGB image to 64 latent channels at 32x spatial compression, "
               "HunyuanImage 2.1's VAE layout (six blocks, 128 to 1024 wide)",
        "set": {"in_channels": 3, "out_channels": 3, "latent_channels": 64,
                "block_out_channels": [128, 256, 512, 512, 1024, 1024], "layers_per_block": 2,
                "spatial_compression_ratio": 32, "sample_size": 384},
    },
}
