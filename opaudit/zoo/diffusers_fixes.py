"""What a diffusers class's signature cannot say, for ``diffusers:<Class>``: each entry with why it is needed.

``FIXES``: configuration values for a class whose own default configuration does not build or run (a field left
None that the class needs, a size its parts disagree on); applied to the keys a spec does not set, and part of
the configuration the zoo records (``set``); ``call``: methods called on the model once built, as the class's
pipelines call them; ``inputs``: forward inputs as the class's pipeline makes them, where no role of
opaudit.zoo.diffusion.ROLES can guess them (a rotary embedding, a packed sequence's ids, a list per block; the
format: opaudit.zoo.diffusion.fixed_input); ``models``: how many models a wrapper of several needs at least;
``layers``: layer counts the --shrink cut keeps at least (a class that does not run with fewer); ``borrows``:
the model whose modules a class runs with, and the class method that lends them, as its pipeline pairs them;
``attributes``: attributes set on the model once built (one its forward reads that the class never sets).
``REQUIRED``: values of required constructor arguments that no diffusers
class gives a default to (what the library's other classes default to is used for the rest,
opaudit.zoo.diffusion.required_arguments). Checked on diffusers 0.42.1.
"""

from __future__ import annotations

from typing import Any

_PATCHES = "(height // patch_size) * (width // patch_size)"  # the latent patches of an image transformer
_OMNIGEN_TOKENS = f"words + 1 + {_PATCHES}"  # OmniGen's sequence: the prompt, a time token, the image's patches
_HUNYUAN_DIT: dict[str, Any] = {
    "why": "the default hidden_size (1152) is not its heads times their size (16 x 88 = 1408) that its attention "
           "and adaptive norms are built with, so the default configuration does not run; HunyuanDiT v1.x's "
           "checkpoints set 1408. Its pipeline passes the 2-D rotary embedding (get_2d_rotary_pos_embed: cos and "
           "sin, one row of the head size per latent patch), the style (0), the image's sizes (original, target "
           "and crop corner together: batch, 6), and the CLIP text (text_len tokens) and T5 text (text_len_t5 "
           "tokens) with their masks",
    "set": {"hidden_size": 1408},
    "inputs": {"image_rotary_emb": {"tuple": [{"shape": [_PATCHES, "attention_head_dim"]}] * 2},
               "style": {"shape": ["batch"], "dtype": "long"},
               "image_meta_size": {"shape": ["batch", 6]},
               "encoder_hidden_states": {"shape": ["batch", "text_len", "cross_attention_dim"]},
               "text_embedding_mask": {"shape": ["batch", "text_len"], "dtype": "long", "fill": 1},
               "encoder_hidden_states_t5": {"shape": ["batch", "text_len_t5", "cross_attention_dim_t5"]},
               "text_embedding_mask_t5": {"shape": ["batch", "text_len_t5"], "dtype": "long", "fill": 1}},
}

FIXES: dict[str, dict[str, Any]] = {
    "AceStepAudioTokenizer": {
        "why": "it turns 25 Hz acoustic latents into 5 Hz tokens by pooling windows of pool_window_size frames: "
               "its attention pooler unpacks the latents already cut into windows, (batch, windows, "
               "pool_window_size, audio_acoustic_hidden_dim)",
        "inputs": {"hidden_states": {"shape": ["batch", 4, "pool_window_size", "audio_acoustic_hidden_dim"]}},
    },
    "AceStepTransformer1DModel": {
        "why": "ACE-Step's pipeline passes the noise latents as (batch, length, audio_acoustic_hidden_dim) and the "
               "context latents as the source latents and their chunk mask concatenated on the last axis "
               "(torch.cat([src_latents, chunk_mask], dim=-1)): with the latents, in_channels in all; the "
               "condition encoder's states at the model's width (its encoder_hidden_size defaults to hidden_size)",
        "inputs": {"encoder_hidden_states": {"shape": ["batch", "words", "hidden_size"]},
                   "hidden_states": {"shape": ["batch", "tokens", "audio_acoustic_hidden_dim"]},
                   "context_latents": {"shape": ["batch", "tokens", "in_channels - audio_acoustic_hidden_dim"]}},
    },
    "AnyFlowFARTransformer3DModel": {
        "why": "AnyFlow FAR's pipeline passes the latents frames first, (batch, frames, channels, height, width) "
               "(init_latents.permute(0, 2, 1, 3, 4)), with the frames per chunk (chunk_partition, which must "
               "sum to the frames): two frames, one chunk each; its timesteps per frame, (batch, frames)",
        "inputs": {"hidden_states": {"shape": ["batch", 2, "in_channels", "height", "width"]},
                   "timestep": {"shape": ["batch", 2]}, "r_timestep": {"shape": ["batch", 2]},
                   "chunk_partition": {"value": [1, 1]}},
    },
    "AutoencoderKLHunyuanVideo15": {
        "why": "a causal video VAE: the first frame is encoded alone and the rest in groups of its "
               "temporal_compression_ratio (4), so the frames are 1 + 4k, RGB, (batch, 3, frames, height, width), "
               "height and width multiples of its spatial_compression_ratio (16); one video, as its pipeline "
               "encodes one: its mid-block attention expands the causal mask per example, (batch, n, n), which "
               "the scaled-dot-product attention broadcasts against (batch, 1, n, n): two examples do not run",
        "inputs": {"sample": {"shape": [1, "in_channels", "1 + temporal_compression_ratio",
                                        "2 * spatial_compression_ratio", "2 * spatial_compression_ratio"]}},
    },
    "AutoencoderKLLTX2Video": {
        "why": "LTX-2's video VAE patchifies 4x4 and downsamples 8x more in space (32x in all) and 8x in time, "
               "causally: the frames are 1 + 8k and height and width at least 64 to keep a padded latent pixel, "
               "(batch, 3, frames, height, width) as the LTX-2 pipelines encode their conditioning frames",
        "inputs": {"sample": {"shape": ["batch", "in_channels", 9, 64, 64]}},
    },
    "AutoencoderKLMagvit": {
        "why": "EasyAnimate's causal video VAE encodes the first frame alone and the rest in groups of "
               "num_sample_frames_batch_size (4), each group through convolutions that need their temporal "
               "padding + 1 frames: 1 + 4k frames (a 2-frame video leaves an empty group); RGB, (batch, 3, "
               "frames, height, width) as EasyAnimate's pipelines encode a video",
        "inputs": {"sample": {"shape": ["batch", "in_channels", 5, "height", "width"]}},
    },
    "AutoencoderKLMiniMaxH3": {
        "why": "MiniMax H3's video VAE encodes in chunks of clip_length frames and drops the token_drop trailing "
               "latent frames of each; its decode cross-fades consecutive chunks and decodes one chunk fewer than "
               "it counts when it drops any (num_chunks - 1), so a video of one chunk decodes to nothing (an empty "
               "torch.cat): two chunks, 2 * clip_length RGB frames, (batch, 3, frames, height, width)",
        "inputs": {"sample": {"shape": ["batch", "in_channels", "2 * clip_length", "height", "width"]}},
    },
    "AutoencoderKLMochi": {
        "why": "its encoder adds Fourier features to the RGB video (3 channels to in_channels = 15) itself: "
               "the input is the video's out_channels (3) frames, (batch, 3, frames, height, width), frames a "
               "multiple of its 6x temporal compression",
        "inputs": {"sample": {"shape": ["batch", "out_channels", 6, "height", "width"]}},
    },
    "BriaFibo2Transformer2DModel": {
        "why": "FIBO 2's pipeline passes the text encoder's features as bundles stacked on the second axis, "
               "(batch, 1 + len(injection_layer_ids), words, cap_feat_dim) (the class's docstring): the "
               "Perceiver's bundle, then one per block its text is injected into (5 by default: 6 bundles)",
        "inputs": {"encoder_hidden_states": {"shape": ["batch", 6, "words", "cap_feat_dim"]}},
    },
    "BriaFiboTransformer2DModel": {
        "why": "FIBO's pipeline passes, besides the prompt embeddings, the text encoder's hidden states of as "
               "many layers as the model has blocks (get_prompt_embeds: prompt_layers), each (batch, words, "
               "text_encoder_dim), one projected into each block",
        "inputs": {"text_encoder_layers": {"list": {"shape": ["batch", "words", "text_encoder_dim"]},
                                           "times": "num_layers + num_single_layers"}},
    },
    "Cosmos3OmniTransformer": {
        "why": "Cosmos 3's pipeline packs text and vision into one sequence, the causal text prefix "
               "(und_len tokens) then the generated video's patches: the text token ids with their positions in "
               "it (text_indexes), a position per token (position_ids), the sequence's length, the video latents "
               "as a list of one (1, latent_channel, frames, height, width) with its patch grid (frames, rows, "
               "columns: one frame of 4 x 4 patches of latent_patch_size 2), its patches' positions in the "
               "sequence and those its predictions are read from (vision_sequence_indexes, "
               "vision_mse_loss_indexes), a timestep per patch, and the noisy frames' indices (frame 0)",
        "inputs": {"input_ids": {"shape": ["words"], "dtype": "long"},
                   "text_indexes": {"range": [0, "words"]},
                   "position_ids": {"range": [0, "words + 16"]},
                   "und_len": {"number": "words"},
                   "sequence_length": {"number": "words + 16"},
                   "vision_tokens": {"list": [{"shape": [1, "latent_channel", 1, 8, 8]}]},
                   "vision_token_shapes": {"value": [(1, 4, 4)]},
                   "vision_sequence_indexes": {"range": ["words", "words + 16"]},
                   "vision_mse_loss_indexes": {"range": ["words", "words + 16"]},
                   "vision_timesteps": {"shape": [16]},
                   "vision_noisy_frame_indexes": {"list": [{"shape": [1], "dtype": "long"}]}},
    },
    "GlmImageTransformer2DModel": {
        "why": "GLM-Image's pipeline passes the autoregressive stage's image tokens upsampled to the latent's "
               "patch grid (_upsample_token_ids(..., token_h, token_w)): one token id per patch, with a mask of "
               "the dropped ones (none) of the same shape",
        "inputs": {"prior_token_id": {"shape": ["batch", _PATCHES], "dtype": "long"},
                   "prior_token_drop": {"shape": ["batch", _PATCHES], "dtype": "bool"}},
    },
    "HiDreamImageTransformer2DModel": {
        "why": "its defaults leave patch_size, caption_channels and llama_layers None, which it needs to build, "
               "and give a 2-axis rotary embedding (32, 32) narrower than its heads (128): HiDream-I1's checkpoint "
               "sets patch_size 2, caption_channels (4096, 4096) (T5's and Llama 3's widths), axes_dims_rope "
               "(64, 32, 32) and one Llama 3 layer per block (llama_layers, num_layers + num_single_layers of "
               "them; here alternating its first two). Its pipeline passes the Llama 3 hidden states of every "
               "layer stacked first, (layers, batch, words, width), of which the model picks llama_layers",
        "set": {"patch_size": 2, "caption_channels": [4096, 4096], "axes_dims_rope": [64, 32, 32],
                "llama_layers": [0, 1] * 24},
        "inputs": {"encoder_hidden_states_llama3": {"shape": [2, "batch", "words", 4096]},
                   "encoder_hidden_states_t5": {"shape": ["batch", "words", 4096]},
                   "pooled_embeds": {"shape": ["batch", "text_emb_dim"]}},
    },
    "HunyuanVideo15Transformer3DModel": {
        "why": "HunyuanVideo 1.5's pipeline passes the vision encoder's semantic tokens as (batch, tokens, "
               "image_embed_dim) (zeros for text-to-video: torch.zeros(batch, vision_num_semantic_tokens, "
               "vision_states_dim)), not one pooled vector; and the second (ByT5) text encoder's states always "
               "with their mask (the forward reads encoder_attention_mask_2 whenever they are given)",
        "inputs": {"image_embeds": {"shape": ["batch", "tokens", "image_embed_dim"]},
                   "encoder_hidden_states_2": {"shape": ["batch", "words", "text_embed_2_dim"]},
                   "encoder_attention_mask_2": {"shape": ["batch", "words"], "dtype": "long", "fill": 1}},
    },
    "HunyuanVideoFramepackTransformer3DModel": {
        "why": "FramePack's pipeline passes the section's latents (batch, channels, frames, height, width) with "
               "their frame indices, one long per frame (indices.split(...): indices_latents), the SigLIP "
               "image states (batch, tokens, image_proj_dim), and the clean and history latents with their "
               "indices (latents_clean: the image's and the newest history's frames; history_2x and _4x: older "
               "frames, embedded in 2x and 4x coarser patches). The forward always calls the "
               "history embedder and projects the image states, which the default configuration leaves out: "
               "FramePack's checkpoint (FramePackI2V_HY) has both",
        "set": {"has_clean_x_embedder": True, "has_image_proj": True},
        "inputs": {"hidden_states": {"shape": ["batch", "in_channels", 2, "height", "width"]},
                   "indices_latents": {"shape": [2], "dtype": "long"},
                   "image_embeds": {"shape": ["batch", "tokens", "image_proj_dim"]},
                   **{f"latents_{k}": {"shape": ["batch", "in_channels", n, "height", "width"]}
                      for k, n in (("clean", 2), ("history_2x", 2), ("history_4x", 4))},
                   **{f"indices_latents_{k}": {"shape": [n], "dtype": "long"}
                      for k, n in (("clean", 2), ("history_2x", 2), ("history_4x", 4))}},
    },
    "HunyuanDiT2DModel": _HUNYUAN_DIT,
    "HunyuanDiT2DControlNetModel": {
        "why": _HUNYUAN_DIT["why"] + "; the control image VAE-encoded to latents "
                                     "(pipeline_hunyuandit_controlnet: vae.encode(control_image))",
        "set": _HUNYUAN_DIT["set"],
        "inputs": {**_HUNYUAN_DIT["inputs"],
                   "controlnet_cond": {"shape": ["batch", "in_channels", "height", "width"]}},
    },
    "HunyuanDiT2DMultiControlNetModel": {
        "why": "its forward zips controlnet_cond with its ControlNets (annotated a tensor, it is the list of one "
               "control latent each that the HunyuanDiT ControlNet pipeline passes); its other inputs are its "
               "ControlNet's",
        "inputs": {"controlnet_cond": {"list": [{"shape": ["batch", "in_channels", "height", "width"]}]}},
    },
    "Ideogram4Transformer2DModel": {
        "why": "Ideogram 4's pipeline packs text and image into one sequence ([text][image], _prepare_ids): the "
               "latents with zeros for the text tokens, the text features padded over the image tokens, and a "
               "3-axis position, a segment (1: the prompt's) and a role (3: text, 2: image) per token of both",
        "inputs": {"hidden_states": {"shape": ["batch", "words + tokens", "in_channels"]},
                   "encoder_hidden_states": {"shape": ["batch", "words + tokens", "llm_features_dim"]},
                   "position_ids": {"shape": ["batch", "words + tokens", 3], "dtype": "long"},
                   "segment_ids": {"shape": ["batch", "words + tokens"], "dtype": "long", "fill": 1},
                   "indicator": {"shape": ["batch", "words + tokens"], "dtype": "long", "fill": 2}},
    },
    "JoyImageEditPlusTransformer3DModel": {
        "why": "JoyImage Edit's pipeline passes the latents already cut into patches, (batch, patches, channels, "
               "patch frames, patch rows, patch columns) (the forward patchifies them with a Conv3d of "
               "patch_size), with each example's (frames, rows, columns) in patches per image (shape_list), "
               "whose products sum to the patches: 16, one frame of 4 x 4",
        "inputs": {"hidden_states": {"shape": ["batch", "tokens", "in_channels", 1, 2, 2]},
                   "shape_list": {"value": [[(1, 4, 4)]] * 2},
                   "encoder_hidden_states_mask": {"shape": ["batch", "words"], "dtype": "long", "fill": 1}},
    },
    "Kandinsky3UNet": {
        "why": "each up block pairs a first ResNet taking the skip connection's channels with a last giving the "
               "block's output width (hidden_channels: the first, layers_per_block - 2 between, the last), but "
               "zips them with layers_per_block up-sampling flags: with one layer per block the last is dropped "
               "and the block's output keeps its input width, which the next block's norm does not take. The cut "
               "keeps 2 layers per block",
        "layers": {"layers_per_block": 2},
    },
    "Kandinsky5Transformer3DModel": {
        "why": "Kandinsky 5's pipeline passes the latents channels last, (batch, frames, rows, columns, "
               "in_visual_dim) (prepare_latents), the Qwen text states and the CLIP pooled text, and the rotary "
               "positions: one per latent frame, and per row and column of the 2x2 patches (visual_rope_pos, a "
               "list of three), and one per text token (text_rope_pos)",
        "inputs": {"hidden_states": {"shape": ["batch", 1, "height", "width", "in_visual_dim"]},
                   "encoder_hidden_states": {"shape": ["batch", "words", "in_text_dim"]},
                   "pooled_projections": {"shape": ["batch", "in_text_dim2"]},
                   "visual_rope_pos": {"list": [{"shape": [1], "dtype": "long"},
                                                    {"shape": ["height // 2"], "dtype": "long"},
                                                    {"shape": ["width // 2"], "dtype": "long"}]},
                   "text_rope_pos": {"shape": ["words"], "dtype": "long"}},
    },
    "Kandinsky6Transformer3DModel": {
        "why": "Kandinsky 6's pipeline passes the latents channels last, (batch, frames, rows, columns, "
               "channels) (prepare_latents), with the conditioning latents and a mask concatenated to them for "
               "its visual_cond model (2 * in_visual_dim + 1 channels), the audio latents (batch, length, "
               "in_audio_dim), the Qwen text states (batch, words, in_text_dim) with their mask and the CLIP "
               "pooled text (batch, in_text_dim2)",
        "inputs": {"hidden_states": {"shape": ["batch", 1, "height", "width", "2 * in_visual_dim + 1"]},
                   "audio_hidden_states": {"shape": ["batch", "tokens", "in_audio_dim"]},
                   "encoder_hidden_states": {"shape": ["batch", "words", "in_text_dim"]},
                   "encoder_attention_mask": {"shape": ["batch", "words"], "dtype": "bool", "fill": 1},
                   "pooled_projections": {"shape": ["batch", "in_text_dim2"]}},
    },
    "Kandinsky6SRTransformer3DModel": {
        "why": "Kandinsky 6's super-resolution pipeline passes the latent tiles channels last, (batch, frames, rows, "
               "columns, channels): the noisy latent, the anchor latent and the anchor mask concatenated, 2 * "
               "in_visual_dim + 1 channels (the class's docstring)",
        "inputs": {"hidden_states": {"shape": ["batch", 1, "height", "width", "2 * in_visual_dim + 1"]}},
    },
    "LuminaNextDiT2DModel": {
        "why": "Lumina's pipeline passes the rotary embedding of get_2d_rotary_pos_embed_lumina: complex, (rows, "
               "columns, head size / 2), of which the patch embedder takes the latent's patches' rows and columns; "
               "and its cross-attention kwargs always as a dict (cross_attention_kwargs = {}: the blocks unpack it)",
        "inputs": {"cross_attention_kwargs": {"value": {}},
                   "image_rotary_emb": {"shape": ["height // patch_size", "width // patch_size",
                                                  "hidden_size // num_attention_heads // 2"], "dtype": "complex"}},
    },
    "MMAudioVocoder": {
        "why": "a BigVGAN vocoder: it upsamples each mel frame 256x (upsample_rates 8, 4, 2, 2, 2, 2) through "
               "wide convolutions; the 4096-frame spectrograms an audio model is tried with did not decode within "
               "the timeout: 16 frames of num_mels bins, (batch, num_mels, frames) as MMAudioVAE's decoder gives",
        "inputs": {"mel": {"shape": ["batch", "num_mels", "tokens"]}},
    },
    "MiniMaxMusic3ConditionEncoder": {
        "why": "it takes the condition model's hidden states of all its num_condition_layers layers side by side, "
               "(batch, frames, num_condition_layers * condition_hidden_dim) (its forward's docstring), and "
               "splits them by layer",
        "inputs": {"hidden_states": {"shape": ["batch", "tokens", "num_condition_layers * condition_hidden_dim"]}},
    },
    "MiniMaxMusic3Vocoder": {
        "why": "it decodes flow-matched latents (batch, latent_channels, length) to a stereo waveform of 512 "
               "samples per latent frame (upsampling_ratios 8, 8, 4, 2): the 4096-frame latents an audio model is "
               "tried with make two million samples, which did not decode within the timeout; 16 frames",
        "inputs": {"latents": {"shape": ["batch", "latent_channels", "tokens"]}},
    },
    "MiniMaxMusic3Transformer1DModel": {
        "why": "its forward takes the latents as (batch, in_channels, length) and the condition already aligned to "
               "the latent timeline, (batch, length, condition_dim) (the class's docstring): the same length",
        "inputs": {"hidden_states": {"shape": ["batch", "in_channels", "tokens"]},
                   "encoder_hidden_states": {"shape": ["batch", "tokens", "condition_dim"]}},
    },
    "MiniMaxH3Transformer3DModel": {
        "why": "MiniMax H3's pipeline (modular_pipelines/minimax_h3, before_denoise) packs text, audio and video "
               "into one sequence, [text][audio][video], and passes each part's rows with their positions in it "
               "(text_indices, audio_indices, video_indices: aranges), a tag per row (1 text, 2 audio, 0 video), "
               "a (t, h, w) rotary coordinate per row, the distinct timesteps of the step and per row the index of "
               "its own (one timestep here, index 0); the video rows patchified (in_channels x its 1 x 2 x 2 "
               "patch)",
        "inputs": {"hidden_states": {"shape": ["batch", "tokens", "in_channels * 4"]},
                   "audio_hidden_states": {"shape": ["batch", "tokens", "audio_in_channels"]},
                   "encoder_hidden_states": {"shape": ["batch", "words", "text_dim"]},
                   "timestep": {"shape": [1]},
                   "timestep_indices": {"shape": ["words + 2 * tokens"], "dtype": "long"},
                   "token_tags": {"runs": [[1, "words"], [2, "tokens"], [0, "tokens"]], "dtype": "long",
                                  "flat": True},
                   "position_ids": {"shape": ["words + 2 * tokens", 3]},
                   "text_indices": {"range": [0, "words"]},
                   "audio_indices": {"range": ["words", "words + tokens"]},
                   "video_indices": {"range": ["words + tokens", "words + 2 * tokens"]}},
    },
    "MMAudioVAE": {
        "why": "its forward encodes a mono waveform in [-1, 1] (batch, samples) to a mel spectrogram itself "
               "(MMAudioMelSpectrogram, an n_fft STFT); one latent frame covers hop_length * 2 samples: 16 frames",
        "inputs": {"sample": {"shape": ["batch", "hop_length * 2 * 16"]}},
    },
    "MultiAdapter": {
        "why": "it refuses a single adapter ('use the T2IAdapter class instead'): two T2IAdapters, and the "
               "adapter pipelines' input for it, a list of one image per adapter (adapter_input.append(...)), "
               "which its forward zips with its adapters",
        "models": 2,
        "inputs": {"xs": {"list": [{"shape": ["batch", "in_channels", 64, 64]}] * 2}},
    },
    "OmniGenTransformer2DModel": {
        "why": "its rotary embedding (Phi-3's 'su' scaling) reads rope_scaling's short_factor and long_factor, "
               "which the default (None) does not have, so it does not build; OmniGen v1's checkpoint gives one "
               "factor per rotary frequency (half a head). One factor of 1 each (no rescaling) broadcasts over the "
               "frequencies of any head size, the cut's too: the same ops, the checkpoint's values aside. For "
               "text to image its pipeline (OmniGenMultiModalProcessor) passes the prompt's token ids, no input "
               "image (an empty list of latents, no placements), and over the sequence of the words, the time "
               "token and the image's patches a (batch, n, n) float mask (1: attended; all here, its causal text "
               "part aside) and positions 0 to n - 1",
        "set": {"rope_scaling": {"short_factor": [1.0], "long_factor": [1.0]}},
        "inputs": {"input_ids": {"shape": ["batch", "words"], "dtype": "long"},
                   "input_img_latents": {"value": []}, "input_image_sizes": {"value": {}},
                   "attention_mask": {"shape": ["batch", _OMNIGEN_TOKENS, _OMNIGEN_TOKENS], "fill": 1},
                   "position_ids": {"range": [0, _OMNIGEN_TOKENS]}},
    },
    "PriorTransformer": {
        "why": "Kandinsky's and unCLIP's prior pipelines pass the noisy image embedding and the pooled text "
               "embedding as (batch, embedding_dim), and the text encoder's num_embeddings (77) token states with "
               "their mask: the model adds a position embedding to exactly num_embeddings + additional_embeddings",
        "inputs": {"hidden_states": {"shape": ["batch", "embedding_dim"]},
                   "proj_embedding": {"shape": ["batch", "embedding_dim"]},
                   "encoder_hidden_states": {"shape": ["batch", "num_embeddings", "embedding_dim"]},
                   "attention_mask": {"shape": ["batch", "num_embeddings"], "dtype": "bool", "fill": 1}},
    },
    "StableAudio3DiTModel": {
        "why": "Stable Audio 3's pipeline passes the latents as (batch, latent_dim, length) (prepare_latents; "
               "io_channels wide) and the duration embedding as one global vector per example (batch, "
               "global_cond_dim)",
        "inputs": {"hidden_states": {"shape": ["batch", "io_channels", "tokens"]},
                   "global_hidden_states": {"shape": ["batch", "global_cond_dim"]}},
    },
    "QwenImageControlNetModel": {
        "why": "Qwen-Image's ControlNet pipeline VAE-encodes the control image and packs it as the latents are "
               "(_pack_latents: 2x2 patches of 16 channels, a sequence (batch, tokens, in_channels)), "
               "not an image",
        "inputs": {"controlnet_cond": {"shape": ["batch", "tokens", "in_channels + extra_condition_channels"]}},
    },
    "QwenImage21Transformer2DModel": {
        "why": "Qwen-Image 2.1's pipeline passes the vision-language encoder's sequence mask (batch, text + image "
               "slots), True at the image's slots, each standing for 2x2 latent tokens: the text's words, then "
               "a quarter of the target image's tokens (img_shapes' last (frames, rows, columns))",
        "inputs": {"img_mask": {"runs": [[False, "words"], [True, "tokens // 4"]], "dtype": "bool"},
                   "encoder_hidden_states": {"shape": ["batch", "words", "context_in_dim"]},
                   "hidden_states": {"shape": ["batch", "tokens", "in_channels"]}},
    },
    "T5FilmDecoder": {
        "why": "the spectrogram diffusion pipeline passes the note and the continuous encoders' outputs with "
               "their masks as a list of (encoding, mask) pairs (encodings_and_masks), the noisy mel frames as "
               "continuous (batch, targets_length, input_dims) 'tokens', and the noise time in [0, 1)",
        "inputs": {"encodings_and_masks": {"list": [{"tuple": [
                       {"shape": ["batch", "words", "d_model"]},
                       {"shape": ["batch", "words"], "dtype": "bool", "fill": 1}]}] * 2},
                   "decoder_input_tokens": {"shape": ["batch", "targets_length", "input_dims"]}},
    },
    "WanAnimate2Transformer3DModel": {
        "why": "Wan-Animate 2's modular pipeline runs it first as the reference pass (WanAnimate2 denoise, "
               "kv_cache_mode 'extract'; the 'cached' pass attends through a flex-attention BlockMask): one video "
               "as a list of one, its latents (channels, frames, height, width) and its condition latents, which "
               "the forward concatenates to in_dim channels, their post-patch grid (offset_grid_sizes: 1 x 4 x 4) "
               "and token count (seq_len: 16), the text states as a list of one (words, text_dim), the CLIP image "
               "tokens (1, tokens, 1280: its image projection's fixed width), one timestep, and the cache the "
               "pass fills, one layer cache per block (WanAnimate2KVCache(num_layers))",
        "inputs": {"hidden_states": {"list": [{"shape": ["out_dim", 1, 8, 8]}]},
                   "condition_latents": {"list": [{"shape": ["in_dim - out_dim", 1, 8, 8]}]},
                   "timestep": {"shape": [1]},
                   "encoder_hidden_states": {"list": [{"shape": ["words", "text_dim"]}]},
                   "encoder_hidden_states_image": {"shape": [1, "words", 1280]},
                   "kv_cache": {"object": "WanAnimate2KVCache", "args": {"num_layers": "num_layers"}},
                   "kv_cache_mode": {"value": "extract"},
                   "seq_len": {"number": "4 * 4"},
                   "offset_grid_sizes": {"runs": [[1, 1], [4, 2]], "dtype": "long", "rows": 1}},
    },
    "WanAnimateTransformer3DModel": {
        "why": "Wan-Animate's pipeline passes, per segment, the latents with the reference latents concatenated on "
               "channels (in_channels) over the reference frame plus the segment's frames, the pose video "
               "VAE-encoded over the segment's frames alone (one fewer: the forward checks it), and the face video "
               "in pixels, (batch, 3, frames, motion_encoder_size, motion_encoder_size), whose motion features its "
               "face encoder downsamples 4x in time and pads with one frame to the latents' (one pixel frame for "
               "one latent frame here); without them its pose embedding gets None",
        "inputs": {"hidden_states": {"shape": ["batch", "in_channels", 2, "height", "width"]},
                   "pose_hidden_states": {"shape": ["batch", "latent_channels", 1, "height", "width"]},
                   "face_pixel_values": {"shape": ["batch", 3, 1, "motion_encoder_size", "motion_encoder_size"]}},
    },
    "WanVACETransformer3DModel": {
        "why": "Wan VACE's pipeline passes the control video VAE-encoded with its mask, "
               "(batch, vace_in_channels, frames, height, width) at the latents' grid (prepare_video_latents "
               "and prepare_masks, concatenated)",
        "inputs": {"control_hidden_states": {"shape": ["batch", "vace_in_channels", 2, "height", "width"]},
                   "hidden_states": {"shape": ["batch", "in_channels", 2, "height", "width"]}},
    },
    "ZImageControlNetModel": {
        "why": "it runs only with the timestep, patch, caption and rotary embedders and the refiners of the "
               "Z-Image transformer it is paired with, which its pipeline lends it (ZImageControlNetModel."
               "from_transformer(controlnet, transformer)): a ZImageTransformer2DModel of the sizes both name "
               "(dim, heads, refiner layers). Its own defaults leave the layers its control is added to and the "
               "control's channels None, which it needs to build (the checkpoint's configuration, not here): "
               "the first layer (it requires 0), and 16 channels, the VAE latents of the control image its "
               "pipeline passes, (batch, channels, 1, height, width), with the latents as a list of one (16, 1, "
               "height, width) per example and the caption features as a list (words, 2560: the transformer's "
               "cap_feat_dim). Its forward reads self.gradient_checkpointing wherever gradients are on, which "
               "its __init__ never sets (its pipeline runs it without gradients, where the read is skipped; "
               "enable_/disable_gradient_checkpointing refuse it, the borrowed modules not counted): False, "
               "what every other diffusers model starts with",
        "set": {"control_layers_places": [0], "control_in_dim": 16},
        "attributes": {"gradient_checkpointing": False},
        "borrows": {"class": "ZImageTransformer2DModel", "call": "from_transformer"},
        "inputs": {"x": {"list": {"shape": [16, 1, "height", "width"]}, "times": "batch"},
                   "cap_feats": {"list": {"shape": ["words", 2560]}, "times": "batch"},
                   "control_context": {"shape": ["batch", "control_in_dim", 1, "height", "width"]}},
    },
    "UNet1DModel": {
        "why": "without a timestep MLP (use_timestep_embedding False, its default) the forward concatenates the "
               "Fourier time embedding, block_out_channels[0] * 2 = 64 channels, to the sample in the first "
               "block, which the default extra_in_channels (0) does not count: the default does not run. 64",
        "set": {"extra_in_channels": 64},
    },
    "UVit2DModel": {
        "why": "aMUSEd's pipeline passes the image as a grid of VQ token ids, (batch, rows, columns) "
               "(latents = torch.full((batch, height // vae_scale_factor, width // vae_scale_factor), mask id)), "
               "which the model embeds and lays out as an image: 16 x 16; and five micro-conditions (width, "
               "height, crop corner, aesthetic score)",
        "inputs": {"input_ids": {"shape": ["batch", 16, 16], "dtype": "long"},
                   "micro_conds": {"shape": ["batch", 5]}},
    },
    "UniDiffuserModel": {
        "why": "UniDiffuser's pipeline passes the VAE latents (batch, in_channels, sample_size, sample_size), the "
               "CLIP image embedding as one token (batch, 1, clip_img_dim), the CLIP text states (batch, "
               "num_text_tokens, text_dim), and a timestep for each of image and text",
        "inputs": {"latent_image_embeds": {"shape": ["batch", "in_channels", "sample_size", "sample_size"]},
                   "image_embeds": {"shape": ["batch", 1, "clip_img_dim"]},
                   "prompt_embeds": {"shape": ["batch", "num_text_tokens", "text_dim"]}},
    },
    "RFD4ProteinaAutoencoder": {
        "why": "its forward is its decode, as RFD4 Proteina's pipeline calls it: per-token local latents "
               "(batch, tokens, latent_dim), the backbone C-alpha coordinates (batch, tokens, 3), the padding "
               "mask and token types, the atom37 mask, and the preprocessor's features as a dict, of which the "
               "decoder always reads which tokens are in-context conditioning (none) and which support a local "
               "latent (all)",
        "inputs": {"z_latent": {"shape": ["batch", "tokens", "latent_dim"]},
                   "ca_coors_nm": {"shape": ["batch", "tokens", 3]},
                   "padding_mask": {"shape": ["batch", "tokens"], "dtype": "bool", "fill": 1},
                   "token_type": {"shape": ["batch", "tokens"], "dtype": "long"},
                   "atom37_mask": {"shape": ["batch", "tokens", 37], "dtype": "bool", "fill": 1},
                   "conditioning": {"dict": {
                       "is_in_context_conditioning": {"shape": ["batch", "tokens"], "dtype": "bool"},
                       "supports_local_latent": {"shape": ["batch", "tokens"], "dtype": "bool", "fill": 1}}}},
    },
    "RFD4ProteinaTransformer": {
        "why": "RFD4 Proteina's pipeline passes a protein's tokens (residues): the noisy backbone C-alpha "
               "coordinates (batch, tokens, 3), the noisy local latents (batch, tokens, latent_dim), a time for "
               "each in [0, 1] (batch,), the padding mask (true: a real token), the token types, and the "
               "preprocessor's other features as a dict (conditioning); of these the forward always reads which "
               "tokens are in-context conditioning (none here) and which support a local latent (all), and the "
               "default configuration's features without a fallback: the interaction annotations per atom slot "
               "(hbond, pistack, pication, saltbridge, hydrophobic, metal-coord: (batch, tokens, 37), 0 = none) "
               "with the atom37 mask, the bond path length between tokens (batch, tokens, tokens), the molecule "
               "and entity of each token and its index group (one molecule here); the others it leaves "
               "unconditioned where absent",
        "inputs": {"bb_ca": {"shape": ["batch", "tokens", 3]},
                   "local_latents": {"shape": ["batch", "tokens", "latent_dim"]},
                   "bb_ca_time": {"shape": ["batch"]}, "local_latents_time": {"shape": ["batch"]},
                   "padding_mask": {"shape": ["batch", "tokens"], "dtype": "bool", "fill": 1},
                   "token_type": {"shape": ["batch", "tokens"], "dtype": "long"},
                   "atom37_mask": {"shape": ["batch", "tokens", 37], "dtype": "bool", "fill": 1},
                   "conditioning": {"dict": {
                       "is_in_context_conditioning": {"shape": ["batch", "tokens"], "dtype": "bool"},
                       "supports_local_latent": {"shape": ["batch", "tokens"], "dtype": "bool", "fill": 1},
                       **{f"condition_{k}_1_atom": {"shape": ["batch", "tokens", 37], "dtype": "long"}
                          for k in ("hbond", "pistack", "pication", "saltbridge", "hydrophobic", "metal-coord")},
                       "token_bond_path_length": {"shape": ["batch", "tokens", "tokens"], "dtype": "long"},
                       "molecule_iid": {"shape": ["batch", "tokens"], "dtype": "long"},
                       "molecule_entity_id": {"shape": ["batch", "tokens"], "dtype": "long"},
                       "condition_index-group_1_token": {"shape": ["batch", "tokens"], "dtype": "long"}}}},
    },
    "SanaWMLTX2RefinerTransformer3DModel": {
        "why": "Sana-WM's refiner pipeline passes one block of patchified video latents, (batch, tokens, "
               "in_channels), a timestep per token (batch, tokens), and the video rotary embedding the model's "
               "build_rotary_emb_for_absolute_positions makes for the block's frames: (cos, sin), interleaved "
               "(its rope_type), one value per token and channel of the attention, (batch, tokens, "
               "num_attention_heads * attention_head_dim)",
        "inputs": {"hidden_states": {"shape": ["batch", "tokens", "in_channels"]},
                   "timestep": {"shape": ["batch", "tokens"]},
                   "video_rotary_emb": {"tuple": [{"shape": ["batch", "tokens",
                                                             "num_attention_heads * attention_head_dim"]}] * 2}},
    },
    "SanaWMTransformer3DModel": {
        "why": "its image_size (720) is the pixel size it was trained at, which the latent grid the inputs were "
               "made at read as latents (720 x 720 tokens: 2.6 GB for one activation); SANA-WM's pipeline passes "
               "DC-AE latents (batch, in_channels, frames, height, width) of a few rows and columns (here 2 frames "
               "of 8 x 8), the timesteps per frame (batch, 1, frames), the text states (batch, 1, words, "
               "caption_channels) with their padding mask, which its cross-attention requires; no camera (its "
               "camera embeddings, a dict, left None) and no precomputed rotary embedding (built from the "
               "latents' shape where None)",
        "inputs": {"hidden_states": {"shape": ["batch", "in_channels", 2, 8, 8]},
                   "timestep": {"shape": ["batch", 1, 2]},
                   "encoder_hidden_states": {"shape": ["batch", 1, "words", "caption_channels"]},
                   "encoder_attention_mask": {"shape": ["batch", "words"], "dtype": "long", "fill": 1},
                   "cam_pos_embeds": {"value": None}, "pos_embeds": {"value": None}},
    },
    "SparseControlNetModel": {
        "why": "AnimateDiff SparseCtrl's pipeline (prepare_sparse_control_conditioning) passes the conditioning "
               "frames VAE-encoded to latents (its simplified condition embedding) per frame, "
               "(batch, conditioning_channels, frames, height, width), and a one-channel mask of the frames given; "
               "its prompt embeddings repeated per frame (prompt_embeds.repeat_interleave(num_frames))",
        "inputs": {"encoder_hidden_states": {"shape": ["batch * 2", "words", "cross_attention_dim"]},
                   "controlnet_cond": {"shape": ["batch", "conditioning_channels", 2, "height", "width"]},
                   "conditioning_mask": {"shape": ["batch", 1, 2, "height", "width"]},
                   "sample": {"shape": ["batch", "in_channels", 2, "height", "width"]}},
    },
    "AutoencoderKLAllegro": {
        "why": "its encode raises 'Encoding without tiling has not been implemented yet' unless tiling is on; "
               "Allegro's pipeline example turns it on (pipe.vae.enable_tiling()). Tiled, it encodes tiles of 24 "
               "frames by sample_size x sample_size pixels (its overlaps hard-coded: 8 frames, 120 and 80 pixels), "
               "one video at a time (its tile buffer holds one: local_batch_size 1): a video smaller than a tile "
               "has none and encodes to zeros, nothing to train. One video of one tile, (1, 3, 24, sample_size, "
               "sample_size)",
        "call": ["enable_tiling"],
        "inputs": {"sample": {"shape": [1, "in_channels", 24, "sample_size", "sample_size"]}},
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
    "RFD4ProteinaAutoencoder": {
        "why": "its two residue tables are required and come with a checkpoint: which of the 37 atom slots each of "
               "its 147 residue types has (atom37_mask, (n_residue_types, 37)) and which residue types each of "
               "its 7 token types may decode to (allowed_residue_types, (num_token_types, n_residue_types)); all "
               "allowed here (the decoder indexes and masks with them the same way whatever they hold)",
        "set": {"atom37_mask": [[True] * 37] * 147, "allowed_residue_types": [[True] * 147] * 7},
    },
    "AutoencoderKLHunyuanImage": {
        "why": "every size is required: an RGB image to 64 latent channels at 32x spatial compression, "
               "HunyuanImage 2.1's VAE layout (six blocks, 128 to 1024 wide)",
        "set": {"in_channels": 3, "out_channels": 3, "latent_channels": 64,
                "block_out_channels": [128, 256, 512, 512, 1024, 1024], "layers_per_block": 2,
                "spatial_compression_ratio": 32, "sample_size": 384},
    },
}
