import os.path as osp
import random

import numpy as np
from basicsr.data.data_util import paths_from_folder, paths_from_lmdb
from basicsr.data.transforms import augment
from basicsr.utils import FileClient, bgr2ycbcr, imfrombytes, img2tensor
from basicsr.utils.registry import DATASET_REGISTRY
from torch.utils import data

_COLORS = ('y', 'rgb')
_BACKENDS = ('disk', 'lmdb')


@DATASET_REGISTRY.register()
class CleanPatchDataset(data.Dataset):
    """Clean images only, for training denoisers: the noise is added by the model (DenoiserModel).

    Train phase: a random ``gt_size`` crop of each image, then flips / 90-degree rotations. Other
    phases ('val', 'test'): whole images, no augmentation. ``color: y`` gives the BT.601 Y channel
    (BasicSR's ``bgr2ycbcr(y_only=True)``, in [16/255, 235/255]) as a 1-channel image, the channel
    MCNet and the PnP baseline denoise; ``color: rgb`` gives RGB. Values in [0, 1].

    Returns ``{'gt': (C, H, W) float tensor, 'gt_path': path, 'lq_path': path}``; ``lq_path`` is the
    same path (the noisy input is made from this image), so that BasicSR's validation names images.

    Args (``opt`` keys):
        dataroot_gt (str): Folder of images (``io_backend.type: disk``) or an LMDB made by
            ``scripts/prepare_datasets.py`` / BasicSR (``io_backend.type: lmdb``, path ends in .lmdb).
        io_backend (dict): ``{type: disk}`` or ``{type: lmdb}``.
        phase (str): Set by BasicSR from the dataset key: 'train', 'val' or 'test'.
        gt_size (int): Crop size in the train phase (required there).
        color (str): 'y' or 'rgb'. Default: 'y'.
        use_hflip (bool): Random horizontal flips (train). Default: True.
        use_rot (bool): Random vertical flips and transposes (train). Default: True.
    """

    def __init__(self, opt):
        super().__init__()
        self.opt = opt
        self.phase = opt.get('phase', 'train')
        self.color = opt.get('color', 'y')
        if self.color not in _COLORS:
            raise ValueError(f'Unsupported color {self.color!r} in dataset {opt.get("name")}. '
                             f'Supported ones are: {", ".join(_COLORS)}.')
        if 'dataroot_gt' not in opt:
            raise ValueError(f'CleanPatchDataset {opt.get("name")}: set dataroot_gt (image folder or .lmdb).')
        self.gt_folder = str(opt['dataroot_gt'])
        self.io_backend_opt = dict(opt.get('io_backend') or {'type': 'disk'})  # copy: popped below
        backend = self.io_backend_opt.get('type')
        if backend not in _BACKENDS:
            raise ValueError(f'Unsupported io_backend type {backend!r}. Supported ones are: {", ".join(_BACKENDS)}.')
        if self.phase == 'train':
            gt_size = opt.get('gt_size')
            if not isinstance(gt_size, int) or gt_size < 1:
                raise ValueError(f'CleanPatchDataset (train): gt_size must be a positive int, got {gt_size!r}.')
        self.gt_size = opt.get('gt_size')
        if not osp.exists(self.gt_folder):
            raise FileNotFoundError(f'dataroot_gt {self.gt_folder} does not exist (see scripts/prepare_datasets.py).')
        if backend == 'lmdb':
            if not self.gt_folder.endswith('.lmdb'):
                raise ValueError(f'io_backend lmdb needs a folder ending in .lmdb, got {self.gt_folder}.')
            self.io_backend_opt['db_paths'] = [self.gt_folder]
            self.io_backend_opt['client_keys'] = ['gt']
            self.paths = paths_from_lmdb(self.gt_folder)
        else:
            self.paths = sorted(paths_from_folder(self.gt_folder))
        if not self.paths:
            raise ValueError(f'No images in {self.gt_folder}.')
        self.file_client = None

    def __len__(self):
        return len(self.paths)

    def _open(self):
        """Open the file client lazily: one LMDB environment per worker process."""
        opt = dict(self.io_backend_opt)
        self.file_client = FileClient(opt.pop('type'), **opt)

    def __getitem__(self, index):
        if self.file_client is None:
            self._open()
        path = self.paths[index]
        img = imfrombytes(self.file_client.get(path, 'gt'), float32=True)  # HxWx3 BGR in [0, 1]
        if self.phase == 'train':
            h, w = img.shape[:2]
            s = self.gt_size
            if h < s or w < s:
                raise ValueError(f'{path}: image {h}x{w} is smaller than gt_size {s}.')
            top, left = random.randint(0, h - s), random.randint(0, w - s)
            img = img[top:top + s, left:left + s]
            img = augment(img, self.opt.get('use_hflip', True), self.opt.get('use_rot', True))
        if self.color == 'y':
            img = bgr2ycbcr(img, y_only=True)[..., None]
        img = img2tensor(np.ascontiguousarray(img), bgr2rgb=self.color == 'rgb', float32=True)
        return {'gt': img, 'gt_path': path, 'lq_path': path}
