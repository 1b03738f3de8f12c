"""torch.autocast on a target's device type (coverage_db/curated/autocast_devices.toml).

A program traced on the CUDA path enters ``torch.autocast("cuda", ...)``; ported, the call names the target's
device type, and torch's Python answers it by the target release's rules: no autocast for the device type (a
RuntimeError), a dtype the device type does not list (autocast off, with a warning: the region runs in float32),
or another default dtype where the program names none. The trace records each region as an ``api`` record
(:data:`OP`, with the dtype the program named, or none); :func:`support` judges it on a release.
"""

from __future__ import annotations

import functools
from typing import Any

from opaudit.data import load_toml
from opaudit.matrix.matrix import Support, holds

OP = "torch::autocast.default"  # the record of an autocast region the program entered for CUDA


@functools.cache
def rules() -> dict[str, dict[str, Any]]:
    """Device type -> its autocast rules."""
    return dict(load_toml("coverage_db", "curated/autocast_devices.toml")["device"])


def _rule(device_type: str, dispatch_key: str) -> dict[str, Any] | None:
    """The rules of ``device_type``; None for a plugin's PrivateUse1 device (its own list) or one the data lacks."""
    return None if dispatch_key == "PrivateUse1" else rules().get(device_type)


def _dtypes(rule: dict[str, Any], torch_version: str | None) -> list[str]:
    return next((list(e["dtypes"]) for e in rule["dtypes"] if holds(e["versions"], torch_version)), [])


def _named(dtypes: tuple[str, ...]) -> list[str | None]:
    """The dtypes the recorded regions named (None: the device's default), from a group's dtype signatures."""
    return [d or None for d in dtypes] or [None]


def missing(device_type: str, dispatch_key: str, torch_version: str | None) -> str | None:
    """Why the release's torch.autocast raises for ``device_type`` (it has no autocast for it); None where it has."""
    rule = _rule(device_type, dispatch_key)
    available = rule.get("available", "") if rule is not None else ""
    if holds(available, torch_version):
        return None
    first = available.removeprefix(">=")
    return (f"PyTorch {torch_version} has no autocast for {device_type} (PyTorch {first} added it): torch.autocast "
            "raises 'User specified an unsupported autocast device_type' there")


def support(device_type: str, dispatch_key: str, torch_version: str | None, dtypes: tuple[str, ...],
            retraced: bool = False) -> Support:
    """The autocast regions of a group (``dtypes``: the dtype each named, "" for none) on a release of
    ``device_type``: ``version_skew`` where that PyTorch has no autocast for it, else ``native`` with a note where
    autocast is off there or runs in another dtype than CUDA would (:func:`caveat`)."""
    rule = _rule(device_type, dispatch_key)
    if rule is None:
        return Support("native", note=f"the autocast dtypes of {device_type} are its plugin's own "
                                      "(get_amp_supported_dtype), not in opaudit's data")
    gone = missing(device_type, dispatch_key, torch_version)
    if gone:
        return Support("version_skew", since=rule["available"].removeprefix(">="), note=gone)
    said = caveat(device_type, dispatch_key, torch_version, dtypes, retraced)
    return Support("native", note=said or f"autocast runs on {device_type}")


def _on_release(device_type: str, dispatch_key: str, torch_version: str | None) -> dict[str, Any] | None:
    """The rules of ``device_type`` where the release has autocast for it and the data knows them."""
    rule = _rule(device_type, dispatch_key)
    return rule if rule is not None and holds(rule.get("available", ""), torch_version) else None


def caveat(device_type: str, dispatch_key: str, torch_version: str | None, dtypes: tuple[str, ...],
           retraced: bool = False) -> str | None:
    """What autocast does differently on the release than on CUDA, where it has autocast: off for a dtype it does
    not list, another dtype by default, a condition of its own; None where it runs as on CUDA. ``retraced``: the
    code was traced again so (tracing/variants.py), and the region's ops are judged as they ran then."""
    rule = _on_release(device_type, dispatch_key, torch_version)
    if rule is None:
        return None
    listed = _dtypes(rule, torch_version)
    cuda = rules()["cuda"]["default"]
    judged = ("the code was traced again so, and its ops are judged as they ran then" if retraced
              else "its ops are judged here as the CUDA path ran them")
    said = []
    for named in dict.fromkeys(_named(dtypes)):
        want = named or rule["default"]
        if want not in listed:
            said.append(f"autocast in {want} is off on {device_type} in PyTorch {torch_version}, which lists "
                        f"{' and '.join(listed)}: torch warns and the region runs in float32 ({judged})")
        elif named is None and want != cuda:
            said.append(f"autocast on {device_type} runs in {want} where the program names no dtype (CUDA: {cuda}): "
                        f"{judged}")
        else:
            said += [f"autocast in {want} on {device_type}: {c['note']}" for c in rule.get("conditions", [])
                     if c["dtype"] == want and holds(c["versions"], torch_version)]
    return "; ".join(said) or None


def disabled(device_type: str, dispatch_key: str, torch_version: str | None, dtype: Any) -> str | None:
    """Why torch of the release turns autocast off for a region in ``dtype`` (a torch dtype, or None: the device's
    default) on ``device_type``, where it has autocast; None where it stays on (or the data does not know)."""
    named = str(dtype).removeprefix("torch.") if dtype is not None else None
    if runs_in(device_type, dispatch_key, torch_version, named) != "off":
        return None
    listed = _dtypes(rules()[device_type], torch_version)
    return f"PyTorch {torch_version} runs autocast on {device_type} in {' and '.join(listed)} only"


# -- where a region runs otherwise than on CUDA: the outcomes a re-trace follows ----------------------------------

PREFIX = "autocast:"  # a trace variant's label: autocast:bfloat16=off, autocast:default=bfloat16


def default(device_type: str, dispatch_key: str, torch_version: str | None) -> str | None:
    """The dtype autocast runs in on the release where the program names none (None where the data does not know,
    or the release has no autocast for the device type)."""
    rule = _on_release(device_type, dispatch_key, torch_version)
    return rule["default"] if rule is not None else None


def runs_in(device_type: str, dispatch_key: str, torch_version: str | None, named: str | None) -> str | None:
    """The dtype a region naming ``named`` (None: the device's default) runs its low-precision ops in on the
    release: a dtype name, or ``"off"`` where torch turns autocast off there (the region runs in float32); None where
    the data does not know (a plugin's own list) or the release has no autocast for the device type."""
    rule = _on_release(device_type, dispatch_key, torch_version)
    if rule is None:
        return None
    want = named or rule["default"]
    return want if want in _dtypes(rule, torch_version) else "off"


def outcome(device_type: str, dispatch_key: str, torch_version: str | None, named: Any) -> dict[str, str]:
    """For the regions of a trace (``named``: the dtype each named, "" for none), those that run otherwise on the
    release than on CUDA: named -> what :func:`runs_in` says. Empty where every region runs as on CUDA."""
    cuda = rules()["cuda"]["default"]
    out = {}
    for n in sorted(set(named)):
        got = runs_in(device_type, dispatch_key, torch_version, n or None)
        if got is not None and got != (n or cuda):
            out[n] = got
    return out


def label(outcome: dict[str, str]) -> str:
    """The label of a trace variant: ``autocast:bfloat16=off`` (regions naming bfloat16 run with autocast off),
    ``autocast:default=bfloat16`` (regions naming no dtype run in bfloat16)."""
    return PREFIX + ",".join(f"{k or 'default'}={v}" for k, v in sorted(outcome.items()))


def parse(text: str) -> dict[str, str]:
    """The outcome of a variant's label (:func:`label`)."""
    out = {}
    for part in text.removeprefix(PREFIX).split(","):
        k, _, v = part.partition("=")
        out["" if k == "default" else k] = v
    return out


def describe(outcome: dict[str, str]) -> str:
    """``autocast off for regions in bfloat16``, ``regions naming no dtype in bfloat16``: a variant in words."""
    said = []
    for k, v in sorted(outcome.items()):
        regions = f"regions in {k}" if k else "regions naming no dtype"
        said.append(f"autocast off for {regions} (float32)" if v == "off" else f"{regions} in {v}")
    return "; ".join(said)


def named_regions(records: Any) -> set[str]:
    """The dtypes the autocast regions of a trace's records named ("" for none)."""
    return {(r.dtypes[0] if r.dtypes else "") for r in records if r.op == OP}
