import math
import os.path as osp
import zlib

import torch
from basicsr.models.sr_model import SRModel
from basicsr.utils import get_root_logger
from basicsr.utils.registry import MODEL_REGISTRY

from mcnet_basicsr.archs.dncnn_arch import DnCNN
from mcnet_basicsr.models.mcnet_model import build_optimizer
from mcnet_basicsr.utils.paths import resolve_path


def _check_sigma(name, value):
    if isinstance(value, str):  # YAML 1.1 reads `1e-2` (no dot) as a string
        value = float(value)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
        raise ValueError(f'{name} must be a number >= 0 (noise std for images in [0, 1]), got {value!r}.')
    return float(value)


@MODEL_REGISTRY.register()
class DenoiserModel(SRModel):
    """Trains a Gaussian denoiser (e.g. the spectrally normalised :class:`DnCNN` of MCNet and of the
    PnP baseline) on clean images (``CleanPatchDataset``) with BasicSR's machinery.

    Differences from SRModel (everything else, including EMA, schedulers, checkpoints, resume and
    validation, is inherited):

    * the input is made here: ``lq = gt + sigma * n``, ``n ~ N(0, I)``, no clipping, images in
      [0, 1]. Training: ``sigma ~ U[lo, hi]`` per image from ``train.noise_range: [lo, hi]`` (the
      MCNet authors' file names ``sigma_<lo>_<hi>`` are in these units), or ``log sigma ~ U[log lo, log hi]``
      with ``train.noise_scale: log`` (lo > 0: as many images at each octave of noise, so that a prior run at
      low levels, as a layer runs it, is trained there as much as at high ones). Validation / test: the
      fixed ``val.noise_sigma``, with noise drawn on the CPU from a generator seeded by the image's
      file name and ``val.noise_seed`` (default 0), so every validation sees the same noisy images
      on any device. Batches that already carry ``lq`` are used as they are;
    * after every optimizer step the convolutions of a spectrally normalised DnCNN are scaled back
      towards their bound (one warm-started power iteration, then ``W <- W min(1, bound / sigma)``),
      so that the raw weights stay near the set the forward pass normalises onto. This is only
      approximate: a warm-started power iteration lags behind the top singular value when the top
      ones cluster (the raw weights end near the bound, not on it, like the 1-iteration estimate real-SN
      training uses). Before every checkpoint the projection is redone with an
      exact estimate, so saved weights are within the bound as stored; and a loaded DnCNN
      estimates each operator norm exactly on first use and normalises with it anyway;
    * ``optim_g.type`` may be any torch.optim class;
    * a network told the noise level (a class with ``takes_level = True`` and ``forward(x, sigma)``, e.g.
      :class:`~mcnet_basicsr.archs.ffdnet_arch.FFDNet`) is given each image's sigma, in training and validation;
    * validation also logs the PSNR of the noisy input (float, clipped to [0, 1]), the baseline the
      denoised PSNR should beat.
    """

    def __init__(self, opt):
        self._validating = False
        val_opt = opt.get('val') or {}
        self.val_sigma = _check_sigma('val.noise_sigma', val_opt['noise_sigma']) if 'noise_sigma' in val_opt else None
        self.val_seed = int(val_opt.get('noise_seed', 0))
        self.sigma = None
        super().__init__(opt)
        self._tell_level(self.net_g)

    def _tell_level(self, net):
        """Make ``net(lq)``, as SRModel calls it, give a network told its level the batch's ``self.sigma``."""
        if getattr(self.get_bare_model(net), 'takes_level', False):
            net.register_forward_pre_hook(lambda module, args: args + (self.sigma,) if len(args) == 1 else None)

    def init_training_settings(self):
        train_opt = self.opt['train']
        rng = train_opt.get('noise_range')
        if not (isinstance(rng, (list, tuple)) and len(rng) == 2):
            raise ValueError(f'DenoiserModel needs train.noise_range: [lo, hi] (noise std, images in [0, 1]), '
                             f'got {rng!r}.')
        lo, hi = (_check_sigma('train.noise_range', v) for v in rng)
        if lo > hi:
            raise ValueError(f'train.noise_range must be [lo, hi] with lo <= hi, got {rng!r}.')
        self.noise_range = (lo, hi)
        self.noise_scale = train_opt.get('noise_scale', 'linear')
        if self.noise_scale not in ('linear', 'log'):
            raise ValueError(f"train.noise_scale must be 'linear' or 'log', got {self.noise_scale!r}.")
        if self.noise_scale == 'log' and not lo > 0:
            raise ValueError(f'train.noise_scale log needs train.noise_range [lo, hi] with lo > 0, got {rng!r}.')
        if not train_opt.get('pixel_opt'):
            raise ValueError('DenoiserModel trains with a pixel loss: set train.pixel_opt (e.g. {type: MSELoss}).')
        super().init_training_settings()
        if self.ema_decay > 0:
            self._tell_level(self.net_g_ema)
        val = f'{self.val_sigma:g} (seed {self.val_seed})' if self.val_sigma is not None else 'not set'
        law = f'U[{lo:g}, {hi:g}]' if self.noise_scale == 'linear' else f'exp U[log {lo:g}, log {hi:g}]'
        get_root_logger().info(f'DenoiserModel: training noise sigma ~ {law} per image '
                               f'(PSNR of the noisy input {_psnr_of_sigma(hi):.2f}-{_psnr_of_sigma(lo):.2f} dB); '
                               f'validation sigma {val}.')

    def get_optimizer(self, optim_type, params, lr, **kwargs):
        return build_optimizer(optim_type, params, lr, **kwargs)

    def load_network(self, net, load_path, strict=True, param_key='params'):
        # path.pretrain_network_g: mcnet_basicsr/weights/<file> is the installed package's file from any folder
        super().load_network(net, resolve_path(load_path), strict, param_key)

    # ------------------------------------------------------------------ noise
    def validation(self, dataloader, current_iter, tb_logger, save_img=False):
        if self.is_train:
            # validate what a checkpoint would hold: weights inside the bound by the exact estimate (the
            # eval-mode network normalises by it; power iteration can sit a few % below it)
            self.project_spectral_norm(converge=True)
            if self.ema_decay > 0:
                self.project_spectral_norm(self.net_g_ema, converge=True)
        self._validating = True
        try:
            super().validation(dataloader, current_iter, tb_logger, save_img)
        finally:
            self._validating = False

    def _fixed_noise(self, gt, paths):
        noise = torch.empty(gt.shape, dtype=torch.float32)
        for i, path in enumerate(paths):
            seed = zlib.crc32(osp.basename(str(path)).encode()) + 1000003 * self.val_seed
            noise[i] = torch.randn(gt.shape[1:], generator=torch.Generator().manual_seed(seed))
        return noise.to(device=gt.device, dtype=gt.dtype)

    def feed_data(self, data):
        self.gt = data['gt'].to(self.device)
        if 'lq' in data:
            self.lq = data['lq'].to(self.device)
            self.sigma = data.get('sigma', self.val_sigma)
        elif self.is_train and not self._validating:
            lo, hi = self.noise_range if self.noise_scale == 'linear' else map(math.log, self.noise_range)
            self.sigma = lo + (hi - lo) * torch.rand(self.gt.shape[0], device=self.device, dtype=self.gt.dtype)
            if self.noise_scale == 'log':
                self.sigma = self.sigma.exp()
            self.lq = self.gt + self.sigma.view(-1, 1, 1, 1) * torch.randn_like(self.gt)
        else:
            if self.val_sigma is None:
                raise ValueError('DenoiserModel: set val.noise_sigma (noise std of validation/test images, '
                                 '[0, 1] units).')
            paths = data.get('gt_path', data.get('lq_path'))
            if paths is None:
                raise ValueError("DenoiserModel: validation batches need 'gt_path' (seeds the fixed noise).")
            paths = [paths] if isinstance(paths, str) else paths
            self.sigma = self.val_sigma
            self.lq = self.gt + self.val_sigma * self._fixed_noise(self.gt, paths)

    # ------------------------------------------------------------------ spectral bound
    @torch.no_grad()
    def project_spectral_norm(self, net=None, converge=False):
        """Power iteration, then scale every SN convolution of ``net`` (default net_g) into its bound.
        ``converge``: estimate exactly instead (as a loaded DnCNN does), not from the tracked vectors.

        A BatchNorm right after a scaled convolution (RealSN-DnCNN) gets its running statistics
        scaled with it (mean by the factor, variance by its square): its input shrank by that factor,
        and statistics left at the old scale make the eval-mode network a different function from
        the one trained (a DnCNN17 whose training loss matched validated as the identity)."""
        net = self.get_bare_model(self.net_g if net is None else net)
        dncnns = [m for m in net.modules() if isinstance(m, DnCNN) and m.spectral_norm]
        for dncnn in dncnns:
            if converge:
                for conv in dncnn.sn_convs():
                    conv.exact_estimate()
            else:
                dncnn.update_spectral_norm()
            for conv, bn in dncnn.sn_convs_with_bn():
                factor = conv.project_into_bound()
                if bn is not None and bn.running_var is not None:
                    bn.running_mean.mul_(factor.to(bn.running_mean.dtype))
                    bn.running_var.mul_(factor.to(bn.running_var.dtype).square())
        return len(dncnns)

    def optimize_parameters(self, current_iter):
        super().optimize_parameters(current_iter)  # forward, loss, step, EMA of the pre-projection weights
        self.project_spectral_norm()
        if self.ema_decay > 0:  # the bound set is convex: keep the EMA copy in it too
            self.project_spectral_norm(self.net_g_ema)

    def save(self, epoch, current_iter):
        # checkpoints hold weights projected with a converged estimate: within the bound as stored
        self.project_spectral_norm(converge=True)
        if self.ema_decay > 0:
            self.project_spectral_norm(self.net_g_ema, converge=True)
        super().save(epoch, current_iter)

    # ------------------------------------------------------------------ validation extras
    def test(self):
        super().test()
        if self._noisy_psnr is not None:
            mse = ((self.lq.clamp(0, 1) - self.gt)**2).mean(dim=(1, 2, 3))
            self._noisy_psnr.extend((10 * torch.log10(1 / mse.clamp_min(1e-12))).tolist())

    _noisy_psnr = None

    def nondist_validation(self, dataloader, current_iter, tb_logger, save_img):
        self._noisy_psnr = []
        try:
            super().nondist_validation(dataloader, current_iter, tb_logger, save_img)
            values = self._noisy_psnr
        finally:
            self._noisy_psnr = None
        if values:
            name = dataloader.dataset.opt['name']
            get_root_logger().info(f'Validation {name}: noisy input (sigma {self.val_sigma:g}) PSNR '
                                   f'{sum(values) / len(values):.4f} dB (float, all channels)')
            if tb_logger:
                tb_logger.add_scalar(f'metrics/{name}/noisy_psnr', sum(values) / len(values), current_iter)


def _psnr_of_sigma(sigma):
    return float('inf') if sigma == 0 else -20 * math.log10(sigma)
