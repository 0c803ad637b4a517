"""Blur kernels for :class:`~mcnet_basicsr.ops.blur.BlurDownsample`: checking one, and loading one from a file.

:func:`load_kernel` reads a ``.npy`` array, a grayscale ``.png`` (normalised to sum 1) or a MATLAB ``.mat`` file
(one variable: a 2-D array, or a cell array of them such as USRNet's ``kernels_12.mat``, from which ``index`` picks
one). Kernels are kept as given otherwise: a kernel that does not sum to 1 changes the brightness of ``A x``.
"""
import os

import numpy as np
import torch

__all__ = ['check_kernel', 'load_kernel']

_FORMATS = ('.npy', '.png', '.mat')
_GRAY_MODES = ('L', 'I;16', 'I;16B', 'I;16L', 'I', 'F')


def check_kernel(kernel, name='kernel', per_sample=True):
    """A read-only float64 numpy copy of a kernel; ValueError (one line) for anything that is not one.

    Args:
        kernel (array-like | Tensor): (kh, kw), or with ``per_sample`` also (N, kh, kw), one kernel per sample.
        name (str): what the messages call it. Default: 'kernel'.
        per_sample (bool): whether a 3-D stack is allowed. Default: True.

    Returns:
        ndarray: float64, the same shape; every kernel finite with a sum > 0 (not normalised).
    """
    if torch.is_tensor(kernel):
        kernel = kernel.detach().cpu().to(torch.float64).numpy()
    try:
        array = np.array(kernel, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f'{name} must be a numeric array, got {type(kernel).__name__}') from None
    shapes = '(kh, kw) or (N, kh, kw) (one kernel per sample)' if per_sample else '(kh, kw)'
    if array.ndim not in ((2, 3) if per_sample else (2, )) or array.size == 0:
        raise ValueError(f'{name} must have shape {shapes} with kh, kw >= 1, got shape {array.shape}')
    if not np.isfinite(array).all():
        raise ValueError(f'{name} has non-finite values (NaN or inf); every tap must be finite')
    sums = array.reshape(-1, array.shape[-2] * array.shape[-1]).sum(1)
    if not (sums > 0).all():
        which = f' (kernel {int(np.argmin(sums))} of {len(sums)})' if array.ndim == 3 else ''
        raise ValueError(f'{name} must have a sum > 0 (it is used as given, not normalised), got sum '
                         f'{sums.min():.6g}{which}')
    array.setflags(write=False)
    return array


def load_kernel(path, index=None):
    """One 2-D blur kernel from a file, as a float64 numpy array.

    Args:
        path (str | PathLike): ``.npy`` (a 2-D array, used as stored), ``.png`` (a grayscale image, normalised to
            sum 1; needs Pillow) or ``.mat`` (``scipy.io.loadmat``; the file must hold one variable: a 2-D array,
            used as stored, or a cell array of 2-D arrays).
        index (int | None): which kernel of a ``.mat`` cell array, 0-based (in MATLAB's linear order); needed
            when the cell array holds more than one, not allowed otherwise. Default: None.

    Returns:
        ndarray: (kh, kw) float64, read-only, checked by :func:`check_kernel` (finite, sum > 0).
    """
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in _FORMATS:
        raise ValueError(f'kernel file {path!r} has extension {ext!r}; supported: {", ".join(_FORMATS)}')
    if index is not None and (isinstance(index, bool) or int(index) != index):
        raise ValueError(f'index must be an integer (0-based) or None, got {index!r}')
    name = f'kernel in {path}'
    if ext == '.mat':
        kernel, name = _from_mat(path, index)
        return check_kernel(_numeric(kernel, name), name=name, per_sample=False)
    if index is not None:
        raise ValueError(f'index={index} picks a kernel of a .mat cell array; {path} holds one kernel')
    if ext == '.npy':
        return check_kernel(np.load(path, allow_pickle=False), name=name, per_sample=False)
    from PIL import Image  # only for this format
    with Image.open(path) as image:
        if image.mode not in _GRAY_MODES:
            raise ValueError(f'{path}: a kernel PNG must be grayscale (mode {", ".join(_GRAY_MODES)}), '
                             f'got mode {image.mode}')
        array = np.asarray(image, dtype=np.float64)
    kernel = check_kernel(array, name=name, per_sample=False)
    return check_kernel(kernel / kernel.sum(), name=name, per_sample=False)


def _numeric(value, name):
    if not isinstance(value, np.ndarray) or value.dtype == object or value.dtype.names is not None:
        raise ValueError(f'{name} must be a numeric 2-D array, got {type(value).__name__}'
                         f'{" of dtype " + str(value.dtype) if isinstance(value, np.ndarray) else ""}')
    return value


def _from_mat(path, index):
    """(the array or cell element, its name in messages) of a .mat file with one variable."""
    import scipy.io
    data = scipy.io.loadmat(path)
    names = [key for key in data if not key.startswith('__')]
    if len(names) != 1:
        raise ValueError(f'{path} holds {len(names)} variables {names}; load_kernel reads a .mat file with one '
                         '(a 2-D kernel or a cell array of them)')
    value = data[names[0]]
    if value.dtype != object:
        if index is not None:
            raise ValueError(f'index={index} picks a kernel of a cell array; variable {names[0]!r} of {path} is '
                             f'one array of shape {value.shape}')
        return value, f'variable {names[0]!r} of {path}'
    cells = value.ravel(order='F')  # MATLAB's linear order: kernels{index + 1}
    count = len(cells)
    if index is None:
        if count != 1:
            raise ValueError(f'variable {names[0]!r} of {path} is a cell array of {count} kernels; '
                             f'pick one with index (0 to {count - 1})')
        index = 0
    if not 0 <= index < count:
        raise ValueError(f'index {index} is out of range: variable {names[0]!r} of {path} holds {count} kernels '
                         f'(index 0 to {count - 1})')
    return cells[int(index)], f'kernel {int(index)} of variable {names[0]!r} of {path}'
