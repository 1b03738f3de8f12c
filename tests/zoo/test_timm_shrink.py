"""timm under --shrink: each stage's blocks cut where the model's constructor takes them (an int, a list per stage,
a configuration object's field, efficientnet's blocks per stage), a large input halved, and a spec's overrides
applied to the constructor's own arguments. The suite's torch has no torchvision, so timm does not import here:
these check the parts that need no timm, and the one line a timm spec gives instead."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from opaudit.errors import InputError
from opaudit.zoo.shrink import TIMM_BLOCKS, _depth_cut, levels, with_cut
from opaudit.zoo.specs import _set_path, _timm_edited, split_overrides, timm_input_size


@dataclasses.dataclass(frozen=True)
class Block:
    type: str
    d: int
    c: int


@dataclasses.dataclass(frozen=True)
class Cfg:
    depths: tuple[int, ...] = (3, 4, 6, 3)
    dims: tuple[int, ...] = (64, 128, 256, 512)
    blocks: tuple[Block, ...] = (Block("bottle", 2, 256), Block("self_attn", 5, 512))


def test_block_counts_are_cut_wherever_the_constructor_names_them():
    seen = {"depth": 12, "embed_dim": 768, "layers": (3, 4, 6, 3), "num_heads": 12, "cfg": Cfg(),
            "block_args": [[{"k": 3}], [{"k": 3}] * 4, [{"k": 5}] * 2], "in_chans": 3, "drop_rate": 0.0}
    out: dict = {}
    for key, value in seen.items():
        _depth_cut(value, key, out)
    assert out == {"depth": TIMM_BLOCKS, "layers": [2, 2, 2, 2], "cfg.depths": [2, 2, 2, 2], "cfg.blocks.1.d": 2,
                   "block_args": [1, 2, 2]}  # widths, heads and a stage already at 2 blocks are left alone
    # the cut reads back as a spec's overrides, as zoo.csv names it
    spec = with_cut("timm:resnet50?drop_rate=0.1", {"layers": [2, 2, 2, 2], "input_size": [3, 192, 192]})
    assert split_overrides(spec) == ("timm:resnet50", {"drop_rate": 0.1, "layers": [2, 2, 2, 2],
                                                      "input_size": [3, 192, 192]})


def test_an_override_sets_a_field_of_a_configuration_or_the_blocks_of_each_stage():
    cfg = _set_path(Cfg(), ["depths"], [2, 2, 2, 2])
    assert cfg.depths == (2, 2, 2, 2) and cfg.dims == Cfg().dims  # a tuple stays a tuple
    assert _set_path(Cfg(), ["blocks", "1", "d"], 2).blocks[1] == Block("self_attn", 2, 512)
    stages = [["a"], ["b1", "b2", "b3", "b4"], ["c1", "c2", "c3"]]
    assert _set_path(stages, [], [1, 2, 2]) == [["a"], ["b1", "b4"], ["c1", "c3"]]  # first ones and the last
    with pytest.raises(InputError, match="has no field 'widths'"):
        _set_path(Cfg(), ["widths"], 1)


class Net:
    def __init__(self, depth=12, cfg=Cfg(), *, inner=False, **kwargs):
        self.depth, self.cfg, self.kwargs = depth, cfg, kwargs
        self.inner = None if inner else Net(depth=7, inner=True)  # an instance the model builds inside


def test_the_constructor_runs_with_the_edits_and_says_what_it_ran_with():
    seen: dict = {}
    with _timm_edited(Net, {"depth": 2, "cfg.depths": [1, 1, 1, 1], "act": "gelu"}, seen):
        net = Net(depth=24)
    assert (net.depth, net.cfg.depths, net.kwargs) == (2, (1, 1, 1, 1), {"act": "gelu"})
    assert net.inner.depth == 7  # only the model's own call is edited
    assert seen["depth"] == 2 and seen["inner"] is False  # defaults included
    assert Net().depth == 12 and "__init__" in Net.__dict__  # the class is as it was


def test_input_size_from_the_overrides_the_model_size_or_the_configuration():
    assert timm_input_size((3, 384, 384), {}) == (3, 384, 384)
    assert timm_input_size((3, 384, 384), {"img_size": 192}) == (3, 192, 192)
    assert timm_input_size(None, {"input_size": [1, 96, 128]}) == (1, 96, 128)
    assert timm_input_size((3, 224, 224), {"input_size": [160, 160], "in_chans": 4}) == (4, 160, 160)


def test_where_timm_cannot_be_used_a_spec_says_so_in_one_line_and_shrink_keeps_the_spec():
    """timm not installed (CI's venv), or installed but not importable (it imports torchvision, which does not
    import beside a CPU build of torch 2.13): one line saying which; where timm imports, the spec resolves."""
    from opaudit.zoo.specs import load_spec

    try:
        import timm  # noqa: F401
    except ImportError:
        said = "timm is not installed" if importlib.util.find_spec("timm") is None else "timm does not import"
    else:
        assert load_spec("timm:resnet50?depth=2", build=False).params["depth"] == 2
        return
    with pytest.raises(InputError) as e:
        load_spec("timm:resnet50?depth=2")
    assert "\n" not in e.value.message and said in e.value.message, e.value.message
    assert levels("timm:resnet50") == [("full", "timm:resnet50", {})]  # nothing to cut: the run says why
