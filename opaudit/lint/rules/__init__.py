"""The rule families: one module per family of the catalogue (rules/catalogue.toml), each holding its rules'
matching code and data tables; the rules' messages, fix classes and examples are the catalogue's.

=================  ==========================================================================
family             rules
=================  ==========================================================================
``devices``        OA1xx device strings: positions, literals, probes, the availability idiom,
                   ``torch.load``; the data flow between a device string and its probes
``tensors``        ``.cuda()`` (OA101), ``.is_cuda`` (OA108), typed CUDA tensors (OA109)
``amp``            OA2xx: ``torch.cuda.amp``, autocast's GPU functions, fused optimizers
``distributed``    OA3xx: the NCCL backend as a string, ``barrier``, ``device_ids``
``apis``           every rule matched by qualified name (the catalogue's ``apis``: OA1xx probes,
                   OA3xx, OA4xx, OA6xx flags), imports of torch's CUDA modules, OA410, OA414
``environment``    OA5xx: CUDA and NCCL environment variables, launchers
``backends``       OA6xx: ``sdp_kernel``, ``torch.compile`` with CUDA graphs or inductor
``libraries``      OA7xx and OA002: CUDA-only libraries, imported and used; compiled extensions
``extensions``     OA8xx: ``cpp_extension.load``, CUDA dispatch keys, ``.cu`` names, nvcc flags
=================  ==========================================================================

Adding a rule: its table in rules/catalogue.toml (code, summary, fix class, examples per target). A rule
that matches qualified names needs nothing else (``apis = [...]``; what it becomes per target is data in
rules/targets/). A rule that needs a mechanism gets handlers in its family's module, registered with the
decorators of ``opaudit.lint.walk`` (``on``, ``on_call``, ``on_method``, ``on_keyword``, ``on_string``, ...);
its examples are run by tests/lint/test_catalogue.py.

The order below is the order the walk calls handlers that look at the same node. It matters in three
places: a ``"nvcc"`` argument is a command (environment) before it is a flag (extensions); an f-string
that is an nvcc flag (extensions) is not a device string (devices); an import of a CUDA-only library
(libraries) claims the import. Where ``torch.is_autocast_enabled(...)`` takes a device type (devices) is
looked at before the call is renamed (amp).
"""

from opaudit.lint.rules import environment, extensions, libraries, devices, amp, apis, tensors, distributed, \
    backends  # noqa: I001 (the order is the order of the handlers)

__all__ = ["amp", "apis", "backends", "devices", "distributed", "environment", "extensions", "libraries", "tensors"]
