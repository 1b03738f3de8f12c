"""Driving a model under the recorder: forward, loss, backward and optimizer steps -> a Trace."""

from __future__ import annotations

import datetime
import platform
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

import opaudit
from opaudit.errors import OpauditError, UserCodeError, describe_exception, user_frames
from opaudit.matrix import load_targets
from opaudit.torchcompat import tree_leaves
from opaudit.tracing.attribution import source_locator
from opaudit.tracing.autocast import AMP_DTYPES, CudaAutocast
from opaudit.tracing.default_device import default_device
from opaudit.tracing.device import TraceDevice, bridged_calls, bridged_since, check_device, device_name, simulated_meta
from opaudit.tracing.modes import MODES, prepare, twin
from opaudit.tracing.recorder import Recording, TraceStopped, recording
from opaudit.tracing.scalars import ScalarOracle, UserOracle
from opaudit.tracing.schema import PHASES, Trace, TraceMeta
from opaudit.tracing.variants import follow_autocast


def build_trace(rec: Recording, *, mode: str, mode_reason: str, train: bool, steps: int = 0,
                amp: dict | None = None, optimizer: str | None = None, source: dict | None = None,
                optimizer_steps: int = 0,
                status: str = "complete", error: str | None = None, warnings: list[str] | None = None,
                device: str | None = None, simulated: dict | None = None) -> Trace:
    records, modules, sources = rec.records()
    seen = {r.phase for r in records}
    if simulated is not None:  # the calls the device ran wide (CUDA's dtypes that the CPU kernels refuse)
        simulated = {**simulated, "bridged": bridged_since(rec.bridged_before)}
    meta = TraceMeta(
        opaudit_version=opaudit.__version__,
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        mode=mode,
        mode_reason=mode_reason,
        device=device or ",".join(sorted(rec.devices)) or "cpu",
        train=train,
        phases=[p for p in PHASES if p in seen],
        amp=amp,
        optimizer=optimizer,
        steps=steps,
        optimizer_steps=optimizer_steps,
        source=source or {},
        status=status,
        error=error,
        created=datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        duration_s=round((rec.ended or time.perf_counter()) - rec.started, 4),
        total_calls=rec.total,
        noise_calls=rec.noise,
        unattributed_backward_calls=rec.unattributed,
        scalar_guesses=dict(rec.oracle.guesses) if rec.oracle is not None else {},
        warnings=[*(warnings or []), *([w] if (w := rec.compiled.warning()) else [])],
        simulated=simulated,
        recorder=rec.engine,
    )
    return Trace(meta=meta, records=records, modules=modules, sources=sources,
                 registrations=dict(rec.registrations))


class Recorder:
    """Record whatever runs inside a ``with`` block; :func:`record` makes one.

    >>> with opaudit.record() as rec:                      # doctest: +SKIP
    ...     model(x).sum().backward()
    >>> rec.trace.ops("backward")                          # doctest: +SKIP
    """

    def __init__(self, *, root: nn.Module | None = None, shapes: bool = False, max_ops: int | None = None,
                 timeout: float | None = None, progress: Callable[[int], None] | None = None,
                 source: dict | None = None, mode: str = "real", device: str | None = None,
                 simulated: dict | None = None):
        """``device``: the device the code runs on, when it is not the CPU (``cuda`` simulated, a rehearsed
        target's): the calls on host tensors are told apart (OpRecord.where)."""
        self.recording = Recording(root=root, shapes=shapes, max_ops=max_ops, timeout=timeout, progress=progress,
                                   split_host=device not in (None, "cpu"))
        self.source = source or {"kind": "api"}
        self.mode = mode
        self.device = device
        self.simulated = simulated
        self.status = "complete"
        self.error: str | None = None
        self._ctx: AbstractContextManager[Recording] | None = None
        self._trace: Trace | None = None

    def __enter__(self) -> Recorder:
        if self.simulated and self.simulated.get("name"):  # the simulated device stands for CUDA's autocast too
            self.recording.cuda_names.add(str(self.simulated["name"]))
        if self.recording.split_host:  # on a device: what it ran wide before (device.bridged_calls)
            self.recording.bridged_before = bridged_calls()
        self._ctx = recording(self.recording)
        self._ctx.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._ctx is not None:
            self._ctx.__exit__(exc_type, exc, tb)
        if isinstance(exc, TraceStopped):
            self.status, self.error = "stopped", str(exc)
            return True  # the limit was asked for: not an error
        if isinstance(exc, SystemExit) and exc.code in (None, 0):
            return False  # a script that ends with sys.exit(0) completed
        if isinstance(exc, KeyboardInterrupt):
            self.status, self.error = "stopped", "interrupted (Ctrl-C)"
        elif exc is not None:
            self.status, self.error = "partial", describe_exception(exc)
        return False

    @property
    def trace(self) -> Trace:
        if self._trace is None:
            t = build_trace(self.recording, mode=self.mode, mode_reason="the code chose its own devices",
                            train=any(k[2] == "backward" for k in self.recording.counts),
                            source=self.source, status=self.status, error=self.error, device=self.device,
                            simulated=self.simulated)
            t.meta.warnings.extend(optimizer_warnings(t))
            self._trace = t
        return self._trace


def optimizer_warnings(trace: Trace) -> list[str]:
    """A script's optimizer on the CPU runs PyTorch's CPU default, not what an accelerator runs. (On a device the
    optimizer took that device's own path: SGD over sparse gradients steps each parameter on CUDA too.)"""
    if (trace.meta.device or "cpu") != "cpu":
        return []
    stepped = [r for r in trace.records if r.phase == "optimizer" and r.module and r.module.startswith("<")]
    if not stepped or any(r.op.startswith(("aten::_foreach_", "aten::_fused_")) for r in stepped):
        return []
    names = sorted({(r.module or "").strip("<>") for r in stepped})
    return [f"{', '.join(names)} ran its CPU default, the single-tensor loop; on CUDA and accelerator devices "
            "it defaults to foreach (_foreach_* ops): opaudit scan --train traces that, or pass foreach=True"]


def record(*, root: nn.Module | None = None, shapes: bool = False, max_ops: int | None = None,
           timeout: float | None = None, progress: Callable[[int], None] | None = None) -> Recorder:
    """A context manager that records every op run inside it; ``.trace`` afterwards.

    ``root`` names modules by their path in it (else by class); ``max_ops`` and ``timeout`` end the
    recording early (``status="stopped"``; the ``with`` block is left at that point).
    """
    return Recorder(root=root, shapes=shapes, max_ops=max_ops, timeout=timeout, progress=progress)


def _call(model: nn.Module, inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)


def default_loss(output: Any, inputs: Any) -> torch.Tensor:
    """The model's own loss when it returns one (``output.loss``), else the sum of its float outputs."""
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        return loss
    leaves = [t for t in tree_leaves(output)
              if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not leaves:
        raise OpauditError(
            "the model's output has no floating-point tensor that requires grad, so there is nothing to backpropagate",
            hint="define get_loss(output, inputs) in the model file, or pass loss_fn=",
        )
    total = leaves[0].sum()
    for t in leaves[1:]:
        total = total + t.sum()
    return total


def default_optimizer(params) -> torch.optim.Optimizer:
    """AdamW as a program makes it: foreach left to torch where the parameters are on a device whose default
    is the foreach path (the CUDA path's); elsewhere (the CPU, meta, whose default is the single-tensor loop)
    ``foreach=True``, standing for that default. Either way the trace marks the foreach path as torch's choice
    for the device (device_branches.toml: mps and xla take the single-tensor loop)."""
    from torch.utils._foreach_utils import _get_foreach_kernels_supported_devices

    from opaudit.tracing.branches import stand_for_default

    params = list(params)
    tensors = [p for g in params for p in (g["params"] if isinstance(g, dict) else [g])]
    chosen = bool(tensors) and all(t.device.type in _get_foreach_kernels_supported_devices() for t in tensors)
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=None if chosen else True)
    if not chosen:
        stand_for_default.add(opt)
    return opt


def trace(
    model: nn.Module | Callable[[], Any],
    inputs: Any = None,
    *,
    train: bool = False,
    mode: str = "auto",
    steps: int = 1,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
    optimizer: Callable[[Any], torch.optim.Optimizer] | None = None,
    amp: str | None = None,
    shapes: bool = False,
    scalar_oracle: UserOracle | None = None,
    progress: Callable[[int], None] | None = None,
    on_mode: Callable[[str, str], None] | None = None,
    on_stage: Callable[[str], None] | None = None,
    source: dict | None = None,
    device: str | TraceDevice = "cpu",
    targets: Sequence[Any] | None = None,
    on_retrace: Callable[[str], None] | None = None,
) -> Trace:
    """Run ``model`` on ``inputs`` under the recorder and return what it ran.

    ``model`` and ``inputs`` are objects or zero-argument factories (a factory lets ``mode="meta"``
    build a 7B model without memory); a model factory may return a ``(model, inputs)`` pair.
    ``inputs`` is a tensor, a tuple of positional arguments or a dict of keyword arguments.

    With ``train=True`` each of ``steps`` steps runs forward, ``loss_fn`` (default: the model's own
    loss, else the sum of its outputs), backward and an ``optimizer`` step (default: AdamW with
    foreach, as on an accelerator). The optimizer steps at least twice, on the last gradients if
    ``steps`` is 1, because its first step initialises state and issues other ops.
    ``amp="fp16"|"bf16"`` runs the forward pass under CUDA's autocast policy (and a GradScaler for
    fp16 training).

    ``device`` is ``"cpu"`` or a device tracing is given (tracing.device): ``opaudit.standin.cuda()``, which
    ``opaudit.trace(device="cuda")`` passes, runs the model on a simulated CUDA device (``opaudit scan`` does
    it by default): built on the CPU, then moved there
    as a CUDA script moves it, so PyTorch's per-device choices are CUDA's, and the calls on tensors left on
    the CPU are ``host`` records. In meta and fake modes the tensors are meta or fake whatever ``device``
    says: CUDA's autocast policy and an accelerator's optimizer defaults are applied there as always, but
    the code's own device branches see meta (the trace's warnings say so).

    ``targets``: the targets the trace will be audited against (names or matrices). Where one of them runs an
    autocast region otherwise than CUDA (off for the dtype, or in another one: matrix/amp.py), the model is traced
    again that way, once per such outcome, and the audit judges those targets by that trace (``Trace.variants``;
    ``on_retrace`` hears of each before it runs).

    >>> t = opaudit.trace(resnet50(), torch.randn(2, 3, 64, 64), train=True)  # doctest: +SKIP
    >>> t.to_pandas().groupby("phase").calls.sum()                                           # doctest: +SKIP
    """
    if amp is not None and amp not in AMP_DTYPES:
        raise OpauditError(f"amp must be one of {', '.join(AMP_DTYPES)}, not {amp!r}")
    if train and steps < 1:
        raise OpauditError("steps must be at least 1 when training")
    if mode not in MODES:
        raise OpauditError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    check_device(device)
    matrices = load_targets(targets or [])  # (a target that does not exist is said before the model runs)
    kw: dict[str, Any] = dict(train=train, steps=steps, loss_fn=loss_fn, optimizer=optimizer, amp=amp, shapes=shapes,
                              scalar_oracle=scalar_oracle, progress=progress, on_mode=on_mode, on_stage=on_stage,
                              source=source, device=device_name(device), given=isinstance(model, nn.Module))
    # the factories run on the CPU, as a CUDA script builds its model before model.to("cuda"); a model on meta
    # or fake tensors is not on the simulated device, whose set-up and device mapping would only cost time
    def once(chosen: str, outcome: dict[str, str] | None = None, **more: Any) -> Trace:
        prepared = _prepare(model, inputs, chosen, train)
        if not isinstance(device, str) and prepared.mode == "real":
            with device.open() as sim:
                return _trace(prepared, sim=sim, outcome=outcome, **{**kw, **more})
        return _trace(prepared, sim=None, outcome=outcome, **{**kw, **more})

    first = once(mode)
    # again in the mode chosen the first time, saying nothing of it again
    return follow_autocast(first, matrices, lambda o: once(first.meta.mode, o, on_mode=None), on_retrace)


def _prepare(model: Any, inputs: Any, mode: str, train: bool) -> Any:
    try:
        return prepare(model, inputs, mode, train)
    except OpauditError:
        raise
    except Exception as e:
        raise UserCodeError(f"building the model or its inputs failed: {describe_exception(e)}",
                            details=user_frames(e),
                            hint=_BUILD_HINT if mode in ("meta", "auto") else None) from None


def _trace(prepared: Any, *, train: bool, steps: int, loss_fn, optimizer, amp: str | None, shapes: bool,
           scalar_oracle: UserOracle | None, progress, on_mode, on_stage, source: dict | None, device: str,
           given: bool, sim, outcome: dict[str, str] | None = None) -> Trace:
    if on_mode is not None:
        on_mode(prepared.mode, prepared.reason)
    warnings: list[str] = []
    simulated = None
    if sim is not None and prepared.mode == "real":
        try:  # as a CUDA script does: model.to("cuda"), and its inputs (a model the caller gave: a copy)
            _to_device(prepared, torch.device(sim.name), copy=given)
        except Exception as e:
            raise UserCodeError(f"moving the model or its inputs to the simulated cuda device failed: "
                                f"{describe_exception(e)}", details=user_frames(e),
                                hint="trace the CPU path with --device cpu") from None
        simulated = simulated_meta(sim)
    elif device == "cuda":
        warnings.append(f"traced on {prepared.mode} tensors, not on a simulated cuda device: CUDA's autocast policy "
                        "and optimizer defaults are applied, but the model's own device checks (x.is_cuda, "
                        "torch.cuda.is_available()) saw the tensors' device")

    oracle = ScalarOracle(source_locator(), scalar_oracle) if prepared.mode in ("meta", "fake") else None
    rec = Recording(root=prepared.model, shapes=shapes, scalar_oracle=oracle, progress=progress,
                    split_host=prepared.device != "cpu")
    if simulated is not None:  # the simulated device stands for CUDA's autocast too
        rec.cuda_names.add(sim.name)
    rec.autocast_outcome = dict(outcome or {})
    amp_dtype = AMP_DTYPES.get(amp) if amp else None
    # what the region runs in: --amp's dtype, or as another device runs it in a re-trace (None: autocast off)
    instead = rec.autocast_instead("cuda", str(amp_dtype).removeprefix("torch.")) if amp_dtype is not None else None
    run_dtype = None if instead == "off" else getattr(torch, instead) if instead else amp_dtype
    # on the simulated device, autocast is the device's own (the simulation applies CUDA's policy on it)
    autocast = CudaAutocast(run_dtype) if run_dtype is not None and simulated is None else None
    use_scaler = train and amp == "fp16"
    amp_meta = None
    if amp_dtype is not None:
        amp_meta = {"dtype": str(amp_dtype).removeprefix("torch."), "policy": "cuda", "grad_scaler": use_scaler}
    if autocast is not None:
        if autocast.policy.unknown:
            warnings.append("autocast: ops on this torch's AutocastCUDA key with no policy in opaudit's data "
                            f"(traced without a cast): {', '.join(autocast.policy.unknown)}")
    loss_fn = loss_fn or default_loss
    make_opt = optimizer or default_optimizer
    opt_name = None
    optimizer_steps = max(steps, 2) if train else 0
    stage = "setup"

    def enter(name: str) -> str:  # the stage the model is in: for failure messages and a progress display
        if on_stage is not None:
            on_stage(name)
        return name

    m, x = prepared.model, prepared.inputs
    common: dict[str, Any] = dict(mode=prepared.mode, mode_reason=prepared.reason, train=train, amp=amp_meta,
                                  source=source, optimizer_steps=optimizer_steps,
                                  device="cuda" if simulated else prepared.device, simulated=simulated)

    @contextmanager
    def region():
        # the forward pass and the loss: under autocast if asked, and on meta, with meta as the
        # default device, so that tensors the model or the loss create (labels, masks) land there too
        # (on the simulated device likewise: the convention's get_loss makes its labels without a device)
        default = "meta" if prepared.mode == "meta" else sim.name if simulated is not None else None
        with default_device(default):
            if amp_dtype is not None and simulated is not None:
                with _sim_amp_region(sim.name, rec, amp_dtype, run_dtype):
                    yield
            elif amp_dtype is None:
                yield
            else:
                with _amp_region(autocast, rec, amp_dtype, run_dtype):
                    yield

    try:
        with prepared.context():
            if train:
                m.train()
                params = [p for p in m.parameters() if p.requires_grad]
                if not params:
                    raise OpauditError("the model has no parameter that requires grad, so it cannot be trained",
                                       hint="trace it without --train")
                stage = enter("creating the optimizer")
                opt = make_opt(params)
                opt_name = _describe_optimizer(opt)
                scaler = _grad_scaler(prepared.device) if use_scaler else None
            else:
                m.eval()
            if autocast is not None:
                autocast.install()
            try:
                rec.bridged_before = bridged_calls() if simulated is not None else {}
                with recording(rec):
                    if not train:
                        stage = enter("the forward pass")
                        with torch.no_grad(), region():
                            _call(m, x)
                    for i in range(optimizer_steps):
                        if i < steps:
                            if i:
                                opt.zero_grad(set_to_none=True)
                            stage = enter("the forward pass")
                            with region():
                                out = _call(m, x)
                                stage = enter("the loss")
                                loss = loss_fn(out, x)
                            stage = enter("the backward pass")
                            (scaler.scale(loss) if scaler is not None else loss).backward()
                            del out, loss
                        stage = enter("the optimizer step")
                        if scaler is not None:
                            scaler.step(opt)
                            scaler.update()
                        else:
                            opt.step()
                    if train:
                        opt.zero_grad(set_to_none=True)
            finally:
                if autocast is not None:
                    autocast.uninstall()
    except OpauditError as e:
        if isinstance(e, UserCodeError) or stage == "setup":
            raise
        raise UserCodeError(e.message, hint=e.hint, partial=_partial(rec, e.message, common, warnings)) from None
    except Exception as e:
        msg = f"the model failed in {stage}: {describe_exception(e)}"
        raise UserCodeError(msg, details=user_frames(e), hint=_failure_hint(e, prepared.mode),
                            partial=_partial(rec, msg, common, warnings)) from None
    return build_trace(rec, steps=steps if train else 0, optimizer=opt_name, warnings=warnings, **common)


def _partial(rec: Recording, msg: str, common: dict, warnings: list[str]) -> Trace | None:
    if not rec.total:
        return None
    return build_trace(rec, status="partial", error=msg, warnings=warnings, **common)


@contextmanager
def _amp_region(autocast: CudaAutocast | None, rec: Recording, low: torch.dtype,
                run: torch.dtype | None) -> Iterator[None]:
    """``scan --amp``'s region, recorded as torch.autocast's in ``low``; it runs in ``run`` (None: autocast off, in a
    re-trace that follows a device where it is)."""
    rec.amp_low = run
    rec.note_autocast("cuda", str(low).removeprefix("torch."), sys._getframe())  # recorded as torch.autocast's
    try:
        with autocast.region() if autocast is not None else nullcontext():
            yield
    finally:
        rec.amp_low = None


@contextmanager
def _sim_amp_region(name: str, rec: Recording, low: torch.dtype, run: torch.dtype | None) -> Iterator[None]:
    rec.amp_low = run  # torch.autocast's __init__ runs it in ``run`` (recorder.RegionWatch)
    try:
        with torch.autocast(name, dtype=low):
            yield
    finally:
        rec.amp_low = None


def _to_device(prepared: Any, device: torch.device, copy: bool) -> None:
    if copy:
        prepared.model = twin(prepared.model, lambda t: t.to(device))
    else:
        prepared.model.to(device)
    prepared.inputs = pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, prepared.inputs)


def _grad_scaler(device: str):
    try:
        return torch.amp.GradScaler("cpu" if device == "meta" else device)
    except (AttributeError, TypeError):  # torch < 2.3
        return torch.cuda.amp.GradScaler(enabled=True)


def _describe_optimizer(opt: torch.optim.Optimizer) -> str:
    d = opt.defaults
    flags = [f"{k}={d[k]}" for k in ("foreach", "fused") if d.get(k)]
    return f"{type(opt).__name__}({', '.join(flags)})" if flags else type(opt).__name__


_BUILD_HINT = ("the model is built on the meta device first, to measure it; if the factory loads weights or "
               "needs real data, use --mode real or --mode fake")


def _failure_hint(e: Exception, mode: str) -> str | None:
    text = str(e)
    if mode == "meta" and ("meta" in text.lower() or "data-dependent" in text.lower()):
        return "this code path needs real data; try --mode fake or --mode real"
    if any(s in text for s in ("shape", "size", "dimension", "mat1 and mat2")):
        return "check that get_inputs() returns tensors of the shapes the model expects"
    return None
