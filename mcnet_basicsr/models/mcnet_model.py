import time
from collections import OrderedDict

import torch
from basicsr.losses import build_loss
from basicsr.utils import get_root_logger
from basicsr.utils.registry import MODEL_REGISTRY
from torch.nn.parallel import DistributedDataParallel

from mcnet_basicsr.utils.color import rgb_to_ycbcr
from mcnet_basicsr.utils.precision import tf32
from .protocol_sr_model import ProtocolSRModel, ReportingRun


def build_optimizer(optim_type, params, lr, **kwargs):
    """Any ``torch.optim`` optimizer by class name (BasicSR 1.4.2's factory knows only Adam)."""
    cls = getattr(torch.optim, optim_type, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        known = sorted(n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)
                       and issubclass(getattr(torch.optim, n), torch.optim.Optimizer) and n != 'Optimizer')
        raise ValueError(f'Unsupported optimizer {optim_type!r}. Supported ones are: {", ".join(known)}.')
    # YAML 1.1 (and BasicSR's --force_yml) read `5e-5` without a dot as a string
    lr = float(lr)
    for group in params if isinstance(params, list) else []:
        if isinstance(group, dict) and 'lr' in group:
            group['lr'] = float(group['lr'])
    return cls(params, lr=lr, **kwargs)


@MODEL_REGISTRY.register()
class MCNetModel(ProtocolSRModel):
    """Trains the implicit layer of :class:`MCNetArch` with BasicSR's machinery.

    Differences from SRModel (everything else, including EMA, schedulers, checkpoints, resume and
    validation, is inherited, through :class:`ProtocolSRModel`):

    * only the layer learns (the backbone is not a parameter of the arch); ``optim_g`` may carry
      ``lr_beta`` to give the layer's scalars (``beta``, a prior's level) and its hyper-network their own
      learning rate, and ``type`` may be any torch.optim class;
    * the pixel loss is taken on Y (``train.loss_channel: y``, default), where MCNet works; the
      backbone's Cb/Cr carry no gradient and would only add a constant offset to an RGB loss;
    * ``train.loss_crop_border`` (HR pixels, default 0) leaves a band along each edge of a training
      patch out of the loss: a backbone run on a small patch is worse near its edges (zero padding
      within its receptive field) than anywhere in a whole test image, and a layer trained on that
      band learns to correct errors the test images do not have;
    * ``train.jacobian_opt`` (the recipes': ``{type: ContractionLoss, loss_weight: 100, target: 0.8}``) adds a
      Jacobian penalty on the solve's map at its fixed point, so that training keeps the map contracting (whole
      images then converge as the untrained layer's do); the log then carries ``l_jac`` and ``rate``, the batch's
      largest contraction rate;
    * the log carries beta and the solver statistics (forward/backward iterations, residuals);
      ``train.log_step_times: true`` adds the seconds of each part of a step (``t_fwd``: the forward
      solve, ``t_bwd``: loss and implicit backward solve, including DDP's gradient
      all-reduce and the wait for the slowest rank, ``t_opt``: optimizer and EMA), CUDA-synchronised, which
      costs a little speed;
    * validation measures every image as the tables do (:class:`ProtocolSRModel`): the float data
      fidelity ``||A x - b||_2`` and PSNR/SSIM with the output's Y rounded to uint8 (``psnr_y_uint8``),
      the solver's iterations and convergence;
    * distributed (``--launcher pytorch|slurm``): DDP wraps the layer only (the frozen backbone is
      outside its module tree, loaded identically by every rank) and also works without CUDA (gloo);
      validation, which BasicSR runs on rank 0 alone, calls the bare network, so no collective
      (DDP's buffer broadcast) waits for the other ranks. DDP broadcasts rank 0's buffers, the
      spectral-norm power-iteration vectors included, before every training forward, so all ranks
      normalise the denoiser identically.
    """

    def init_training_settings(self):
        self.loss_channel = self.opt['train'].get('loss_channel', 'y')
        if self.loss_channel not in ('y', 'rgb'):
            raise ValueError(f"train.loss_channel must be 'y' or 'rgb', got {self.loss_channel!r}.")
        self.loss_crop_border = self.opt['train'].get('loss_crop_border', 0)
        if isinstance(self.loss_crop_border, bool) or not isinstance(self.loss_crop_border, int) \
                or self.loss_crop_border < 0:
            raise ValueError(f'train.loss_crop_border must be an int >= 0 (HR pixels), got {self.loss_crop_border!r}.')
        if not self.opt['train'].get('pixel_opt'):
            raise ValueError('MCNetModel trains with a pixel loss: set train.pixel_opt (e.g. {type: MSELoss}).')
        self.log_step_times = bool(self.opt['train'].get('log_step_times', False))
        jacobian_opt = self.opt['train'].get('jacobian_opt')
        self.cri_jacobian = build_loss(jacobian_opt).to(self.device) if jacobian_opt else None
        super().init_training_settings()

    def model_to_device(self, net):
        # the learned start is fitted by MCNetStartModel, not with the layer (no gradient reaches it); frozen before
        # DDP lists the parameters it reduces
        if getattr(net, 'start', None) is not None:
            net.start.requires_grad_(False)
        if self.opt['dist']:
            net = ReportingRun(net)  # DDP calls forward: the layer's run, so that a step reports what its solve did
        if self.opt['dist'] and self.device.type != 'cuda':  # BasicSR passes device_ids=[cuda device]
            return DistributedDataParallel(net.to(self.device),
                                           find_unused_parameters=self.opt.get('find_unused_parameters', False))
        return super().model_to_device(net)

    def _print_different_keys_loading(self, crt_net, load_net, strict=True):
        # A layer checkpoint without start.* entries leaves the learned start as it is (MCNetArch's loading keeps
        # it): say so once instead of BasicSR listing the start's weights as missing from the checkpoint. The entries
        # added are the start's own, so loading them changes nothing.
        bare = self.get_bare_model(crt_net)
        if getattr(bare, 'start', None) is not None and not any(k.startswith('start.') for k in load_net):
            get_root_logger().info('The checkpoint holds the layer alone: the learned start keeps its weights '
                                   '(network_g.start.path, or the identity it begins as).')
            load_net.update({f'start.{k}': v for k, v in bare.start.state_dict().items()})
        super()._print_different_keys_loading(crt_net, load_net, strict)

    def get_optimizer(self, optim_type, params, lr, **kwargs):
        return build_optimizer(optim_type, params, lr, **kwargs)

    def setup_optimizers(self):
        optim_opt = dict(self.opt['train']['optim_g'])  # copy: never pop from the user's options
        optim_type = optim_opt.pop('type')
        lr_beta = optim_opt.pop('lr_beta', None)
        net = self.get_bare_model(self.net_g)
        beta, others = [], []
        for name, p in net.named_parameters():
            if name.startswith('start.'):
                continue  # see model_to_device
            if not p.requires_grad:
                get_root_logger().warning(f'Params {name} will not be optimized.')
            elif name in ('log_beta', 'log_beta_slope') or name.startswith(('prior_level.', 'hyper.')):  # beta, level
                beta.append(p)
            else:
                others.append(p)
        groups = [{'params': others}]
        if beta:
            groups.append({'params': beta, **({'lr': lr_beta} if lr_beta is not None else {})})
        self.optimizer_g = self.get_optimizer(optim_type, groups, **optim_opt)
        self.optimizers.append(self.optimizer_g)

    def _loss_view(self, img):
        c = self.loss_crop_border
        if c:
            if min(img.shape[-2:]) <= 2 * c:
                raise ValueError(f'train.loss_crop_border {c} leaves nothing of a {img.shape[-2]}x{img.shape[-1]} '
                                 'patch.')
            img = img[..., c:-c, c:-c]
        if self.loss_channel == 'y' and img.shape[1] == 3:
            return rgb_to_ycbcr(img)[:, :1]
        return img

    def _mark(self):
        """A time stamp for ``train.log_step_times`` (after the device's queued work), else None."""
        if not self.log_step_times:
            return None
        if self.device.type == 'cuda':
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def optimize_parameters(self, current_iter):
        t0 = self._mark()
        self.optimizer_g.zero_grad()
        # the arch scopes TF32 to its forward; the implicit backward solve runs in l_pix.backward(), so the whole
        # step runs under the arch's setting
        with tf32(self.get_bare_model(self.net_g).layer_settings.allow_tf32):
            # solve_info: what the layer's solves did in this step (MCNetArch.run's info)
            self.output, self.solve_info = self.network_output(self.net_g, self.lq)
            t1 = self._mark()
            loss_dict = OrderedDict()
            l_pix = self.cri_pix(self._loss_view(self.output), self._loss_view(self.gt))
            loss_dict['l_pix'] = loss = l_pix
            if self.cri_jacobian is not None:
                loss_dict['l_jac'], rate = self.cri_jacobian(self.solve_info['map'], self.solve_info['fixed_point'])
                loss_dict['rate'] = rate.max()  # the largest of the batch's contraction rates (detached)
                loss = loss + loss_dict['l_jac']
            loss.backward()
        t2 = self._mark()
        self.optimizer_g.step()
        self.log_dict = self.reduce_loss_dict(loss_dict)
        self.log_dict.update(self._solver_log())
        if self.ema_decay > 0:
            self.model_ema(decay=self.ema_decay)
        if self.log_step_times:
            self.log_dict.update(t_fwd=t1 - t0, t_bwd=t2 - t1, t_opt=self._mark() - t2)

    def _solver_log(self):
        net = self.get_bare_model(self.net_g)
        out = OrderedDict(beta=float(net.beta.detach()))
        if getattr(net, 'log_beta_slope', None) is not None:
            out['beta_slope'] = float(net.log_beta_slope.detach())
        stats = getattr(self, 'solve_info', None)
        if stats:
            fwd = stats['forward']
            out['fwd_iter'] = float(fwd.iterations.float().mean())
            out['fwd_res'] = float(fwd.residual.max())
            bwd = stats['backward'].stats
            if bwd is not None:
                out['bwd_iter'] = float(bwd.iterations.float().mean())
                out['bwd_res'] = float(bwd.residual.max())
        return out
