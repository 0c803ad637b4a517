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
    Each step solves the layer on the batch to ``train.target_solver`` (default: the ``train`` preset, rel. tol 1e-5,
    far below the part of the error a start removes) without a graph, from the start's present guess (the same fixed
    point, reached in fewer iterations as the start learns), and takes the pixel loss between the guess
    ``P_S(g(x0))``, ``x0 = P_S(w)``, and that fixed point ``x*`` on Y. The ground
    truth is not used: the start learns where the layer goes, so the layer's output does not change, only the
    iterations it takes (validation reports them at ``network_g.solver.forward``, with the PSNR). The log carries
    ``gap``, ``||P_S(g(x0)) - x*|| / ||x0 - x*||``: the part of the standard start's error the guess leaves (1 for
    the identity the start begins as).

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
        for key in ('jacobian_penalty', 'fixed_point_correction'):
            if train.get(key) is not None:
                raise ValueError(f'train.{key} trains the layer; MCNetStartModel fits the start only (remove it).')
        if self.opt['path'].get('pretrain_network_g') is None:
            raise ValueError('MCNetStartModel fits the start of a trained layer: set path.pretrain_network_g to it.')
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
        self.optimizer_g.zero_grad()
        with tf32(net.allow_tf32):
            with torch.no_grad():
                w, _ = net.backbone_estimate(self.lq)
                b = luma(self.lq.double()).to(w.dtype)
                eps = net.consistency_radius(b)
                x0 = net.operator.project(w, b, eps)
            guess = net.operator.project(net.start(x0), b, eps)
            with torch.no_grad():
                # the target solve starts from the guess: the same fixed point, sooner as the start learns
                f, z_start, _ = net.fixed_point_problem(w, b, x0=guess.detach())
                z, stats = solve(f, z_start, self.target_solver)
                x_star = f(z)[:, :w.shape[1]]
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
