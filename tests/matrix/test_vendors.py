"""Each vendor's identity is written once (coverage_db/curated/vendors.toml): every release coverage_db
holds and every rules/targets/ table that ports code to a vendor says the same."""

from __future__ import annotations

from opaudit.lint.catalogue import load_target, target_names
from opaudit.matrix.database import load_database
from opaudit.matrix.vendors import vendors


# releases whose identity differs from their vendor's, and why (each adapter says so in its code)
def _exception(release) -> str | None:
    if release.vendor == "ascend" and release.package == "torch":
        return "Ascend's early releases were a fork of PyTorch itself (NPU key, nothing to import)"
    if release.vendor == "ascend" and release.dispatch_key == "XLA":
        return "torch_npu registered under the XLA key before PyTorch 2.1"
    if release.vendor == "biren" and release.package == "torch_dipu":
        return "Biren's DIPU build is DIPU's identity (poses as cuda, XPU key)"
    return None


def test_every_release_has_its_vendor_s_identity():
    db = load_database()
    assert set(db.vendors) == set(vendors()), "a vendor of coverage_db without an identity, or one with no release"
    checked = 0
    for name in sorted(db.by_vendor):
        v = vendors()[name]
        for release in (db.release(e) for e in db.by_vendor[name]):
            if _exception(release):
                continue
            got = (release.device_type, release.dispatch_key, release.package, release.import_name)
            assert got == (v.device_type, v.dispatch_key, v.package, v.import_name), release.key
            checked += 1
    assert checked > 150


def test_every_porting_target_names_its_vendor_s_device_module_and_package():
    by_target = {v.lint_target: v for v in vendors().values() if v.lint_target}
    assert set(by_target) <= set(target_names())
    for name, v in by_target.items():
        t = load_target(name)
        assert (t.device, t.module) == (v.device_type, v.module), name
        # the import a port adds: the vendor's import (none for a device PyTorch itself registers)
        assert t.package == (v.import_name or ""), name
