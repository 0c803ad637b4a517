"""Lab: why FFDNetHQS, the anchor of ``mcnet-sr --kernel``, is below USRNet-tiny: its prior or its untrained scheme.

FFDNetHQS (:class:`~mcnet_basicsr.archs.ffdnet_arch.FFDNetHQS`: half-quadratic splitting with DPIR's published
settings, untrained for the task) is run with each FFDNet of ``--priors`` (ours, shipped, and KAIR's colour FFDNet,
which denoises 0.3-2.9 dB better at every level) and each setting of its scheme: the data step's weight ``--lams``,
the number of iterations ``--n-iters`` and the last level times ``--floor-gains`` (the levels end at ``g max(s,
noise) / 255``). USRNet-tiny (official weights), trained end to end, is beside them, and so is each FFDNetUnfolded
checkpoint of ``--unfolded`` (FFDNetHQS trained end to end by ``options/train_ffdnet_unfolded_x*.yml``). Every
method is told the kernel, the scale and the noise, on :mod:`prior_study`'s problems: Set5 (or ``--set``) under
seeded kernels of the training family, never CBSD68 or the 12 kernels of Table K. PSNR on RGB uint8 with a border of
s^2.

    python benchmarks/hqs_study.py --data datasets --weights experiments/pretrained_models --families x3_n7.65 x4 \
        --kernels 2 --lams 0.1 0.23 --floor-gains 1 2 --out results/hqs_study.json
"""
import argparse
import itertools
import os.path as osp
import sys
import time

import torch

from prior_study import FAMILIES, add_problem_args, load_networks, print_family, problems, write_record
from timing import device_name, sync

OURS = osp.join('mcnet_basicsr', 'weights', 'ffdnet_rgb.pth')


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    add_problem_args(p, 2, ['x2', 'x3_n7.65', 'x4'])
    p.add_argument('--priors', nargs='+', default=['ours', 'kair'], choices=('ours', 'kair'),
                   help=f'ours: {OURS}; kair: ffdnet_color.pth of --weights')
    p.add_argument('--lams', type=float, nargs='+', default=[0.23])
    p.add_argument('--n-iters', type=int, nargs='+', default=[24])
    p.add_argument('--floor-gains', type=float, nargs='+', default=[1.0])
    p.add_argument('--unfolded', nargs='+', default=[], metavar='PATH',
                   help='FFDNetUnfolded checkpoints (BasicSR net_g files: their EMA weights where they have them)')
    p.add_argument('--device', default='cpu')
    p.add_argument('--out', required=True)
    args = p.parse_args(argv)
    args.table_k = False  # prior_study's problems: the selection set, never Table K
    return args


def build_hqs(state, lam, n_iter, floor_gain):
    """FFDNetHQS with the FFDNet weights ``state``, its data weight ``lam``, ``n_iter`` iterations and its last level
    times ``floor_gain``."""
    from mcnet_basicsr.archs.ffdnet_arch import FFDNetHQS

    class FlooredHQS(FFDNetHQS):

        def levels(self, scale, sigma):  # log-spaced to g times the last level: times g^(i / (n - 1))
            ratio = torch.linspace(0, 1, self.n_iter, dtype=sigma.dtype, device=sigma.device)
            return super().levels(scale, sigma) * floor_gain**ratio

    net = (FFDNetHQS if floor_gain == 1.0 else FlooredHQS)(n_iter=n_iter, lam=lam)
    net.load_state_dict(state)
    return net.eval()


def load_unfolded(path):
    """The FFDNetUnfolded of a BasicSR checkpoint (``params_ema`` where it has them), its iterations read from its
    hyper-network's output layer."""
    from mcnet_basicsr.archs.ffdnet_arch import FFDNetUnfolded
    ckpt = torch.load(path, map_location='cpu', weights_only=True)
    state = ckpt.get('params_ema', ckpt.get('params', ckpt))
    net = FFDNetUnfolded(n_iter=state['hyper.4.bias'].numel() // 2, hidden=state['hyper.0.bias'].numel())
    net.load_state_dict(state)
    return net.eval()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from mcnet_basicsr.archs.frozen_backbone import non_blind_forward
    from mcnet_basicsr.data.degradations import psnr_rgb_uint8
    from mcnet_basicsr.ops import build_operator
    dev = torch.device(args.device)
    usrnet, kair = load_networks(args.weights)
    priors = {'ours': load_networks(args.weights, prior=OURS)[1], 'kair': kair}
    nets = {'usrnet_tiny': usrnet.to(dev)}
    for prior, lam, n_iter, gain in itertools.product(args.priors, args.lams, args.n_iters, args.floor_gains):
        name = f'ffdnet_hqs {prior} lam={lam:g} n={n_iter}' + (f' floor={gain:g}' if gain != 1.0 else '')
        nets[name] = build_hqs(priors[prior].state_dict(), lam, n_iter, gain).to(dev)
    for path in args.unfolded:
        nets[f'ffdnet_unfolded {osp.basename(path)}'] = load_unfolded(path).to(dev)
    results = {}
    for fam in args.families:
        scale, noise255 = FAMILIES[fam]
        for kernel, hr, lr in problems(args, fam):
            op = build_operator({'type': 'blur', 'scale': scale, 'kernel': kernel})
            x = torch.from_numpy(lr).permute(2, 0, 1)[None].to(dev)
            for name, net in nets.items():
                sync(dev)
                t0 = time.perf_counter()
                with torch.no_grad():
                    y = non_blind_forward(net, x, op, noise255 / 255.0)
                sync(dev)
                sr = (y.clamp(0, 1) * 255).round().byte()[0].permute(1, 2, 0).cpu().numpy()
                entry = results.setdefault(name, {}).setdefault(fam, {'psnr': [], 'seconds': 0.0})
                entry['psnr'].append(psnr_rgb_uint8(sr, hr, scale**2))
                entry['seconds'] += time.perf_counter() - t0
        print_family(results, fam)
        write_record(args, results)
    print(f'record: {args.out} ({device_name(dev)})')


if __name__ == '__main__':
    main()
