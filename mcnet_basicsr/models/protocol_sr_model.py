import time
from collections import OrderedDict

import torch
from basicsr.models.sr_model import SRModel
from basicsr.utils import get_root_logger
from basicsr.utils.registry import MODEL_REGISTRY
from torch import nn
from torch.nn.parallel import DataParallel, DistributedDataParallel

from mcnet_basicsr.archs.frozen_backbone import is_non_blind, non_blind_forward
from mcnet_basicsr.metrics import image_metrics
from mcnet_basicsr.ops import StackedOperator, build_degradation, build_operator
from mcnet_basicsr.utils.paths import resolve_path
from mcnet_basicsr.utils.precision import tf32


class ReportingRun(nn.Module):
    """A layer whose forward is its ``run``: ``(output, info)``.

    DistributedDataParallel calls its module's forward (and syncs buffers and prepares the gradient reduction around
    it), which returns a layer's image only; wrapped in this, the layer reports what its solve did through DDP too.
    :meth:`ProtocolSRModel.get_bare_model` unwraps it, so checkpoints and EMA see the layer itself.
    """

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, *args, **kwargs):
        return self.layer.run(*args, **kwargs)


@MODEL_REGISTRY.register()
class ProtocolSRModel(SRModel):
    """BasicSR's SRModel whose validation also measures every image under the tables' protocol.

    Per image (``mcnet_basicsr.metrics.image_metrics``): the float data fidelity ``||A x - b||_2`` (Y in [0, 1],
    before the output is quantised), and where the set has ground truth PSNR/SSIM with the output's Y rounded to
    uint8 (crop = scale; BasicSR's own metrics see the RGB-rounded output and read a little higher), the RGB-
    uint8 and float-Y PSNR; also the seconds the network took and, for networks that report solver statistics
    (``run``), the iterations, whether the solve converged and its last residual. ``A`` is the
    network's ``operator`` where it has one, else MATLAB bicubic at ``scale``.

    Validation logs ``psnr_y_uint8`` / ``ssim_y_uint8`` and ``fidelity_float`` (mean and max) per set and keeps the
    per-image dicts in ``image_results[set name]`` (dataloader order): the records of ``scripts/evaluate.py`` and
    the tables are made from them. Distributed: validation (rank 0 only in BasicSR) calls the bare network.

    Samples that say how their LR was made (:class:`~mcnet_basicsr.data.DegradedPairDataset`: ``kernel``,
    ``degradation``, ``noise_sigma``) have it passed to networks that take the measurement of a batch (MCNetArch and
    the consistent baselines: ``net(lq, operator=..., noise_sigma=...)``; non-blind networks such as USRNet and
    FFDNetUnfolded: ``net(lq, kernel, scale, sigma)``), and ``A`` is then that batch's operator. Trained with this
    model (``model_type: ProtocolSRModel``: SRModel's losses and options), a non-blind network learns from the kernels
    and noise its batches were made with.

    The network runs in float32 on a GPU: TF32 off for cuDNN convolutions and CUDA matmuls (PyTorch's default turns
    it on for convolutions) unless the network's settings set ``allow_tf32``, so that a backbone's row of a table and
    the same backbone inside an MCNet layer (which scopes TF32 to its own ``allow_tf32``, off by default) compute the
    same estimate.
    """

    def feed_data(self, data):
        super().feed_data(data)
        self.measurement = self.batch_measurement(data)

    def batch_measurement(self, data):
        """``{operator, noise_sigma}`` of a batch whose samples say how their LR was made; {} for the others."""
        out = {}
        scale = self.opt['scale']
        names = list(data.get('degradation', [])) or None  # a mix names '' for its blurred samples
        if 'kernel' in data and not any(names or ()):
            out['operator'] = build_operator({'type': 'blur', 'scale': scale, 'kernel': data['kernel'].double()})
        elif names:
            cache = self.__dict__.setdefault('_degradations', {})
            for n in set(names) - set(cache) - {''}:
                cache[n] = build_degradation(n, scale)
            ops = [cache[n] if n else build_operator({'type': 'blur', 'scale': scale, 'kernel': kernel.double()})
                   for n, kernel in zip(names, data['kernel'] if 'kernel' in data else [None] * len(names))]
            out['operator'] = ops[0] if len(set(names)) == 1 else StackedOperator(ops)
        sigma = data.get('noise_sigma')
        if sigma is not None and bool((sigma > 0).any()):
            out['noise_sigma'] = sigma.to(self.device, torch.float64)
        return out

    def get_bare_model(self, net):
        net = super().get_bare_model(net)
        return net.layer if isinstance(net, ReportingRun) else net

    def network_output(self, net, lq):
        """``(output, info)`` of ``net`` on ``lq``, told the batch's measurement where the network takes one (a
        non-blind network, :func:`~mcnet_basicsr.archs.frozen_backbone.non_blind_forward`, is told its operator or
        kernel, scale and noise: the batch's, else :meth:`measurement_operator`'s, noise-free);
        ``info`` is what the solve did for networks that report it (``run``: MCNetArch and the consistent baselines,
        also inside DDP through :class:`ReportingRun`), else {}."""
        kwargs = {}
        measurement = getattr(self, 'measurement', {})
        if measurement and hasattr(net, 'measurement_operator'):
            kwargs.update(measurement)
        inner = net.module if isinstance(net, (DataParallel, DistributedDataParallel)) else net
        if is_non_blind(inner):
            return non_blind_forward(net, lq, self.measurement_operator(inner), measurement.get('noise_sigma')), {}
        if isinstance(inner, ReportingRun):
            return net(lq, **kwargs)
        if inner is net and hasattr(net, 'run'):
            return net.run(lq, **kwargs)
        return net(lq, **kwargs), {}

    def optimize_parameters(self, current_iter):
        """SRModel's step (pixel and perceptual losses, EMA), the network told the batch's measurement
        (:meth:`network_output`): a non-blind network trains on the kernels and noise its batches were made with."""
        self.optimizer_g.zero_grad()
        self.output, _ = self.network_output(self.net_g, self.lq)
        loss_dict = OrderedDict()
        losses = []
        if self.cri_pix:
            loss_dict['l_pix'] = self.cri_pix(self.output, self.gt)
            losses.append(loss_dict['l_pix'])
        if self.cri_perceptual:
            l_percep, l_style = self.cri_perceptual(self.output, self.gt)
            for name, value in (('l_percep', l_percep), ('l_style', l_style)):
                if value is not None:
                    loss_dict[name] = value
                    losses.append(value)
        sum(losses).backward()
        self.optimizer_g.step()
        self.log_dict = self.reduce_loss_dict(loss_dict)
        if self.ema_decay > 0:
            self.model_ema(decay=self.ema_decay)

    def model_ema(self, decay=0.999):
        super().model_ema(decay)
        # BasicSR averages through ``param.data``, which a weight's version counter does not see: a spectral-norm
        # estimate of the EMA copy would otherwise still count as exact for the weights it was made on, and
        # validation would run a network other than the checkpoint that ships. Forgotten, it is estimated again
        # from the averaged weights at their next use, as a loaded checkpoint is.
        for module in self.net_g_ema.modules():
            if hasattr(module, 'reset_power_iteration'):
                module.reset_power_iteration()

    def load_network(self, net, load_path, strict=True, param_key='params'):
        # path.pretrain_network_g: mcnet_basicsr/weights/<file> is the installed package's file from any folder
        super().load_network(net, resolve_path(load_path), strict, param_key)

    def measurement_operator(self, net):
        if getattr(self, 'measurement', {}).get('operator') is not None:
            return self.measurement['operator']
        if getattr(net, 'operator', None) is not None:
            return net.operator
        if not hasattr(self, '_bicubic'):
            self._bicubic = build_operator({'type': 'bicubic', 'scale': self.opt['scale']})
        return self._bicubic

    def test(self):
        wrapped = self.net_g
        self.net_g = self.get_bare_model(wrapped)  # inference needs no DDP (and must not sync buffers)
        try:
            self._synchronize()
            start = time.perf_counter()
            settings = getattr(self.net_g, 'layer_settings', None)
            with tf32(settings is not None and settings.allow_tf32):
                self._test()
            self._synchronize()
            seconds = time.perf_counter() - start
        finally:
            self.net_g = wrapped
        self.last_measurement = self.measure(seconds)
        if hasattr(self, '_val_images'):
            self._val_images.append(self.last_measurement)

    def _test(self):
        """SRModel's test, with the batch's measurement (:meth:`network_output`)."""
        net = getattr(self, 'net_g_ema', self.net_g)
        was_training = net.training
        net.eval()
        with torch.no_grad():
            self.output, self.solve_info = self.network_output(net, self.lq)
        net.train(was_training)

    def _synchronize(self):
        if self.device.type == 'cuda':
            torch.cuda.synchronize(self.device)

    def measure(self, seconds):
        """The protocol's dict for the image just run (``self.lq``, ``self.output``, ``self.gt`` if fed)."""
        net = self.net_g_ema if hasattr(self, 'net_g_ema') else self.get_bare_model(self.net_g)
        out = image_metrics(self.output, self.lq, getattr(self, 'gt', None), self.opt['scale'],
                            self.measurement_operator(net))
        out['seconds'] = seconds
        # the radius of the constrained methods' consistency ball (eps per image, or eps_rms per LR pixel)
        eps, eps_rms = getattr(net, 'eps', None), getattr(net, 'eps_rms', None)
        out['eps'] = float(eps_rms) * self.lq[0, 0].numel() ** 0.5 if eps_rms else float(eps or 0.0)
        stats = getattr(self, 'solve_info', None)
        if stats:
            fwd = stats['forward']
            out['iterations'] = float(fwd.iterations.float().mean())
            out['converged'] = bool(fwd.converged.all())
            out['residual'] = float(fwd.residual.max())
        return out

    def nondist_validation(self, dataloader, current_iter, tb_logger, save_img):
        self._val_images = []
        try:
            super().nondist_validation(dataloader, current_iter, tb_logger, save_img)
            images = self._val_images
        finally:
            del self._val_images
        name = dataloader.dataset.opt['name']
        if not hasattr(self, 'image_results'):
            self.image_results = {}
        self.image_results[name] = images
        logger = get_root_logger()
        with_gt = [im for im in images if 'psnr' in im]
        if with_gt:
            psnr = sum(im['psnr'] for im in with_gt) / len(with_gt)
            ssim = sum(im['ssim'] for im in with_gt) / len(with_gt)
            logger.info(f'Validation {name}: psnr_y_uint8 {psnr:.4f} dB, ssim_y_uint8 {ssim:.4f} '
                        f'(Y rounded to uint8, crop {self.opt["scale"]}: the protocol of docs/results.md) '
                        f'over {len(with_gt)} images')
            if tb_logger:
                tb_logger.add_scalar(f'metrics/{name}/psnr_y_uint8', psnr, current_iter)
                tb_logger.add_scalar(f'metrics/{name}/ssim_y_uint8', ssim, current_iter)
        if not images:
            return
        values = [im['fidelity'] for im in images]
        mean, worst = sum(values) / len(values), max(values)
        logger.info(f'Validation {name}: fidelity_float ||Ax-b||_2 (Y, [0,1]) '
                    f'mean {mean:.3e}, max {worst:.3e} over {len(values)} images')
        if tb_logger:
            tb_logger.add_scalar(f'metrics/{name}/fidelity_float_mean', mean, current_iter)
            tb_logger.add_scalar(f'metrics/{name}/fidelity_float_max', worst, current_iter)
