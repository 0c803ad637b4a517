import random

import numpy as np
from basicsr.data.transforms import augment
from basicsr.utils import imfrombytes, img2tensor
from basicsr.utils.registry import DATASET_REGISTRY

from mcnet_basicsr.utils.images import bicubic_lr, mod_crop
from .clean_patch_dataset import CleanPatchDataset

# a train image smaller than the crop is replaced by another one drawn at random, at most this often in a row
_MAX_REDRAWS = 100


@DATASET_REGISTRY.register()
class BicubicPairDataset(CleanPatchDataset):
    """HR crops paired with LR made *from the crop itself* (MATLAB bicubic, uint8), for training MCNet.

    Pairs cut from a whole LR image (BasicSR's ``PairedImageDataset`` on sub-image LMDBs) do not satisfy
    the measurement model at the crop's edges: the LR pixels there were computed from HR pixels outside
    the crop, while the operator ``A`` of the implicit layer sees only the crop (MATLAB's symmetric
    padding at its edge). Forcing ``A x = b`` then distorts a band along every edge, a large share of a
    small training patch, which whole test images do not have. Here every pair satisfies
    ``b = clip(round(A x))`` exactly, as whole test images do.

    Train phase: a random ``gt_size`` crop (a multiple of ``scale``) of each HR image, flips and
    rotations, then the LR. Images smaller than the crop are replaced by a randomly drawn other image.
    Other phases: the whole image, mod-cropped to the scale. Returns
    ``{'lq': (3, h, w), 'gt': (3, H, W), 'lq_path', 'gt_path'}``, RGB in [0, 1].

    Args (``opt`` keys): those of :class:`CleanPatchDataset` (``dataroot_gt`` an HR folder or an HR
    LMDB, ``io_backend``, ``gt_size``, ``use_hflip``, ``use_rot``; ``color`` must be 'rgb', the default
    here) and ``scale`` (int), set by BasicSR from the option file's top-level ``scale``.
    """

    def __init__(self, opt):
        opt = dict(opt)
        opt.setdefault('color', 'rgb')
        if opt['color'] != 'rgb':
            raise ValueError(f"BicubicPairDataset makes RGB pairs (the backbone's input); got color {opt['color']!r}.")
        super().__init__(opt)
        self.scale = opt.get('scale')
        if not isinstance(self.scale, int) or self.scale < 1:
            raise ValueError(f'BicubicPairDataset {opt.get("name")}: scale must be a positive int, got {self.scale!r}.')
        if self.phase == 'train' and self.gt_size % self.scale:
            raise ValueError(f'BicubicPairDataset: gt_size {self.gt_size} is not a multiple of the scale {self.scale}.')

    def _read_uint8(self, index):
        path = self.paths[index]
        img = imfrombytes(self.file_client.get(path, 'gt'), float32=False)  # HxWx3 BGR uint8
        return path, img

    def __getitem__(self, index):
        if self.file_client is None:
            self._open()
        path, img = self._read_uint8(index)
        if self.phase == 'train':
            s = self.gt_size
            for _ in range(_MAX_REDRAWS):
                if img.shape[0] >= s and img.shape[1] >= s:
                    break
                path, img = self._read_uint8(random.randrange(len(self.paths)))
            else:
                raise ValueError(f'{self.gt_folder}: no image of at least {s}x{s} pixels found in {_MAX_REDRAWS} '
                                 'draws.')
            top, left = random.randint(0, img.shape[0] - s), random.randint(0, img.shape[1] - s)
            img = augment(img[top:top + s, left:left + s], self.opt.get('use_hflip', True),
                          self.opt.get('use_rot', True))
        else:
            img = mod_crop(img, self.scale)
        img = np.ascontiguousarray(img)
        lq, measurement = self.degrade(img, index)
        gt_t, lq_t = img2tensor([img.astype(np.float32) / 255., lq], bgr2rgb=True, float32=True)
        return dict(measurement, lq=lq_t, gt=gt_t, lq_path=path, gt_path=path)

    def degrade(self, img, index):
        """The LR of the uint8 BGR HR ``img`` (HxWx3; ``index`` of the image in the set) as HxWx3 float32 BGR in [0, 1],
        and what the model needs to know of how it was made, as extra entries of the sample (none here)."""
        # as scripts/prepare_datasets.py makes the test sets' LR
        return bicubic_lr(img, self.scale).astype(np.float32) / 255., {}
