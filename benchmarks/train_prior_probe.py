"""Lab: what training gives the colour FFDNet layer anchored on USRNet-tiny (``prior_study.FFDNetLayer``).

Trains the layer's FFDNet, beta and level end to end (implicit differentiation) on random HR patches of a folder
(T91) under kernels of :class:`~mcnet_basicsr.data.kernel_family.KernelFamily` (one per sample), a random scale in
{2, 3, 4} per batch and noise of std 0 (half the samples) or U(0, 10) / 255, with the measurement of USRNet's protocol
(circular blur, upper-left decimation, uint8 truncation, then the noise); ``w`` is USRNet-tiny's output (frozen).
Loss: L1 to the HR patch. Saves the training state (``--save``: the layer's and the optimiser's state dicts, the
step; ``--resume`` goes on from one) and a log of the loss, the solves' iterations and convergence;
``prior_study.py --layer`` then scores it on Set5 with seeded kernels of the family.

    python benchmarks/train_prior_probe.py --hr datasets/T91/HR --weights experiments/pretrained_models \
        --minutes 5 --save layer.pth --log train.jsonl
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch

from prior_study import FFDNetLayer, load_networks, measurement_radius


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--hr', required=True, help='folder of HR training images')
    p.add_argument('--weights', default='experiments/pretrained_models')
    p.add_argument('--minutes', type=float, default=5.0)
    p.add_argument('--batch', type=int, default=8)
    p.add_argument('--patch', type=int, default=96)
    p.add_argument('--lr', type=float, default=2e-5, help="the prior's learning rate (beta and level: 100x)")
    p.add_argument('--tol', type=float, default=1e-5, help='forward and backward tolerance of the training solves')
    p.add_argument('--max-iter', type=int, default=40)
    p.add_argument('--beta', type=float, default=3.0, help='initial beta')
    p.add_argument('--level', type=float, default=5.0, help="initial level of the prior (/255)")
    p.add_argument('--resume', help='a state file of an earlier run (layer, optimiser, step) to go on from')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--save', required=True)
    p.add_argument('--log', required=True)
    p.add_argument('--device', default='cuda')
    return p.parse_args(argv)


def load_images(folder):
    from PIL import Image

    from mcnet_basicsr.utils.images import list_images
    return [np.asarray(Image.open(p).convert('RGB')) for p in list_images(folder)]


def batch_of(images, rng, n, patch, scale, family, device):
    """``(hr, kernels, sigma)``: n random HR patches (N, 3, P, P) in [0, 1] (P a multiple of ``scale``), one family
    kernel each (N, 25, 25) and a noise std each (N,)."""
    p = patch - patch % scale
    crops = []
    for _ in range(n):
        img = images[rng.integers(len(images))]
        while min(img.shape[:2]) < p:
            img = images[rng.integers(len(images))]
        i, j = rng.integers(img.shape[0] - p + 1), rng.integers(img.shape[1] - p + 1)
        crop = img[i:i + p, j:j + p]
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        crops.append(np.rot90(crop, rng.integers(4)))
    hr = torch.from_numpy(np.stack(crops).astype(np.float32) / 255.0).permute(0, 3, 1, 2).contiguous().to(device)
    kernels = np.stack([family.draw(rng)[0] for _ in range(n)])
    sigma = np.where(rng.random(n) < 0.5, 0.0, rng.uniform(0, 10, n)) / 255.0
    return hr, kernels, torch.from_numpy(sigma).float().to(device)


def measure(op, hr, sigma, gen):
    """USRNet's measurement of ``hr`` under ``op``: the blurred, decimated image truncated to uint8 levels, plus the
    noise; ``(lr, b)`` with ``b = lr + 0.5 / 255`` where the truncation is uniform."""
    from mcnet_basicsr.ops import fold_channels, repeat_samples, unfold_channels
    c = hr.shape[1]
    clean = unfold_channels(repeat_samples(op, c)(fold_channels(hr.double())), c)
    lr = (clean * 255).floor() / 255
    lr = lr + torch.randn(lr.shape, generator=gen, device=lr.device, dtype=lr.dtype) * sigma.double().view(-1, 1, 1, 1)
    return lr.float(), lr + 0.5 / 255


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from mcnet_basicsr.data.kernel_family import KernelFamily
    from mcnet_basicsr.ops import build_operator

    dev = torch.device(args.device)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    usrnet, prior = load_networks(args.weights)
    usrnet = usrnet.to(dev).requires_grad_(False)
    layer = FFDNetLayer(prior.train(), args.beta, args.level / 255.0).to(dev)
    opt = torch.optim.Adam([{'params': layer.prior.parameters(), 'lr': args.lr},
                            {'params': [layer.log_beta, layer.log_level], 'lr': 100 * args.lr}])
    step, before = 0, 0.0
    if args.resume:
        state = torch.load(args.resume, map_location='cpu')
        layer.load_state_dict(state['layer'])
        opt.load_state_dict(state['optimizer'])
        step, before = state['step'], state['seconds']
        rng = np.random.default_rng([args.seed, step])  # a new stream: no batch of the earlier run repeats
    images = load_images(args.hr)
    family = KernelFamily()
    started = time.perf_counter()
    with open(args.log, 'a' if args.resume else 'w') as log:
        while time.perf_counter() - started < args.minutes * 60:
            scale = int(rng.integers(2, 5))
            hr, kernels, sigma = batch_of(images, rng, args.batch, args.patch, scale, family, dev)
            op = build_operator({'type': 'blur', 'scale': scale, 'kernel': kernels})
            lr, b = measure(op, hr, sigma, gen)
            with torch.no_grad():
                w = usrnet(lr, torch.from_numpy(kernels).float()[:, None].to(dev), scale, sigma)
            eps = measurement_radius(b, sigma)
            x, stats = layer.solve(w, b, op, eps, sigma, tol=args.tol, max_iter=args.max_iter)
            loss = (x - hr).abs().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            with torch.no_grad():
                base = (w - hr).abs().mean()
            entry = dict(step=step, seconds=round(before + time.perf_counter() - started, 1), scale=scale,
                         loss=loss.item(), usrnet_loss=base.item(), **stats, beta=float(layer.log_beta[0].exp()),
                         beta_slope=float(layer.log_beta[1]), level255=float(layer.log_level[0].exp() * 255),
                         level_gain=float(layer.log_level[1].exp()))
            log.write(json.dumps(entry) + '\n')
            if step % 20 == 0:
                log.flush()
                print(json.dumps(entry), flush=True)
            if not math.isfinite(entry['loss']):
                raise FloatingPointError(f'loss is {entry["loss"]} at step {step}')
    seconds = before + time.perf_counter() - started
    state = {'layer': layer.state_dict(), 'optimizer': opt.state_dict(), 'step': step, 'seconds': seconds}
    torch.save(state, args.save)
    print(f'{step} steps, {seconds:.0f} s of training in all; saved {args.save}', flush=True)


if __name__ == '__main__':
    main()
