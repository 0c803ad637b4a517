import random

import numpy as np
import torch
from basicsr.utils.registry import DATASET_REGISTRY

from mcnet_basicsr.ops import build_degradation, build_operator
from mcnet_basicsr.ops.blur import pad_kernel
from mcnet_basicsr.ops.kernels import load_kernel
from .bicubic_pair_dataset import BicubicPairDataset
from .kernel_family import KernelFamily

_QUANTIZE = ('uint8', 'float')
_KEYS = ('resizers', 'kernel', 'kernels')


@DATASET_REGISTRY.register()
class DegradedPairDataset(BicubicPairDataset):
    """HR images (or crops) paired with an LR made from them on the fly by a known degradation.

    As :class:`BicubicPairDataset` (the same crops, flips and image handling), but the LR comes from the degradation
    that ``degradation`` names, rounded to uint8 or kept in float, then Gaussian noise of a std drawn from ``noise``
    per sample added (after the rounding, as the kernel-SR literature's protocol does: a noisy LR is float). The
    sample says how it was made, so that the model tells the layer (``MCNetModel.feed_data``): ``kernel`` (the blur
    kernel, a float tensor) or ``degradation`` (a resizer's name), both in a mix (``degradation`` '' for a blurred
    sample, ``kernel`` for a resized one the circular blur equal to its resizer away from the borders, all padded
    to one size), and ``noise_sigma`` (the noise std on [0, 1] images). In the test and val phases every image gets
    the same degradation and noise at every epoch (drawn from ``seed`` and the image's index); in training they are
    drawn from Python's ``random`` (which BasicSR seeds per worker).

    Args (``opt`` keys, beside those of :class:`BicubicPairDataset`):
        degradation (dict): One of
            ``{resizers: [name, ...]}``: one of these resizers per sample (``mcnet_basicsr.ops.DEGRADATIONS``, e.g.
            pil-bicubic, cv2-area, torch-bicubic, matlab-bicubic);
            ``{kernel: path, index: i}``: one blur kernel (``.npy``, ``.png``, ``.mat`` with ``index``), circular
            convolution then the upper-left pixel of each s x s block (``{type: blur}``);
            ``{kernels: {kinds: [isotropic, anisotropic, motion], size: 25, sigma: [0.6, 3.0]}}``: a kernel drawn
            per sample from :class:`~mcnet_basicsr.data.kernel_family.KernelFamily`;
            ``{kernels: {...}, resizers: [name, ...], resizer_share: 0.5}``: a mix, a resizer for that share of
            the samples (the LR made by the resizer itself), a family kernel for the others.
        noise (float | list): Noise std on 0..255: a number, or ``[lo, hi]`` to draw from uniformly. Default: 0.
        quantize (str): 'uint8' (round half up and clip, as saved LR files are) or 'float'. Default: 'uint8'.
        seed (int): Seed of the test and val phases' draws. Default: 0.
    """

    def __init__(self, opt):
        super().__init__(opt)
        deg = opt.get('degradation')
        given = {k for k in _KEYS if k in (deg if isinstance(deg, dict) else {})}
        if len(given) != 1 and given != {'kernels', 'resizers'}:
            raise ValueError(f'DegradedPairDataset {opt.get("name")}: degradation must be a mapping with one of the '
                             f'keys {", ".join(_KEYS)} (or kernels and resizers, a mix), got {deg!r}.')
        self.resizers = self.kernel = self.family = self.mix = None
        if 'resizers' in deg:
            names = deg['resizers']
            self.resizers = [names] if isinstance(names, str) else list(names)
            self._operators = {name: build_degradation(name, self.scale) for name in self.resizers}
        if 'kernel' in deg:
            self.kernel = np.asarray(load_kernel(deg['kernel'], deg.get('index')), dtype=np.float64)
            self._operators = {'kernel': build_operator({'type': 'blur', 'scale': self.scale, 'kernel': self.kernel})}
        if 'kernels' in deg:
            self.family = KernelFamily(**(deg['kernels'] or {}))
        if self.family is not None and self.resizers is not None:
            share = float(deg.get('resizer_share', 0.5))
            if not 0 <= share <= 1:
                raise ValueError(f'DegradedPairDataset: resizer_share must be in [0, 1], got {share!r}.')
            kernels = {name: op.circular_blur().kernel for name, op in self._operators.items()}
            size = max([self.family.size] + [max(k.shape) for k in kernels.values()]) | 1
            self.mix = {'share': share, 'size': size, 'kernels': {n: pad_kernel(k, size) for n, k in kernels.items()}}
        noise = opt.get('noise', 0)
        lo, hi = (noise, noise) if isinstance(noise, (int, float)) else tuple(noise)
        if not 0 <= lo <= hi:
            raise ValueError(f'DegradedPairDataset: noise must be a std >= 0 or a range [lo, hi] on 0..255, got '
                             f'{noise!r}.')
        self.noise = (float(lo), float(hi))
        self.quantize = opt.get('quantize', 'uint8')
        if self.quantize not in _QUANTIZE:
            raise ValueError(f'DegradedPairDataset: quantize must be one of {_QUANTIZE}, got {self.quantize!r}.')
        self.seed = int(opt.get('seed', 0))

    def _rng(self, index):
        if self.phase == 'train':
            return np.random.default_rng(random.getrandbits(64))
        return np.random.default_rng([self.seed, index])

    def degrade(self, img, index):
        rng = self._rng(index)
        if self.mix is not None:
            op, measurement = self._mixed(rng)
        elif self.resizers is not None:
            name = self.resizers[rng.integers(len(self.resizers))]
            op, measurement = self._operators[name], {'degradation': name}
        elif self.kernel is not None:
            op, measurement = self._operators['kernel'], {'kernel': torch.from_numpy(self.kernel).float()}
        else:
            kernel, _ = self.family.draw(rng)
            op = build_operator({'type': 'blur', 'scale': self.scale, 'kernel': kernel})
            measurement = {'kernel': torch.from_numpy(kernel).float()}
        sigma = rng.uniform(*self.noise) / 255.0 if self.noise[1] > 0 else 0.0
        hr = torch.from_numpy(img[..., ::-1].transpose(2, 0, 1).astype(np.float64) / 255.0)[None]  # RGB
        lq = op(hr)[0].numpy().transpose(1, 2, 0)
        if self.quantize == 'uint8':
            lq = np.clip(np.floor(lq * 255.0 + 0.5), 0, 255) / 255.0
        if sigma:  # after the rounding, as the kernel-SR protocol adds it (a noisy LR stays float)
            lq = lq + rng.normal(0.0, sigma, lq.shape)
        measurement['noise_sigma'] = torch.tensor(sigma, dtype=torch.float32)
        return np.ascontiguousarray(lq[..., ::-1], dtype=np.float32), measurement  # BGR, as BasicSR reads images

    def _mixed(self, rng):
        """A sample's operator and measurement in a mix: a resizer (its circular kernel told beside its name) or a
        family kernel (name '')."""
        if rng.random() < self.mix['share']:
            name = self.resizers[rng.integers(len(self.resizers))]
            op, kernel = self._operators[name], self.mix['kernels'][name]
        else:
            name, (kernel, _) = '', self.family.draw(rng)
            op = build_operator({'type': 'blur', 'scale': self.scale, 'kernel': kernel})
            kernel = pad_kernel(kernel, self.mix['size'])
        return op, {'kernel': torch.tensor(kernel, dtype=torch.float32), 'degradation': name}
