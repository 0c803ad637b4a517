"""What made ``mcnet-sr``'s inputs, resolved once from the options (:class:`Measurement`)."""
import os.path as osp
from dataclasses import dataclass
from typing import Any, Optional

from ..ops import BlurDownsample, ReflectBlurDownsample, build_degradation, load_kernel
from ..utils.image_files import ImageError
from .options import DEFAULT_DEGRADATION, UsageError, one_line


@dataclass(frozen=True)
class Measurement:
    """The measurement model of a run: built once after the options are parsed, read by every later step.

    Attributes:
        name (str): how the console names ``A``, e.g. 'matlab-bicubic', 'cv2-area' or 'kernel k.npy [3]'.
        family (str): the family of layers run for it: 'bicubic', 'kernels' or 'resizers' (the model cards' sections).
        channels (str): what is made consistent: 'y', or 'rgb' (each of R, G and B).
        boundary (str): how a blur met the image borders: 'circular' or 'reflect'.
        noise_sigma (float | None): standard deviation of the noise on each LR value, in [0, 1] units (None: none).
        operator (DownsampleOperator | None): ``A`` of the solve; None: the layer's own (MATLAB bicubic).
        measured_by (ReflectBlurDownsample | None): with boundary 'reflect', what made the input and what the output
            is measured against (the solve runs ``operator`` on the input padded by reflection); None: ``operator``.
        padding (int): LR pixels a side of that reflection padding (0 without it).
    """
    name: str
    family: str
    channels: str
    boundary: str = 'circular'
    noise_sigma: Optional[float] = None
    operator: Any = None
    measured_by: Any = None
    padding: int = 0

    def check_fits(self, h, w, scale):
        """ImageError where the blur kernel is larger than the output of an h x w input, or the reflection padding
        larger than the input."""
        kernel = getattr(self.operator, 'kernel', None)
        if kernel is not None and (kernel.shape[-2] > h * scale or kernel.shape[-1] > w * scale):
            raise ImageError(f'the {kernel.shape[-1]}x{kernel.shape[-2]} blur kernel is larger than the '
                             f'{w * scale}x{h * scale} output of this {w}x{h} input; the kernel must fit in the output')
        if self.padding > min(h, w):
            raise ImageError(f'--boundary {self.boundary} pads by {self.padding} pixels, more than this {w}x{h} input '
                             'has')


def read_kernel(path, index):
    """The blur kernel of ``--kernel`` (a UsageError of one line where it cannot be one)."""
    try:
        return load_kernel(path, index)
    except ValueError as err:  # load_kernel's own message says what is wrong (numpy's may not name the file)
        msg = one_line(err)
        raise UsageError(f'--kernel: {msg}' if path in msg else f'--kernel {path}: {msg}') from None
    except Exception as err:  # noqa: BLE001 -- unreadable: numpy's, scipy's or Pillow's own error
        raise UsageError(f'{path}: --kernel file cannot be read as a kernel ({one_line(err, 200)})') from None


def resolve_measurement(args):
    """The :class:`Measurement` of parsed options (:func:`.options.parse_args`): the layer's own operator (MATLAB
    bicubic) by default, ``--degradation``'s, or ``--kernel``'s blur and decimation (circular, or with ``--boundary
    reflect`` the circular model solved on the input padded by reflection)."""
    noise_sigma = args.noise / 255 if args.noise else None
    common = dict(family=args.layer_family, channels=args.channels, noise_sigma=noise_sigma)
    if args.kernel is None:
        operator = None if args.degradation == DEFAULT_DEGRADATION else build_degradation(args.degradation, args.scale)
        return Measurement(args.degradation, operator=operator, **common)
    index = '' if args.kernel_index is None else f' [{args.kernel_index}]'
    name = f'kernel {osp.basename(args.kernel)}{index}'
    operator = BlurDownsample(args.scale, read_kernel(args.kernel, args.kernel_index))
    if args.boundary != 'reflect':
        return Measurement(name, operator=operator, **common)
    measured_by = ReflectBlurDownsample(args.scale, operator.kernel, operator.offset)
    return Measurement(name, boundary=args.boundary, operator=operator, measured_by=measured_by,
                       padding=measured_by.lr_padding, **common)
