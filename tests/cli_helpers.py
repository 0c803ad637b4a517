"""What the ``mcnet-sr`` tests share: small photos, files, the in-process command with its model cache, LR made as
the benchmarks make it."""
import csv
from pathlib import Path

import cv2
import numpy as np
import torch

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import sample_photo
from mcnet_basicsr.cli.inference import main
from mcnet_basicsr.ops import imresize

FAST = ['--tol', '1e-3']


def photo(name, h, w):
    return sample_photo(name, (h, w))[:, :, ::-1].copy()  # BGR for cv2


def write(path, arr):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), arr)
    return path


def read_summary(outdir):
    with open(Path(outdir) / 'summary.csv', newline='') as f:
        return {r['input']: r for r in csv.DictReader(f)}


def snapshot(folder):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in Path(folder).iterdir()}


MODELS = {}


def cli(*args):
    return main([str(a) for a in args], models=MODELS)


def lr_from(hr_bgr, scale):
    """LR made as the benchmarks make it: MATLAB bicubic of the HR, rounded to uint8."""
    t = torch.from_numpy(hr_bgr.astype(np.float64) / 255).permute(2, 0, 1)[None]
    lr = imresize(t, 1 / scale)[0].permute(1, 2, 0).clamp(0, 1).numpy()
    return np.rint(lr * 255).astype(np.uint8)


def one_error_line(err):
    """The one line of an error report: it starts with ``error: ``."""
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith('error: '), err
    return lines[0]
