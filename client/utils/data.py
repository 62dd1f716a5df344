"""`torch.utils.data` for the client: `engine.utils.loading` bound to the client's Variable (by `client/__init__`;
a DataLoader's batches are client Variables, its indices drawn by the client's generators)."""

__all__: list[str] = []
