"""The models this project trained and ships (``mcnet_basicsr/weights``), ready to run offline.

* ``srcnn_x{2,3,4}.pth``: our SRCNN 9-5-5 trained on T91 (the official MATLAB models are
  third-party and are not shipped);
* ``mcnet_srcnn_x{2,3,4}.pth``: the MCNet implicit layer (DnCNN6 + beta) trained on top of the
  official SRCNN, eps = 0.

``weights/README.md`` records the option file, command, iterations and Set5 score of each file.
"""
import os.path as osp

import torch
from basicsr.archs import build_network

from .archs.mcnet_arch import MCNetArch

WEIGHTS_DIR = osp.join(osp.dirname(osp.abspath(__file__)), 'weights')
SCALES = (2, 3, 4)


def weight_path(name):
    path = osp.join(WEIGHTS_DIR, name)
    if not osp.isfile(path):
        raise FileNotFoundError(f'Shipped weights {path} are missing; reinstall mcnet_basicsr (package data).')
    return path


def _check_scale(scale):
    if scale not in SCALES:
        raise ValueError(f'Unsupported scale {scale!r}. Shipped models exist for scales {SCALES}.')


def srcnn_options(scale):
    return {'type': 'SRCNN', 'padding_mode': 'replicate'}


def build_pretrained_srcnn(scale, device='cpu'):
    """Our SRCNN at ``scale`` as an RGB LR -> RGB HR network (Y by SRCNN, CbCr bicubic)."""
    _check_scale(scale)
    net = build_network(dict(srcnn_options(scale), scale=scale))
    state = torch.load(weight_path(f'srcnn_x{scale}.pth'), map_location='cpu')['params']
    net.load_state_dict(state, strict=True)
    return net.eval().to(device)


def build_pretrained_mcnet(scale, device='cpu', backbone_path=None, eps=None, eps_rms=None, solver=None):
    """MCNet (shipped layer) on an SRCNN backbone at ``scale``.

    Args:
        scale (int): 2, 3 or 4.
        backbone_path (str | None): SRCNN checkpoint; default our shipped SRCNN.
        eps, eps_rms (float | None): Consistency radius (default 0: exact).
        solver (dict | None): Forward solver settings (default Anderson, rel. tol 1e-4).
    """
    _check_scale(scale)
    net = MCNetArch(
        backbone=srcnn_options(scale),
        backbone_path=backbone_path or weight_path(f'srcnn_x{scale}.pth'),
        backbone_input='upsampled',
        backbone_channels=1,
        operator={'type': 'bicubic', 'scale': scale},
        eps=eps,
        eps_rms=eps_rms,
        solver={'forward': dict({'tol': 1e-4, 'max_iter': 100}, **(solver or {}))})
    state = torch.load(weight_path(f'mcnet_srcnn_x{scale}.pth'), map_location='cpu')['params']
    net.load_state_dict(state, strict=True)
    return net.eval().to(device)
