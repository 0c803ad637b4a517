"""Jacobian regularisation of MCNet's fixed-point map: Hutchinson's estimate of ``||J_F||_F^2 / d`` against the
exact Jacobian, its gradient against finite differences (with the exact second derivatives of the projection it
needs), the map MCNetArch keeps for it, MCNetModel's ``train.jacobian_penalty`` and that training with it shortens
the forward solve.

CPU only; a random SRCNN (8-4 features) as the backbone and a 3-layer, 8-channel DnCNN, on 8x8 HR images where the
Jacobian is formed exactly (d = 2 * 8 * 8).
"""
import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)

import pytest
import torch
from basicsr.archs import build_network
from basicsr.models import build_model

from conftest import central_difference, sample_photo, tiny_layer_options
from mcnet_basicsr.deq import jacobian_frobenius_penalty
from mcnet_basicsr.models.mcnet_model import jacobian_penalty_option
from mcnet_basicsr.ops import build_operator
from mcnet_basicsr.utils.color import rgb_to_ycbcr

DT = torch.float64
EPS_CASES = {'eps0': {'eps': 0}, 'eps_rms': {'eps_rms': 0.05}}  # exact consistency / a ball the solution sits on


def layer_opt(ckpt, **kw):
    return tiny_layer_options(ckpt, {'tol': 1e-10, 'max_iter': 300}, {'tol': 1e-8, 'max_iter': 300}, **kw)


def make_layer(ckpt, seed=0, **kw):
    torch.manual_seed(seed)
    return build_network(layer_opt(ckpt, **kw))


def y_patches(size, count, dtype=torch.float32):
    """``count`` Y patches of ``size`` x ``size`` from one photo, (count, 1, size, size) in [0, 1]."""
    rgb = torch.from_numpy(sample_photo('astronaut', size * count)).permute(2, 0, 1)[None].to(dtype) / 255.0
    y = rgb_to_ycbcr(rgb)[:, :1]
    return torch.cat([y[..., size * k:size * (k + 1), size * k:size * (k + 1)] for k in range(count)])


def solved(ckpt, eps_case):
    """A float64 layer in training mode after one forward with grad on an 8x8 HR (4x4 LR) image: (net, lr, F, z)."""
    net = make_layer(ckpt, **EPS_CASES[eps_case]).double().train()
    hr = y_patches(8, 1, DT)
    lr = net.operator(hr)
    with torch.enable_grad():
        net(lr)
    f, z = net.last_fixed_point
    return net, lr, f, z


def map_inputs(net, lr):
    """(w, b, eps) of a solve on ``lr`` (1 channel, float64): the backbone estimate, the measurements, the radius."""
    w, _ = net.run_backbone(lr)
    return w, lr, net.consistency_radius(lr)


def exact_jacobian(f, z):
    """(N * d) x (N * d) Jacobian of ``f`` at ``z``."""
    return torch.autograd.functional.jacobian(lambda t: f(t.view_as(z)).flatten(), z.flatten()).detach()


def probe(shape, seed):
    """The first ``v`` a generator seeded ``seed`` gives (as jacobian_frobenius_penalty draws it)."""
    return torch.randn(shape, dtype=DT, device='cpu', generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------ the projection
def projection_problem(op, n, h, w, seed):
    """x (n, 1, h, w) and measurements b near A of another image, float64."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, h, w, generator=gen, dtype=DT)
    b = op(torch.rand(n, 1, h, w, generator=gen, dtype=DT))
    return x, b + 0.01 * torch.randn(b.shape, generator=gen, dtype=DT)


@pytest.mark.parametrize('op_type', ['bicubic', 'gaussian'])
def test_gradgradcheck_project_eps_positive_second_order(op_type):
    """grad_order=2: second derivatives of the eps > 0 projection are exact (gradgradcheck), with the value and
    first derivatives of the default; the default's single Newton step misses mu's curvature (not vacuous)."""
    op = build_operator({'type': op_type, 'scale': 2})
    x, b = projection_problem(op, 1, 8, 10, seed=6)
    eps = (0.3 * op.residual_norm(x, b)).detach()
    x.requires_grad_(), b.requires_grad_(), eps.requires_grad_()
    second = lambda x_, b_, e_: op.project(x_, b_, e_, grad_order=2)  # noqa: E731
    assert torch.autograd.gradgradcheck(second, (x, b, eps))
    assert not torch.autograd.gradgradcheck(lambda x_, b_, e_: op.project(x_, b_, e_), (x, b, eps),
                                            raise_exception=False)
    probe = torch.randn(x.shape, generator=torch.Generator().manual_seed(7), dtype=x.dtype)
    one, two = op.project(x, b, eps), second(x, b, eps)
    torch.testing.assert_close(two, one, rtol=0, atol=1e-14)
    g_one = torch.autograd.grad((one * probe).sum(), (x, b, eps))
    g_two = torch.autograd.grad((two * probe).sum(), (x, b, eps))
    for a, c in zip(g_two, g_one):
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)


def test_gradgradcheck_project_second_order_mixed_samples():
    """grad_order=2 with samples outside, inside and at eps = 0 in one batch; a bad grad_order is refused."""
    op = build_operator({'type': 'bicubic', 'scale': 2})
    x, b = projection_problem(op, 3, 6, 8, seed=8)
    r = op.residual_norm(x, b)
    eps = torch.stack([0.3 * r[0], 2.0 * r[1], torch.zeros((), dtype=DT)]).detach()
    x.requires_grad_(), b.requires_grad_()
    assert torch.autograd.gradgradcheck(lambda x_, b_: op.project(x_, b_, eps, grad_order=2), (x, b))
    with pytest.raises(ValueError, match='grad_order'):
        op.project(x, b, eps, grad_order=3)


# ------------------------------------------------------------------------------------------ the estimator
@pytest.mark.parametrize('eps_case', EPS_CASES)
def test_penalty_is_the_probe_norm_of_the_exact_jacobian(srcnn_ckpt, eps_case):
    """One probe: ||v^T J||^2 / d with J formed exactly; several probes: the mean over successive draws."""
    net, lr, f, z = solved(srcnn_ckpt, eps_case)
    if eps_case == 'eps_rms':  # the ball is active: F's projection ends on its sphere, mu > 0
        eps = net.consistency_radius(lr)
        assert abs(float(net.operator.residual_norm(z[:, :1], lr)) - eps) < 1e-9 * eps
    jac = exact_jacobian(f, z)
    d = z[0].numel()
    assert jac.shape == (d, d)
    v = probe(z.shape, 3)
    expected = float((v.flatten() @ jac).square().sum()) / d
    value = jacobian_frobenius_penalty(f, z, generator=torch.Generator().manual_seed(3))
    assert value.dtype == DT and value.dim() == 0 and value.requires_grad
    assert abs(value.item() - expected) <= 1e-12 * expected

    gen = torch.Generator().manual_seed(4)
    draws = [torch.randn(z.shape, dtype=DT, generator=gen).flatten() for _ in range(3)]
    expected3 = sum(float((v @ jac).square().sum()) for v in draws) / (3 * d)
    value3 = jacobian_frobenius_penalty(f, z, samples=3, generator=torch.Generator().manual_seed(4))
    assert abs(value3.item() - expected3) <= 1e-12 * expected3


def test_penalty_is_unbiased_for_the_frobenius_norm(srcnn_ckpt):
    """The mean of 2,000 probes (500 copies of one image, 4 probes each: the batch mean) against ||J||_F^2 / d,
    within 5 standard deviations of that mean (a probe's variance is 2 ||J J^T||_F^2 for Gaussian v)."""
    net, lr, f, z = solved(srcnn_ckpt, 'eps_rms')
    jac = exact_jacobian(f, z)
    d = z[0].numel()
    exact = float(jac.square().sum()) / d
    copies, samples = 500, 4
    std = float((2 * (jac @ jac.T).square().sum()).sqrt()) / d / (copies * samples)**0.5
    assert std < 0.02 * exact  # the check can tell a wrong scale (e.g. a missing 1 / d or 1 / N) by far
    w, b, eps = map_inputs(net, lr)
    batched = net.fixed_point_map(w.expand(copies, -1, -1, -1), b.expand(copies, -1, -1, -1), eps, grad_order=2)
    estimate = jacobian_frobenius_penalty(batched, z.expand(copies, -1, -1, -1), samples=samples,
                                          generator=torch.Generator().manual_seed(5)).item()
    assert abs(estimate - exact) <= 5 * std, (estimate, exact, std)


def test_penalty_arguments():
    z = torch.ones(2, 3, dtype=DT)
    with pytest.raises(ValueError, match='samples'):
        jacobian_frobenius_penalty(lambda t: t, z, samples=0)
    with pytest.raises(ValueError, match='shape'):
        jacobian_frobenius_penalty(lambda t: t[:, :2], z)
    # J = 2 I: the probe gives 4 ||v||^2 / (N d) (4 = ||J||_F^2 / d on average); z need not require grad
    value = jacobian_frobenius_penalty(lambda t: 2 * t, z, generator=torch.Generator().manual_seed(0))
    assert float(value) == pytest.approx(4 * float(probe(z.shape, 0).square().mean()), rel=1e-14)


# ------------------------------------------------------------------------------------------ its gradient
@pytest.mark.parametrize('eps_case', EPS_CASES)
def test_penalty_gradient_matches_central_differences(srcnn_ckpt, eps_case):
    """d penalty / d (log beta, one denoiser weight) with a fixed probe, through the map the arch kept, against
    central differences (float64). With eps > 0 this needs the projection's exact second derivatives
    (``grad_order=2``, which the kept map has): the default map's gradient is off by far more than the tolerance."""
    net, lr, stored, z = solved(srcnn_ckpt, eps_case)
    inputs = map_inputs(net, lr)
    layer = net.denoiser.sn_convs()[1]
    idx = (2, 5, 1, 0)
    with torch.no_grad():
        assert float(layer.sigma()) > layer.bound, 'the spectral normalisation should be active on the checked layer'

    def penalty(grad_order=2, f=None):
        f = f or net.fixed_point_map(*inputs, grad_order=grad_order)  # beta is read when the map is made
        return jacobian_frobenius_penalty(f, z, generator=torch.Generator().manual_seed(7))

    def gradient(grad_order=2, f=None):
        net.zero_grad()
        penalty(grad_order, f).backward()
        return float(net.log_beta.grad), float(layer.weight.grad[idx])

    g_beta, g_w = gradient(f=stored)  # the map the arch kept, which MCNetModel penalises
    fd_beta = central_difference(penalty, net.log_beta, (), 1e-5)
    fd_w = central_difference(penalty, layer.weight, idx, 1e-6)
    assert abs(g_beta - fd_beta) <= 1e-6 * abs(fd_beta), (g_beta, fd_beta)
    assert abs(g_w - fd_w) <= 1e-6 * abs(fd_w), (g_w, fd_w)
    if eps_case == 'eps_rms':
        o_beta, o_w = gradient(grad_order=1)
        assert abs(o_beta - fd_beta) > 1e-5 * abs(fd_beta) or abs(o_w - fd_w) > 1e-5 * abs(fd_w)


# ------------------------------------------------------------------------------------------ what the arch keeps
def test_arch_keeps_the_fixed_point_only_with_grad(srcnn_ckpt):
    net = make_layer(srcnn_ckpt, eps_rms=0.05).double().train()
    lr = net.operator(y_patches(8, 2, DT))
    assert net.last_fixed_point is None
    with torch.enable_grad():
        out = net(lr)
    f, z = net.last_fixed_point
    assert z.shape == (2, 2, 8, 8) and not z.requires_grad
    torch.testing.assert_close(z[:, :1], out.detach(), rtol=0, atol=1e-12)  # z = F(z*): its x is the output
    with torch.no_grad():
        assert float((f(z) - z).norm() / z.norm()) < 1e-8  # the map the solve solved (tolerance 1e-10)
    with torch.no_grad():
        net(lr)
    assert net.last_fixed_point is None  # inference keeps nothing of its inputs
    net.eval()
    with torch.enable_grad():
        net(lr)
    assert net.last_fixed_point is not None


# ------------------------------------------------------------------------------------------ MCNetModel
def model_opt(ckpt, lr=1e-3, **train):
    train_opt = {'pixel_opt': {'type': 'MSELoss'}, 'optim_g': {'type': 'Adam', 'lr': lr},
                 'scheduler': {'type': 'MultiStepLR', 'milestones': [10**6], 'gamma': 0.5}}
    train_opt.update(train)
    return {'model_type': 'MCNetModel', 'name': 'jacobian_penalty', 'is_train': True, 'num_gpu': 0, 'dist': False,
            'scale': 2, 'network_g': layer_opt(ckpt, solver={'forward': {'tol': 1e-5, 'max_iter': 100},
                                                             'backward': {'tol': 1e-4, 'max_iter': 100}}),
            'path': {'pretrain_network_g': None, 'strict_load_g': True}, 'train': train_opt}


def training_batch(count=2, size=16):
    gt = y_patches(size, count)
    return {'lq': build_operator({'type': 'bicubic', 'scale': 2})(gt.double()).float(), 'gt': gt}


def built(ckpt, seed=0, **train):
    torch.manual_seed(seed)
    model = build_model(model_opt(ckpt, **train))
    model.feed_data(training_batch())
    return model


def grads(model):
    return {n: p.grad.clone() for n, p in model.net_g.named_parameters() if p.requires_grad}


def reference_step(model, penalty_weight=None):
    """What optimize_parameters computes, by hand: the pixel loss on Y (plus ``weight * penalty``), one backward."""
    model.optimizer_g.zero_grad()
    out = model.net_g(model.lq)
    l_pix = model.cri_pix(model._loss_view(out), model._loss_view(model.gt))
    loss = l_pix
    if penalty_weight is not None:
        f, z = model.net_g.last_fixed_point
        l_jac = jacobian_frobenius_penalty(f, z)
        loss = l_pix + penalty_weight * l_jac
    loss.backward()
    return float(l_pix.detach())


@pytest.mark.parametrize('off', [{}, {'jacobian_penalty': None}], ids=['absent', 'null'])
def test_model_without_the_option_is_unchanged(srcnn_ckpt, off):
    model = built(srcnn_ckpt, **off)
    assert model.jacobian_penalty is None
    model.optimize_parameters(1)
    assert 'l_jac' not in model.log_dict
    ref = built(srcnn_ckpt)
    l_pix = reference_step(ref)
    assert model.log_dict['l_pix'] == l_pix
    for name, g in grads(ref).items():
        assert torch.equal(model.net_g.get_parameter(name).grad, g), name


def test_model_adds_the_weighted_penalty_and_logs_it(srcnn_ckpt):
    weight = 0.5
    model = built(srcnn_ckpt, jacobian_penalty={'weight': weight})
    assert model.jacobian_penalty == {'weight': weight, 'every': 1}
    torch.manual_seed(11)  # the probe
    model.optimize_parameters(1)
    assert 0 < model.log_dict['l_jac'] < 2 and 'l_pix' in model.log_dict

    ref = built(srcnn_ckpt)
    torch.manual_seed(11)
    reference_step(ref, penalty_weight=weight)
    with_penalty = grads(ref)
    plain = built(srcnn_ckpt)
    reference_step(plain)
    for name, g in with_penalty.items():
        torch.testing.assert_close(model.net_g.get_parameter(name).grad, g, rtol=1e-6, atol=1e-9, msg=name)
    assert any(not torch.allclose(g, grads(plain)[n], rtol=1e-3, atol=0) for n, g in with_penalty.items())


def test_model_penalises_every_kth_iteration(srcnn_ckpt):
    model = built(srcnn_ckpt, jacobian_penalty={'weight': 1.0, 'every': 2})
    seen = []
    for it in range(1, 5):
        model.optimize_parameters(it)
        seen.append('l_jac' in model.log_dict)
    assert seen == [False, True, False, True]


@pytest.mark.parametrize('value, message', [
    ({'weight': 1.0, 'samples': 2}, "unknown key"),
    ({'every': 2}, 'weight is required'),
    ({'weight': 0}, 'weight must be'),
    ({'weight': -1e-3}, 'weight must be'),
    ({'weight': float('nan')}, 'weight must be'),
    ({'weight': True}, 'weight must be'),
    ({'weight': 'large'}, 'weight must be'),
    ({'weight': 1.0, 'every': 0}, 'every must be'),
    ({'weight': 1.0, 'every': 1.5}, 'every must be'),
    (0.1, 'must be a mapping'),
])
def test_option_errors(value, message):
    with pytest.raises(ValueError, match=message) as err:
        jacobian_penalty_option(value)
    assert 'train.jacobian_penalty' in str(err.value)


def test_option_values():
    assert jacobian_penalty_option(None) is None
    assert jacobian_penalty_option({'weight': '1e-3'}) == {'weight': 1e-3, 'every': 1}  # YAML 1.1's string
    assert jacobian_penalty_option({'weight': 2, 'every': 3}) == {'weight': 2.0, 'every': 3}


def test_model_refuses_a_bad_option(srcnn_ckpt):
    with pytest.raises(ValueError, match='train.jacobian_penalty.weight'):
        build_model(model_opt(srcnn_ckpt, jacobian_penalty={'weight': 0}))


# ------------------------------------------------------------------------------------------ the lever works
def test_training_on_the_penalty_shortens_the_forward_solve(srcnn_ckpt):
    """40 Adam steps on the penalty alone (pixel loss weighted 0, beta fixed) on 4 16x16 patches: ||J||_F^2 / d
    falls and the eval-mode forward solve (Anderson, tol 1e-5) needs clearly fewer iterations than before."""
    torch.manual_seed(0)
    opt = model_opt(srcnn_ckpt, lr=1e-2, jacobian_penalty={'weight': 1.0})
    opt['network_g']['learn_beta'] = False
    opt['train']['pixel_opt']['loss_weight'] = 0.0
    model = build_model(opt)
    batch = training_batch(count=4)
    net = model.get_bare_model(model.net_g)

    def eval_iterations():
        net.eval()
        with torch.no_grad():
            net(batch['lq'])
        net.train()
        stats = net.last_stats['forward']
        assert stats.converged.all()
        return float(stats.iterations.float().mean())

    before = eval_iterations()
    l_jac = []
    for it in range(1, 41):
        model.feed_data(batch)
        model.optimize_parameters(it)
        l_jac.append(model.log_dict['l_jac'])
    after = eval_iterations()
    print(f'forward iterations {before} -> {after}, l_jac {l_jac[0]:.3f} -> {l_jac[-1]:.3f}')
    assert l_jac[-1] <= 0.8 * l_jac[0], l_jac
    assert after <= 0.8 * before, (before, after)
