import torch
from basicsr.utils.registry import MODEL_REGISTRY

from mcnet_basicsr.deq import SolverConfig, solve
from mcnet_basicsr.utils.color import luma
from mcnet_basicsr.utils.precision import tf32
from .mcnet_model import MCNetModel


@MODEL_REGISTRY.register()
class MCNetStartModel(MCNetModel):
    """Fits the learned start of a trained MCNet layer (``network_g.start``, see :class:`MCNetArch`).

    The layer (denoiser, beta) is frozen, loaded from ``path.pretrain_network_g``; only the start network learns.
    Each step solves the layer on the batch, without a graph, from the start's present guess (the same fixed point,
    reached in fewer iterations as the start learns) to ``train.target_solver``, and takes the pixel loss between the
    guess ``P_S(g(x0))``, ``x0 = P_S(w)``, and that fixed point ``x*`` on Y. The default target solver is the
    ``train`` preset (rel. tol 1e-5). A target stopped there still misses the fixed point by part of the standard
    start's error, yet targets at 1e-6 gave a start no better after the same number of steps at a multiple of the
    step time, so the time is better spent on steps. The ground truth is not used: the start
    learns where the layer goes, so the layer's output does not change, only the iterations it takes (validation
    reports them at ``network_g.settings.solver.forward``, with the PSNR). The log carries ``gap``,
    ``||P_S(g(x0)) - x*|| / ||x0 - x*||``: the part of the standard start's error the guess leaves (1 for the identity
    the start begins as).

    ``train.target_bank: {size, new_per_step}`` keeps solved pairs ``(x0, x*)`` in a bank on the device: each step
    solves only ``new_per_step`` samples of the batch, puts them in the bank (replacing the oldest) and takes the
    loss on ``batch_size`` pairs drawn from it. The layer is frozen, so a pair stays exact however long it is kept;
    the solves, most of a step's time, fall by ``batch_size / new_per_step``. The bank fills with whole batches
    first (again after a resume: it is not part of the training state). Default: no bank (size and new_per_step
    equal to the batch: every step solves the whole batch and learns from it).

    One process: the step calls the layer's pieces outside the module's forward, where DistributedDataParallel
    would not reduce the gradients; a fit takes minutes on one GPU.
    """

    def __init__(self, opt):
        if opt.get('dist'):
            raise ValueError('MCNetStartModel trains in one process (no --launcher): fitting a start takes minutes '
                             'on one GPU; use CUDA_VISIBLE_DEVICES to pick it.')
        super().__init__(opt)

    def model_to_device(self, net):
        if getattr(net, 'start', None) is None:
            raise ValueError('MCNetStartModel fits a learned start: give network_g.start (e.g. {depth: 8}).')
        net.requires_grad_(False)
        net.start.requires_grad_(True)
        return net.to(self.device)

    def init_training_settings(self):
        train = self.opt['train']
        if self.opt['path'].get('pretrain_network_g') is None:
            raise ValueError('MCNetStartModel fits the start of a trained layer: set path.pretrain_network_g to it.')
        train_set = self.opt.get('datasets', {}).get('train', {})
        self.bank = TargetBank.from_option(train.get('target_bank'), train_set.get('batch_size_per_gpu'))
        try:
            self.target_solver = SolverConfig.from_dict(dict(train.get('target_solver') or {'preset': 'train'}))
        except KeyError as err:
            raise ValueError(f'train.target_solver: {err.args[0]}') from err
        super().init_training_settings()

    def setup_optimizers(self):
        optim_opt = dict(self.opt['train']['optim_g'])
        optim_type = optim_opt.pop('type')
        self.optimizer_g = self.get_optimizer(optim_type, list(self.net_g.start.parameters()), **optim_opt)
        self.optimizers.append(self.optimizer_g)

    def optimize_parameters(self, current_iter):
        net = self.net_g
        batch = self.lq.shape[0]
        new = self.bank.new_samples(batch)
        self.optimizer_g.zero_grad()
        with tf32(net.layer_settings.allow_tf32):
            with torch.no_grad():
                w, _ = net.backbone_estimate(self.lq[:new])
                b = luma(self.lq[:new].double()).to(w.dtype)
                eps = net.consistency_radius(b)
                x0 = net.operator.project(w, b, eps)
                # the target solve starts from the present guess: the same fixed point, sooner as the start learns
                guess = net.start_point(x0, b, eps)
                f, z_start, _ = net.fixed_point_problem(w, b, x0=guess)
                z, stats = solve(f, z_start, self.target_solver)
                self.bank.add(x0, b, f(z)[:, :w.shape[1]])
            x0, b, x_star = self.bank.draw(batch)
            guess = net.start_point(x0, b, net.consistency_radius(b))
            l_pix = self.cri_pix(guess, x_star)
            l_pix.backward()
        self.optimizer_g.step()
        with torch.no_grad():
            gap = torch.linalg.vector_norm(guess - x_star) / torch.linalg.vector_norm(x0 - x_star).clamp_min(1e-12)
        self.log_dict = {'l_pix': float(l_pix.detach()), 'gap': float(gap),
                         'target_iter': float(stats.iterations.float().mean()),
                         'target_res': float(stats.residual.max())}
        if self.ema_decay > 0:
            self.model_ema(decay=self.ema_decay)


class TargetBank:
    """The last ``size`` solved training pairs ``(x0, b, x*)`` (Y crops, measurements, fixed points), on the device.

    ``draw(n)`` returns ``n`` distinct stored pairs in random order; with as many stored as drawn, all of them.
    """

    def __init__(self, size, new_per_step):
        self.size, self.new_per_step = size, new_per_step
        self.store, self.count, self.next = None, 0, 0

    @classmethod
    def from_option(cls, opt, batch_size):
        if opt is None:  # no bank: each step solves its whole batch and learns from it (sized at the first step)
            return cls(None, None)
        if not isinstance(opt, dict) or set(opt) - {'size', 'new_per_step'} or 'size' not in opt:
            raise ValueError(f'train.target_bank: give {{size: N, new_per_step: k}}, got {opt!r}')
        size, new = opt['size'], opt.get('new_per_step', batch_size)
        for name, v in (('size', size), ('new_per_step', new)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f'train.target_bank.{name} must be a positive integer, got {v!r}')
        if batch_size is not None and not new <= batch_size <= size:
            raise ValueError(f'train.target_bank: need new_per_step ({new}) <= batch_size_per_gpu ({batch_size}) '
                             f'<= size ({size}): a step draws a whole batch from the bank and solves part of one')
        return cls(size, new)

    def __len__(self):
        return self.count

    def new_samples(self, batch):
        """How many samples of a batch of ``batch`` the next step solves."""
        if self.size is None:
            self.size = self.new_per_step = batch
        if batch > self.size:
            raise ValueError(f'train.target_bank.size ({self.size}) is smaller than the batch ({batch})')
        return batch if self.count < self.size else min(self.new_per_step, batch)

    def add(self, *tensors):
        n = tensors[0].shape[0]
        if self.store is None or n >= self.size:  # empty, or every stored pair is replaced
            self.count = self.next = 0
            self.store = [t.new_empty((self.size, *t.shape[1:])) for t in tensors]
        elif any(t.shape[1:] != s.shape[1:] for t, s in zip(tensors, self.store)):
            raise ValueError(f'train.target_bank holds crops of one size ({tuple(self.store[0].shape[1:])}); got '
                             f'{tuple(tensors[0].shape[1:])}: give the training set a fixed gt_size')
        index = (self.next + torch.arange(n, device=tensors[0].device)) % self.size
        for s, t in zip(self.store, tensors):
            s[index] = t
        self.next = (self.next + n) % self.size
        self.count = min(self.count + n, self.size)

    def draw(self, n):
        index = torch.randperm(self.count, device=self.store[0].device)[:n]
        return [s[index] for s in self.store]
