"""`torch.utils.data` for the engine: `engine.utils.loading` bound to the engine's Variable (by `engine/__init__`,
once the namespace it binds to is complete)."""

__all__: list[str] = []
