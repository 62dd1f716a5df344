"""`torch.nn`'s padding, resampling and rearranging modules (ConstantPad/ZeroPad/ReflectionPad/ReplicationPad/
CircularPad 1d, 2d and 3d, Upsample and UpsamplingNearest2d/Bilinear2d, PixelShuffle/PixelUnshuffle, Fold/Unfold,
Bilinear, AdaptiveMaxPool1d/2d/3d, MaxUnpool1d/2d/3d, LPPool1d/2d/3d, ChannelShuffle), mixins that `engine.nn.module_classes.bind` joins to a side's `Module` as it does
`engine.nn.sequence`'s; each forward calls `engine.nn.functional`. Arguments, Bilinear's parameters and their
initialisation (U(-1/sqrt(in1_features), 1/sqrt(in1_features))) and the reprs are PyTorch's."""

from __future__ import annotations

import math

from engine.nn import functional as F
from engine.nn import init
from engine.nn.adaptive import AdaptiveLogSoftmaxWithLoss
from engine.nn.pool_variants import as_tuple
from engine.nn.sequence import _Sided


class _Pad(_Sided):
    """F.pad with `mode`; an int padding is the same on every side of the last `_dims` dimensions."""

    _dims = 1
    _mode = "reflect"

    def __init__(self, padding):
        super().__init__()
        self.padding = (padding,) * (2 * self._dims) if isinstance(padding, int) else tuple(padding)

    def forward(self, input):
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPad(_Pad):
    _mode = "constant"

    def __init__(self, padding, value: float):
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPad):
    pass


class ConstantPad2d(_ConstantPad):
    _dims = 2


class ConstantPad3d(_ConstantPad):
    _dims = 3


class _ZeroPad(_ConstantPad):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad1d(_ZeroPad):
    pass


class ZeroPad2d(_ZeroPad):
    _dims = 2


class ZeroPad3d(_ZeroPad):
    _dims = 3


class ReflectionPad1d(_Pad):
    pass


class ReflectionPad2d(_Pad):
    _dims = 2


class ReflectionPad3d(_Pad):
    _dims = 3


class ReplicationPad1d(_Pad):
    _mode = "replicate"


class ReplicationPad2d(ReplicationPad1d):
    _dims = 2


class ReplicationPad3d(ReplicationPad1d):
    _dims = 3


class CircularPad1d(_Pad):
    _mode = "circular"


class CircularPad2d(CircularPad1d):
    _dims = 2


class CircularPad3d(CircularPad1d):
    _dims = 3


class Upsample(_Sided):
    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None):
        super().__init__()
        self.size, self.mode = size, mode
        if isinstance(scale_factor, (tuple, list)):
            self.scale_factor = tuple(float(factor) for factor in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input):
        return F.interpolate(
            input,
            self.size,
            self.scale_factor,
            self.mode,
            self.align_corners,
            recompute_scale_factor=self.recompute_scale_factor,
        )

    def extra_repr(self) -> str:
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return f"{info}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class PixelShuffle(_Sided):
    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(_Sided):
    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class Unfold(_Sided):
    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, stride={self.stride}"


class Fold(Unfold):
    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__(kernel_size, dilation, padding, stride)
        self.output_size = output_size

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}, " + super().extra_repr()


class Bilinear(_Sided):
    """y = x1^T weight[o] x2 + bias[o]; weight [out_features, in1_features, in2_features]."""

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        shape = (out_features, in1_features, in2_features)
        self.weight = self._parameter(self._ns.empty(shape, device=device, dtype=dtype))
        if bias:
            self.bias = self._parameter(self._ns.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
            f"out_features={self.out_features}, bias={self.bias is not None}"
        )


class _Table(_Sided):
    """An embedding table, Embedding's and EmbeddingBag's: weight [num_embeddings, embedding_dim] from N(0, 1) with
    its padding_idx row zero, or `_weight` as given; `padding_message`: torch's words for a padding_idx out of range
    (they differ in case between the two)."""

    padding_message = "Padding_idx must be within num_embeddings"

    def _table(self, num_embeddings, embedding_dim, padding_idx, _weight, freeze, device, dtype) -> None:
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError(self.padding_message)
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        if _weight is None:
            weight = self._ns.empty((num_embeddings, embedding_dim), device=device, dtype=dtype)
            self.weight = self._parameter(weight, requires_grad=not freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = self._parameter(_weight, requires_grad=not freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with self._ns.no_grad():
                self.weight[self.padding_idx] = 0

    @staticmethod
    def _pretrained(embeddings):
        if embeddings.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        return embeddings.shape


class EmbeddingBag(_Table):
    """Sums, means or maxima of bags of rows of weight [num_embeddings, embedding_dim] (F.embedding_bag); the
    weight as Embedding's."""

    padding_message = "padding_idx must be within num_embeddings"

    def __init__(
        self,
        num_embeddings,
        embedding_dim,
        max_norm=None,
        norm_type=2.0,
        scale_grad_by_freq=False,
        mode="mean",
        sparse=False,
        _weight=None,
        include_last_offset=False,
        padding_idx=None,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.mode, self.include_last_offset = mode, include_last_offset
        self.max_norm, self.norm_type, self.scale_grad_by_freq, self.sparse = (
            max_norm,
            norm_type,
            scale_grad_by_freq,
            sparse,
        )
        self._table(num_embeddings, embedding_dim, padding_idx, _weight, False, device, dtype)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, **kwargs):
        bag = cls(*cls._pretrained(embeddings), _weight=embeddings, **kwargs)
        bag.weight.requires_grad = not freeze
        return bag

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(
            input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq, self.mode,
            self.sparse, per_sample_weights, self.include_last_offset, self.padding_idx,
        )  # fmt: skip

    def extra_repr(self) -> str:  # (torch's order: max_norm... before mode)
        text = f"{self.num_embeddings}, {self.embedding_dim}" + "".join(
            f", {key}={getattr(self, key)!r}" for key, skip in _BAG_OPTIONS if getattr(self, key) != skip
        )
        return f"{text}, mode={self.mode!r}" + ("" if self.padding_idx is None else f", padding_idx={self.padding_idx}")


_BAG_OPTIONS = (("max_norm", None), ("norm_type", 2), ("scale_grad_by_freq", False))


class AdaptiveMaxPool1d(_Sided):
    _function = staticmethod(F.adaptive_max_pool1d)

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, input):
        return self._function(input, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveMaxPool2d(AdaptiveMaxPool1d):
    _function = staticmethod(F.adaptive_max_pool2d)


class AdaptiveMaxPool3d(AdaptiveMaxPool1d):
    _function = staticmethod(F.adaptive_max_pool3d)


class _MaxUnpool(_Sided):
    _dims = 2

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size, self.padding = as_tuple(kernel_size, self._dims), as_tuple(padding, self._dims)
        self.stride = self.kernel_size if stride is None else as_tuple(stride, self._dims)

    def forward(self, input, indices, output_size=None):
        unpool = getattr(F, f"max_unpool{self._dims}d")
        return unpool(input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpool):
    _dims = 1


class MaxUnpool2d(_MaxUnpool):
    pass


class MaxUnpool3d(_MaxUnpool):
    _dims = 3


class _LPPool(_Sided):
    _dims = 2

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def forward(self, input):
        pool = getattr(F, f"lp_pool{self._dims}d")
        return pool(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self) -> str:
        return (
            f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"ceil_mode={self.ceil_mode}"
        )


class LPPool1d(_LPPool):
    _dims = 1


class LPPool2d(_LPPool):
    pass


class LPPool3d(_LPPool):
    _dims = 3


class ChannelShuffle(_Sided):
    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"


LAYERS: tuple[type, ...] = (
    ConstantPad1d,
    ConstantPad2d,
    ZeroPad1d,
    ZeroPad2d,
    ReflectionPad1d,
    ReflectionPad2d,
    ReplicationPad1d,
)
LAYERS += (ReplicationPad2d, CircularPad1d, CircularPad2d, Upsample, UpsamplingNearest2d, UpsamplingBilinear2d)
LAYERS += (PixelShuffle, PixelUnshuffle, Unfold, Fold, Bilinear, AdaptiveMaxPool1d, AdaptiveMaxPool2d, EmbeddingBag)
LAYERS += (AdaptiveLogSoftmaxWithLoss,)  # (engine.nn.adaptive)
LAYERS += (MaxUnpool1d, MaxUnpool2d, MaxUnpool3d, LPPool1d, LPPool2d, LPPool3d, ChannelShuffle)
LAYERS += (ZeroPad3d, ConstantPad3d, ReflectionPad3d, ReplicationPad3d, CircularPad3d, AdaptiveMaxPool3d)
