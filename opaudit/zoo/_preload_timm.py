"""Imported by the zoo's fork server when a zoo runs timm models: timm, and torchvision under it, imported once
there (seconds: as long as a small model's trace) instead of in each model's process. Where timm does not import,
nothing is kept and each model's process says why in its record."""

try:
    import timm  # noqa: F401
except Exception:  # noqa: BLE001, S110 - the model's own process imports it again and records the error
    pass
