"""Latency of ``mcnet-sr`` on one photo: process start to file written, against ``import torch``, and where it goes.

Fresh processes, as a user runs the command (``--repeats`` times, medians reported); the measurement and its
breakdown are :func:`cli_latency.measure_cli_latency`. The photo is scikit-image's astronaut
(512 x 512, RGB; ``--size`` resizes it), so nothing needs downloading::

    python benchmarks/benchmark_cli.py --device cuda --scale 2 --json benchmarks/records/cli_latency_h100.json
"""
import argparse
import json
import os
import os.path as osp
import tempfile
from pathlib import Path

import cv2
import torch
from skimage import data

from cli_latency import measure_cli_latency


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--scale', type=int, default=2)
    parser.add_argument('--backbone', default='srcnn')
    parser.add_argument('--device', default='auto', choices=('auto', 'cpu', 'cuda'))
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--size', type=int, default=512, help='side of the photo (the astronaut resized; default 512)')
    parser.add_argument('--json', default=None, help='write the record here')
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix='mcnet_cli_bench_'))
    img = data.astronaut()[:, :, ::-1]
    if args.size != img.shape[0]:
        img = cv2.resize(img, (args.size, args.size), interpolation=cv2.INTER_AREA)
    cv2.imwrite(str(tmp / 'astronaut.png'), img)
    record = measure_cli_latency(tmp / 'astronaut.png', tmp / 'out', args.scale, args.backbone, args.device,
                                 args.repeats)
    device = args.device if args.device != 'auto' else ('cuda' if torch.cuda.is_available() else 'cpu')
    record = {'device': torch.cuda.get_device_name() if device == 'cuda' else f'cpu ({os.cpu_count()} cores)',
              'torch': torch.__version__, 'scale': args.scale, 'backbone': args.backbone,
              'image': f'astronaut {args.size}x{args.size} RGB', **record}
    m = record['median']
    print(f"{record['device']}, x{args.scale} {args.backbone}, {args.size}x{args.size} photo, "
          f"medians of {args.repeats}:")
    print(f"  python -c 'import torch'      {m['import_torch_s']:.2f} s")
    print(f"  mcnet-sr, to file written      {m['cli_to_file_written_s']:.2f} s "
          f"(+{m['cli_minus_import_torch_s']:.2f} s over import torch), to exit {m['cli_to_exit_s']:.2f} s")
    print('  breakdown: ' + ', '.join(f'{k} {m[k]:.2f}' for k in ('interpreter', 'torch', 'package', 'model', 'setup',
                                                                  'image', 'image_again', 'exit')) +
          f" s; {m['iterations']:.0f} solver iterations")
    if args.json:
        os.makedirs(osp.dirname(osp.abspath(args.json)), exist_ok=True)
        with open(args.json, 'w') as f:
            json.dump(record, f, indent=1)


if __name__ == '__main__':
    main()
