"""Fixes of transformers' default configurations (coverage_db/curated/hf_config_fixes.toml): each is needed (the
default fails without it) and enough (the step runs with it), a spec's own overrides win, and every view of a
zoo names the fixes a result stands on. Plus the inputs made beyond the text where a model needs them."""

from __future__ import annotations

import re

import pytest
import torch

import opaudit
import opaudit.zoo.specs as specs
from opaudit.data import load_toml
from opaudit.tracing.modes import needs_data
from opaudit.zoo.report import csv_text, html_text
from opaudit.zoo.run import ZooResult, plan
from opaudit.zoo.shrink import cut, levels, with_cut
from opaudit.zoo.specs import config_fixes, input_facts, load_spec, with_layers

FIXES = load_toml("coverage_db", specs.FIXES_FILE)


def test_every_entry_says_what_is_wrong_and_the_version_it_was_checked_on():
    assert len(FIXES["fix"]) >= 25
    types = set(specs.model_types())
    for table in ("fix", "input", "shrink"):
        for model_type, entry in FIXES[table].items():
            assert model_type in types, model_type
            assert len(entry["why"]) > 40 and re.fullmatch(r"\d+\.\d+\.\d+", entry["checked"]), model_type
            assert table != "fix" or entry["set"], model_type


# 100 M parameters and more at one layer of each kind (BLIP-2's OPT with its 50 k vocabulary and 1408-wide vision
# tower, DBRX's and LFM2-MoE's experts), 5 to 10 s a step: checked at the zoo's small cut (opaudit.zoo.shrink), the
# same op kinds at a width of about 128, which fails at the same place without the fix (the fixes set no width)
SMALL_CUT = {"blip-2", "instructblip", "instructblipvideo", "dbrx", "lfm2_moe"}


def _spec(model_type: str) -> str:
    if model_type in SMALL_CUT:
        return with_cut(f"hf:{model_type}", cut(f"hf:{model_type}", "small"))
    return with_layers(f"hf:{model_type}", 1)


def _step(model_type: str) -> Exception | None:
    """A train step of the model type (one layer of each kind, in the auto mode: real where small, else meta):
    None, or what failed. A step that only stops because meta tensors hold no data counts as run (the zoo traces
    it for real where it fits)."""
    try:
        named = load_spec(_spec(model_type))
        opaudit.trace(named.make_model, named.make_inputs, train=True, mode="auto", source=named.source)
    except Exception as e:  # noqa: BLE001 - the failure is the answer
        return None if needs_data(str(e)) else e
    return None


# fixed, yet the model fails later for a reason of another kind (an input opaudit cannot make, a step meta cannot
# run that is too big to run for real): the fix is still the default's own slip, checked here to be needed only
STILL_FAILING = {"gemma4_assistant", "pp_ocrv6_medium_det"}


@pytest.mark.parametrize("model_type", sorted(FIXES["fix"]))
def test_each_fix_is_needed_and_enough(model_type, monkeypatch):
    if model_type not in STILL_FAILING:
        assert _step(model_type) is None
    with monkeypatch.context() as m:
        m.setattr(specs, "config_fixes", lambda _: {})
        assert _step(model_type) is not None  # transformers' default alone fails


def test_a_spec_override_wins_over_a_fix_and_the_fix_is_recorded():
    esm = load_spec("hf:esm?num_hidden_layers=1&vocab_size=40")
    assert esm.fixes == {"pad_token_id": 1, "mask_token_id": 32} and esm.params["vocab_size"] == 40
    assert load_spec("hf:esm?num_hidden_layers=1").fixes == config_fixes("esm")
    assert load_spec("hf:bert?num_hidden_layers=1").fixes == {}  # no fix: nothing changed, nothing named
    # a fix of a sub-configuration's field, beside the spec's own override of another field of it
    glm = load_spec("hf:glm4v_moe?text_config.num_hidden_layers=1")
    assert glm.params["text_config"]["head_dim"] == 128 and glm.params["text_config"]["num_hidden_layers"] == 1
    # a default whose own validator rejects it builds with its fixed sub-configuration
    assert load_spec("hf:gemma4_assistant", build=False).params["text_config"]["hidden_size_per_layer_input"] == 0


def test_the_zoo_records_csv_and_page_name_the_fixes(tmp_path):
    jobs, bad = plan(["hf:esm?num_hidden_layers=1", "hf:bert?num_hidden_layers=1"], targets=["cuda@2.13"],
                     train=True, mode="auto", device="cuda", timeout=60, memory=None, threads=1, cache=tmp_path)
    assert not bad and jobs[0].config_fixes == config_fixes("esm") and jobs[1].config_fixes == {}
    again, _ = plan(["hf:esm?num_hidden_layers=1"], targets=["cuda@2.13"], train=True, mode="auto", device="cuda",
                    timeout=60, memory=None, threads=1, cache=tmp_path)  # from the cache's table of resolved specs
    assert again[0].config_fixes == jobs[0].config_fixes and again[0].key == jobs[0].key
    records = [{"spec": j.spec, "family": j.family, "head": j.head, "status": "failed", "reason": "forward",
                "error": "x", "config_fixes": j.config_fixes, "targets": []} for j in jobs]
    z = ZooResult(records, ["cuda@2.13"], True)
    rows = csv_text(z).splitlines()
    # the fixes, then the cut of --shrink (none here)
    assert rows[0].endswith(",config_fixes,cut")
    assert rows[1].endswith(",vocab_size=33; pad_token_id=1; mask_token_id=32,")
    assert rows[2].endswith(",,")
    page = html_text(z)
    assert 'id="fixed-note"' in page and "1 models marked" in page and "vocab_size=33" in page


def test_a_head_made_for_a_sub_configuration_is_built_from_it():
    # Qwen3.5's CausalLM class takes its text configuration, as AutoModelForCausalLM.from_config gives it
    named = load_spec(with_layers("hf:qwen3_5", 1))
    with torch.device("meta"):
        model = named.make_model()
    assert type(model.config).__name__ == "Qwen3_5TextConfig"


def _built(spec: str) -> dict:
    """The inputs fitted to the model (built on meta: the dry runs need no memory)."""
    named = load_spec(spec)
    with torch.device("meta"):
        named.make_model()
    return named.make_inputs()


def test_inputs_beside_the_text_where_the_step_needs_them():
    # GIT puts the image's features before the text: its loss needs the image even without an image token
    git = _built("hf:git?num_hidden_layers=1&vision_config.num_hidden_layers=1&vision_config.image_size=32"
                 "&vision_config.patch_size=16")
    assert git["pixel_values"].shape == (2, 3, 32, 32)
    # Molmo2 trains only with its multimodal token types (the text alone: all 0)
    molmo = _built(with_layers("hf:molmo2", 1))
    assert molmo["mm_token_type_ids"].shape == molmo["input_ids"].shape
    # (a model whose step runs on the text alone keeps the text alone: test_specs' vision-language test)


def test_inputs_a_model_type_needs_as_data():
    assert input_facts("udop")["bbox"] == "unit" and input_facts("llama") == {}
    udop = load_spec("hf:udop?num_layers=1&num_decoder_layers=1").make_inputs()
    assert udop["bbox"].dtype == torch.float32 and 0 <= float(udop["bbox"].min()) and float(udop["bbox"].max()) <= 1
    perceiver = load_spec("hf:perceiver?num_self_attends_per_block=1&max_position_embeddings=48").make_inputs()
    assert perceiver["inputs"].shape == (2, 48) == perceiver["labels"].shape
    music = load_spec("hf:musicgen?decoder.num_hidden_layers=1").make_inputs()
    assert music["input_ids"].shape == (2 * 4, 16) and music["labels"].shape == (2, 16, 4)


def test_audio_inputs_of_a_speech_encoder_decoder_and_a_ctc_padding_mask():
    speech = load_spec("hf:speech-encoder-decoder").make_inputs()
    assert speech["inputs"].is_floating_point() and "decoder_input_ids" in speech
    omni = _built(with_layers("hf:omniasr_ctc", 1))
    assert omni["padding_mask"].shape[0] == 2 and int(omni["padding_mask"].min()) == 1


def _first_cut(model_type: str) -> dict:
    """The inputs of the model type cut as --shrink cuts it first (its whole small cut, else its first level)."""
    try:
        return _built(with_cut(f"hf:{model_type}", cut(f"hf:{model_type}", "small")))
    except ValueError:  # a sub-configuration's cut that does not build: levels() keeps it whole
        return _built(levels(f"hf:{model_type}")[0][1])


def test_inputs_of_codes_patches_and_streams_as_data():
    # Dia: a row of audio codes per channel for the decoder, in its own vocabulary
    dia = _first_cut("dia")
    assert dia["decoder_input_ids"].shape == (2, 16, 9) and dia["labels"].shape == (2 * 9, 16)
    assert int(dia["decoder_input_ids"].max()) < 1028
    # Kyutai: the text beside a code of each of its 32 codebooks at every step; the labels are the text
    kyutai = _first_cut("kyutai_speech_to_text")
    assert kyutai["input_ids"].shape == (2, 16, 33) and kyutai["labels"].shape == (2, 16)
    # Voxtral Realtime: its audio always, 8 mel frames a token
    voxtral = _first_cut("voxtral_realtime")
    assert voxtral["input_features"].shape[-1] == 8 * voxtral["input_ids"].shape[1]
    # ShieldGemma 2's classifier takes the text's tokens as labels
    shield = _first_cut("shieldgemma2")
    assert shield["labels"].shape == shield["input_ids"].shape
    # RF-DETR's windows want a side that is a multiple of 56, with at least 300 patches for its queries
    assert _first_cut("rf_detr")["pixel_values"].shape[-1] == 280


def test_inputs_made_by_their_names_beside_an_image():
    # SigLIP 2's NaFlex tower takes the image as patches, with their mask and grid
    siglip = _first_cut("siglip2")
    assert siglip["pixel_values"].shape == (2, 256, 3 * 16 * 16) and siglip["spatial_shapes"].tolist() == [[16, 16]] * 2
    # Kosmos-2: 64 places of the text marked for the image's features
    kosmos = _first_cut("kosmos-2")
    assert int(kosmos["image_embeds_position_mask"].sum()) == 2 * 64
    assert kosmos["input_ids"].shape == kosmos["labels"].shape == kosmos["image_embeds_position_mask"].shape
    # IDEFICS: images per example, each token seeing all of them
    idefics = _first_cut("idefics")
    assert idefics["pixel_values"].dim() == 5
    assert idefics["image_attention_mask"].shape == (*idefics["input_ids"].shape, idefics["pixel_values"].shape[1])
    # InstructBLIP-Video, a video token and none for images: frames
    assert _first_cut("instructblipvideo")["pixel_values"].dim() == 5
