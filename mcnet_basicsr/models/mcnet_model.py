import math
import time
from collections import OrderedDict

import torch
from basicsr.utils import get_root_logger
from basicsr.utils.registry import MODEL_REGISTRY
from torch.nn.parallel import DistributedDataParallel

from mcnet_basicsr.deq import jacobian_frobenius_penalty
from mcnet_basicsr.utils.color import rgb_to_ycbcr
from mcnet_basicsr.utils.precision import tf32

from .protocol_sr_model import ProtocolSRModel


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


def _positive_weight(name, value):
    """``value['weight']`` checked as a finite float > 0 (YAML 1.1 reads ``1e-3`` without a dot as a string)."""
    if 'weight' not in value:
        raise ValueError(f'{name}.weight is required (a float > 0; leave {name} out or ~ to train without it).')
    weight = value['weight']
    if isinstance(weight, str):
        try:
            weight = float(weight)
        except ValueError:
            pass
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise ValueError(f'{name}.weight must be a finite number > 0, got {value["weight"]!r}.')
    return float(weight)


def _mapping(name, value, keys, shape):
    """``value`` checked as a mapping with no keys beyond ``keys``; ``shape`` describes it in the error."""
    if not isinstance(value, dict):
        raise ValueError(f'{name} must be a mapping {shape} or ~ (off), got {value!r}.')
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise ValueError(f"{name} takes the keys {' and '.join(repr(k) for k in keys)} only; unknown key(s) {unknown}.")


def jacobian_penalty_option(value):
    """``train.jacobian_penalty`` checked: None (off) or ``{'weight': float > 0, 'every': int >= 1}``."""
    name = 'train.jacobian_penalty'
    if value is None:
        return None
    _mapping(name, value, ('weight', 'every'), '{weight: float > 0, every: int >= 1}')
    weight = _positive_weight(name, value)
    every = value.get('every', 1)
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f'{name}.every must be an int >= 1 (iterations), got {every!r}.')
    return {'weight': weight, 'every': every}


def fixed_point_correction_option(value):
    """``train.fixed_point_correction`` checked: None (off) or ``{'weight': float > 0, 'iterations': [int >= 1, ...]}``
    (iterations sorted, without repeats)."""
    name = 'train.fixed_point_correction'
    if value is None:
        return None
    _mapping(name, value, ('weight', 'iterations'), '{weight: float > 0, iterations: [int >= 1, ...]}')
    weight = _positive_weight(name, value)
    its = value.get('iterations')
    if isinstance(its, int) and not isinstance(its, bool):
        its = [its]
    if not isinstance(its, (list, tuple)) or not its \
            or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in its):
        raise ValueError(f'{name}.iterations must be a non-empty list of forward iteration counts (ints >= 1), '
                         f'got {value.get("iterations")!r}.')
    return {'weight': weight, 'iterations': tuple(sorted(set(its)))}


@MODEL_REGISTRY.register()
class MCNetModel(ProtocolSRModel):
    """Trains the implicit layer of :class:`MCNetArch` with BasicSR's machinery.

    Differences from SRModel (everything else, including EMA, schedulers, checkpoints, resume and
    validation, is inherited, through :class:`ProtocolSRModel`):

    * only the layer learns (the backbone is not a parameter of the arch); ``optim_g`` may carry
      ``lr_beta`` to give ``beta`` its own learning rate, and ``type`` may be any torch.optim class;
    * the pixel loss is taken on Y (``train.loss_channel: y``, default), where MCNet works; the
      backbone's Cb/Cr carry no gradient and would only add a constant offset to an RGB loss;
    * ``train.loss_crop_border`` (HR pixels, default 0) leaves a band along each edge of a training
      patch out of the loss: a backbone run on a small patch is worse near its edges (zero padding
      within its receptive field) than anywhere in a whole test image, and a layer trained on that
      band learns to correct errors the test images do not have;
    * ``train.jacobian_penalty: {weight: w, every: k}`` (default: off) adds ``w * l_jac`` to the pixel loss
      every ``k``-th iteration (``every`` defaults to 1), ``l_jac`` being Hutchinson's one-probe estimate of
      ``||J_F(z)||_F^2 / d`` at the fixed point ``z`` of the step's solve (``J_F``: the Jacobian of the
      fixed-point map, ``d``: the size of ``z`` per sample; 1 for the identity), as Bai et al. (2021),
      "Stabilizing Equilibrium Models by Jacobian Regularization", do: a smaller Jacobian makes the solves
      converge in fewer iterations. ``l_jac`` is logged on the steps that add it. Cost per penalised step: one
      more application of F (a denoiser pass with graph) and a double backward through it; no extra solve.
      The penalty's F is the step's map with exact second derivatives (see ``MCNetArch.solve``);
    * ``train.fixed_point_correction: {weight: w, iterations: [k1, k2, ...]}`` (default: off) adds ``w * l_fpc`` to
      the pixel loss, ``l_fpc`` being the mean of the pixel loss of the outputs the layer would have given had the
      step's forward solve stopped after ``k1``, ``k2``, ... iterations, with the gradient through the one
      application of F that makes each (``MCNetArch.outputs_at_kept_iterates``; Bai et al. (2022), "Deep
      Equilibrium Optical Flow Estimation", call it fixed-point correction): it asks for layers whose early
      iterates are already good, so that a loose tolerance gives the fixed point's quality. ``l_fpc`` is logged.
      Cost per step: one more application of F and its backward per listed count, and copies of those iterates;
    * the log carries beta and the solver statistics (forward/backward iterations, residuals);
      ``train.log_step_times: true`` adds the seconds of each part of a step (``t_fwd``: the forward
      solve, ``t_bwd``: loss (and Jacobian penalty) and implicit backward solve, including DDP's gradient
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
        self.jacobian_penalty = jacobian_penalty_option(self.opt['train'].get('jacobian_penalty'))
        self.fixed_point_correction = fixed_point_correction_option(self.opt['train'].get('fixed_point_correction'))
        super().init_training_settings()
        if self.fixed_point_correction is not None:  # the training network only (an EMA copy validates, no grad)
            self.get_bare_model(self.net_g).keep_iterates = self.fixed_point_correction['iterations']

    def model_to_device(self, net):
        # the learned start is fitted by MCNetStartModel, not with the layer (no gradient reaches it); frozen before
        # DDP lists the parameters it reduces
        if getattr(net, 'start', None) is not None:
            net.start.requires_grad_(False)
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
                                   '(network_g.start_path, or the identity it begins as).')
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
            elif name == 'log_beta':
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
        with tf32(self.get_bare_model(self.net_g).allow_tf32):
            self.output = self.net_g(self.lq)
            t1 = self._mark()
            loss_dict = OrderedDict()
            l_pix = self.cri_pix(self._loss_view(self.output), self._loss_view(self.gt))
            loss_dict['l_pix'] = l_pix
            loss = l_pix
            jac = self.jacobian_penalty
            if jac is not None and current_iter % jac['every'] == 0:
                l_jac = self._jacobian_penalty()
                loss_dict['l_jac'] = l_jac
                loss = loss + jac['weight'] * l_jac
            fpc = self.fixed_point_correction
            if fpc is not None:
                l_fpc = self._fixed_point_correction()
                loss_dict['l_fpc'] = l_fpc
                loss = loss + fpc['weight'] * l_fpc
            loss.backward()
        t2 = self._mark()
        self.optimizer_g.step()
        self.log_dict = self.reduce_loss_dict(loss_dict)
        self.log_dict.update(self._solver_log())
        if self.ema_decay > 0:
            self.model_ema(decay=self.ema_decay)
        if self.log_step_times:
            self.log_dict.update(t_fwd=t1 - t0, t_bwd=t2 - t1, t_opt=self._mark() - t2)

    def _jacobian_penalty(self):
        """``||J_F||_F^2 / d`` (Hutchinson, one probe) at the fixed point of the forward just run, as a loss."""
        net = self.get_bare_model(self.net_g)
        # Under DDP this F is applied outside the wrapped forward. That is safe: F has no buffers that change when
        # it is applied (the spectral-norm vectors move only at the start of a solve, after DDP's broadcast), and the
        # penalty reaches the parameters in the same single backward as the pixel loss, so each parameter's gradient
        # is accumulated, and all-reduced, once. Every rank adds the penalty on the same iterations.
        f, z = net.last_fixed_point
        return jacobian_frobenius_penalty(f, z)

    def _fixed_point_correction(self):
        """The mean pixel loss of the outputs at the kept forward iterates of the step just run."""
        # Under DDP this applies F outside the wrapped forward, safe for the reasons given in _jacobian_penalty.
        outputs = self.get_bare_model(self.net_g).outputs_at_kept_iterates().values()
        gt = self._loss_view(self.gt)
        return sum(self.cri_pix(self._loss_view(out), gt) for out in outputs) / len(outputs)

    def _solver_log(self):
        net = self.get_bare_model(self.net_g)
        out = OrderedDict(beta=float(net.beta.detach()))
        stats = net.last_stats
        if stats is not None:
            fwd = stats['forward']
            out['fwd_iter'] = float(fwd.iterations.float().mean())
            out['fwd_res'] = float(fwd.residual.max())
            bwd = stats['backward'].stats
            if bwd is not None:
                out['bwd_iter'] = float(bwd.iterations.float().mean())
                out['bwd_res'] = float(bwd.residual.max())
        return out
