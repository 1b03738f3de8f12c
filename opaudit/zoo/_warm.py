"""Imported by the zoo's fork server: the work every model's process would otherwise repeat before its first op,
done once there and inherited by each fork. The CUDA arms of torch's own device branches (their functions'
source parsed, tracing/branches.py) and the coverage_db matrices of the default targets (every release's file
and PyTorch's op tables, cached per process). Nothing here runs a tensor op or starts a thread (a fork after
either is unsafe); a failure leaves each model's process to do the work itself, as without this module."""

try:
    from opaudit.matrix import load_matrix
    from opaudit.tracing import branches
    from opaudit.zoo.run import resolve_targets

    branches.installed()
    for _key in resolve_targets(None):
        load_matrix(_key)
except Exception:  # noqa: BLE001, S110 - each model's process does the same work, and says what fails there
    pass

import gc  # noqa: E402 - after the warm-up: what it made is frozen too

# Last of the fork server's imports: every object so far moved out of the collector's reach. A fork shares the
# server's memory page by page until one is written; the collector's first full pass in each model's process
# would walk (and so write, and copy) the headers of every object torch and transformers made: tenths of a second
# per model, and the memory of those copies.
gc.freeze()
