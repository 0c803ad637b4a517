"""Lab: how well a colour FFDNet prior denoises at the levels a solver visits (the layer ends at 5 / 255, HQS and PnP
anneal from 49 / 255 down to the LR's noise or a floor of 1-4 / 255).

Each Set5 HR image (RGB, 0..1) gets Gaussian noise of std ``level / 255`` (one seeded draw per image and level, on
the CPU so that every device sees the same noise), the prior is told that level, and its output, clipped and rounded
to uint8, is scored against the HR: PSNR on RGB uint8, no border.

    python benchmarks/denoise_levels.py old.pth mcnet_basicsr/weights/ffdnet_rgb.pth --data datasets \
        --out results/denoise_levels.json
"""
import argparse
import json
import os.path as osp
import sys

import numpy as np
import torch
from PIL import Image

from timing import device_name

LEVELS = (1, 2, 3, 5, 8, 15, 25, 49)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('priors', nargs='+', help='FFDNet checkpoints ({"params": ...}), e.g. our ffdnet_rgb.pth')
    p.add_argument('--data', default='datasets', help='folder with Set5/HR')
    p.add_argument('--levels', type=float, nargs='+', default=LEVELS, help='noise levels (/255)')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--out', required=True, help='JSON record to write')
    return p.parse_args(argv)


def score(net, images, level, device):
    """Mean PSNR (RGB uint8) of ``net`` denoising ``images`` (uint8 HxWx3) at noise std ``level / 255``."""
    from mcnet_basicsr.data.degradations import psnr_rgb_uint8
    g = torch.Generator().manual_seed(0)
    out = []
    for hr in images:
        x = torch.from_numpy(hr).permute(2, 0, 1)[None].double() / 255
        y = (x + level / 255 * torch.randn(x.shape, generator=g, dtype=torch.float64)).float().to(device)
        with torch.no_grad():
            d = net(y, level / 255).clamp(0, 1)
        d = (d[0].permute(1, 2, 0).double().cpu().numpy() * 255).round().astype(np.uint8)
        out.append(psnr_rgb_uint8(d, hr, 0))
    return float(np.mean(out))


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from mcnet_basicsr.archs.ffdnet_arch import FFDNet
    from mcnet_basicsr.utils.checkpoint import load_network
    from mcnet_basicsr.utils.images import list_images
    folder = osp.join(args.data, 'Set5', 'HR')
    images = [np.array(Image.open(p).convert('RGB')) for p in list_images(folder)]
    if not images:
        raise SystemExit(f'No images in {folder}.')
    device = torch.device(args.device)
    results = {}
    for path in args.priors:
        net = FFDNet()
        load_network(net, path)
        net = net.to(device).eval()
        results[path] = {f'{level:g}': score(net, images, level, device) for level in args.levels}
        print(path, ' '.join(f'{k}:{v:.2f}' for k, v in results[path].items()), flush=True)
    record = {'protocol': 'Set5 RGB, Gaussian noise std level / 255 (seed 0, CPU draw), the prior told that level, '
                          'PSNR RGB uint8 no border', 'device': device_name(device), 'results': results}
    with open(args.out, 'w') as f:
        json.dump(record, f, indent=1)


if __name__ == '__main__':
    main()
