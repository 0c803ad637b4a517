"""Fixed-point correction: the outputs MCNetArch gives at kept forward iterates against real solves stopped there,
MCNetModel's ``train.fixed_point_correction`` (its loss, gradient and option checks), and that training with it
makes a loose tolerance reach the fixed point's quality sooner.

CPU only; a random SRCNN (8-4 features) as the backbone and a 3-layer, 8-channel DnCNN, on 8-16 px HR patches.
"""
import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)

import pytest
import torch
from basicsr.archs import build_network
from basicsr.models import build_model

from conftest import sample_photo, tiny_layer_options
from mcnet_basicsr.deq import IterateKeeper
from mcnet_basicsr.models.mcnet_model import fixed_point_correction_option
from mcnet_basicsr.ops import build_operator
from mcnet_basicsr.utils.color import rgb_to_ycbcr

DT = torch.float64


def layer_opt(ckpt, forward=None, **kw):
    return tiny_layer_options(ckpt, forward or {'tol': 1e-5, 'max_iter': 100}, {'tol': 1e-4, 'max_iter': 100}, **kw)


def photo(size, count, dtype=torch.float32):
    """``count`` RGB patches of ``size`` x ``size`` from one real photo, (count, 3, size, size) in [0, 1]."""
    rgb = torch.from_numpy(sample_photo('astronaut', size * count)).permute(2, 0, 1)[None].to(dtype) / 255.0
    return torch.cat([rgb[..., size * k:size * (k + 1), size * k:size * (k + 1)] for k in range(count)])


# ------------------------------------------------------------------------------------------ the arch
def test_keeper_keeps_the_points_of_the_listed_calls():
    seen = []
    keeper = IterateKeeper(lambda z: seen.append(z.clone()) or z + 1, (1, 3))
    z = torch.zeros(2)
    for _ in range(4):
        z = keeper(z)
    assert sorted(keeper.kept) == [1, 3] and keeper.calls == 4 and not keeper.capturable
    assert torch.equal(keeper.kept[1], seen[0]) and torch.equal(keeper.kept[3], seen[2])
    assert keeper.last is not None and torch.equal(keeper.last, seen[3])


@pytest.mark.parametrize('channels', [1, 3], ids=['y', 'rgb'])
def test_outputs_at_kept_iterates_are_solves_stopped_there(srcnn_ckpt, channels):
    """Plain iteration, so that a solve limited to k iterations returns F of its k-th iterate (its residual falls
    every iteration): the output kept at k equals the layer's output with max_iter = k; a count beyond the solve's
    end gives the layer's own output."""
    plain = {'solver': 'fixed_point', 'tol': 1e-9, 'max_iter': 200}
    torch.manual_seed(0)  # beta 0.5: plain iteration contracts by at most rho / (beta + rho) = 2/3 where R does not
    net = build_network(layer_opt(srcnn_ckpt, forward=plain, eps_rms=0.05, beta_init=0.5)).double().train()
    hr = photo(16, 2, DT)
    lr = build_operator({'type': 'bicubic', 'scale': 2})(hr if channels == 3 else rgb_to_ycbcr(hr)[:, :1])
    net.keep_iterates = (1, 4, 9, 1000)
    with torch.enable_grad():
        out = net(lr)
    iterations = int(net.last_stats['forward'].iterations.max())
    assert 9 < iterations < 200
    early = net.outputs_at_kept_iterates()
    assert sorted(early) == [1, 4, 9, 1000] and all(o.requires_grad for o in early.values())
    torch.testing.assert_close(early[1000], out, rtol=0, atol=1e-10)
    for k in (1, 4, 9):
        net.set_solver(forward=dict(plain, max_iter=k), backward={'tol': 1e-4, 'max_iter': 100})
        with torch.no_grad():
            stopped = net(lr)
        torch.testing.assert_close(early[k].detach(), stopped, rtol=0, atol=1e-10, msg=f'k = {k}')
    assert float((early[1] - out).detach().abs().max()) > 1e-3  # the early outputs differ from the fixed point's


def test_iterates_are_kept_only_with_grad(srcnn_ckpt):
    torch.manual_seed(0)
    net = build_network(layer_opt(srcnn_ckpt)).train()
    lr = build_operator({'type': 'bicubic', 'scale': 2})(photo(8, 1))
    with torch.enable_grad():
        net(lr)
    assert net.last_iterates is None  # keep_iterates empty: nothing kept
    with pytest.raises(RuntimeError, match='no iterates were kept'):
        net.outputs_at_kept_iterates()
    net.keep_iterates = (2, )
    with torch.enable_grad():
        net(lr)
    assert sorted(net.last_iterates['z']) == [2]
    with torch.no_grad():
        net(lr)
    assert net.last_iterates is None  # inference keeps nothing of its inputs


# ------------------------------------------------------------------------------------------ MCNetModel
def model_opt(ckpt, lr=1e-3, **train):
    train_opt = {'pixel_opt': {'type': 'MSELoss'}, 'optim_g': {'type': 'Adam', 'lr': lr},
                 'scheduler': {'type': 'MultiStepLR', 'milestones': [10**6], 'gamma': 0.5}}
    train_opt.update(train)
    return {'model_type': 'MCNetModel', 'name': 'fixed_point_correction', 'is_train': True, 'num_gpu': 0,
            'dist': False, 'scale': 2, 'network_g': layer_opt(ckpt),
            'path': {'pretrain_network_g': None, 'strict_load_g': True}, 'train': train_opt}


def training_batch(count=2, size=16):
    gt = photo(size, count)
    return {'lq': build_operator({'type': 'bicubic', 'scale': 2})(gt.double()).float(), 'gt': gt}


def built(ckpt, **train):
    torch.manual_seed(0)
    model = build_model(model_opt(ckpt, **train))
    model.feed_data(training_batch())
    return model


def test_model_adds_the_weighted_correction_and_logs_it(srcnn_ckpt):
    weight = 0.5
    model = built(srcnn_ckpt, fixed_point_correction={'weight': weight, 'iterations': [6, 3]})
    assert model.fixed_point_correction == {'weight': weight, 'iterations': (3, 6)}
    assert model.net_g.keep_iterates == (3, 6)
    model.optimize_parameters(1)
    assert model.log_dict['l_fpc'] > 0 and model.log_dict['l_pix'] > 0
    assert model.log_dict['l_fpc'] != pytest.approx(model.log_dict['l_pix'], rel=1e-3)

    # by hand: the pixel loss of the output plus the weighted mean pixel loss of the two early outputs
    ref = built(srcnn_ckpt)
    net = ref.net_g
    net.keep_iterates = (3, 6)
    ref.optimizer_g.zero_grad()
    out = net(ref.lq)
    view = ref._loss_view
    l_pix = ref.cri_pix(view(out), view(ref.gt))
    early = net.outputs_at_kept_iterates()
    l_fpc = (ref.cri_pix(view(early[3]), view(ref.gt)) + ref.cri_pix(view(early[6]), view(ref.gt))) / 2
    (l_pix + weight * l_fpc).backward()
    assert model.log_dict['l_fpc'] == pytest.approx(float(l_fpc.detach()), rel=1e-6)
    plain = built(srcnn_ckpt)
    plain.optimize_parameters(1)
    changed = False
    for name, p in net.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(model.net_g.get_parameter(name).grad, p.grad, rtol=1e-5, atol=1e-9, msg=name)
            changed |= not torch.allclose(p.grad, plain.net_g.get_parameter(name).grad, rtol=1e-3, atol=0)
    assert changed


def test_model_without_the_option_keeps_nothing(srcnn_ckpt):
    model = built(srcnn_ckpt, fixed_point_correction=None)
    assert model.fixed_point_correction is None and model.net_g.keep_iterates == ()
    model.optimize_parameters(1)
    assert 'l_fpc' not in model.log_dict and model.net_g.last_iterates is None


@pytest.mark.parametrize('value, message', [
    ({'weight': 1.0, 'iterations': [5], 'gamma': 0.8}, 'unknown key'),
    ({'iterations': [5]}, 'weight is required'),
    ({'weight': 0, 'iterations': [5]}, 'weight must be'),
    ({'weight': 'strong', 'iterations': [5]}, 'weight must be'),
    ({'weight': 1.0}, 'iterations must be'),
    ({'weight': 1.0, 'iterations': []}, 'iterations must be'),
    ({'weight': 1.0, 'iterations': [0, 5]}, 'iterations must be'),
    ({'weight': 1.0, 'iterations': [2.5]}, 'iterations must be'),
    ({'weight': 1.0, 'iterations': [True]}, 'iterations must be'),
    ([5, 10], 'must be a mapping'),
])
def test_option_errors(value, message):
    with pytest.raises(ValueError, match=message) as err:
        fixed_point_correction_option(value)
    assert 'train.fixed_point_correction' in str(err.value)


def test_option_values():
    assert fixed_point_correction_option(None) is None
    assert fixed_point_correction_option({'weight': '1e-1', 'iterations': 8}) == {'weight': 0.1, 'iterations': (8, )}
    option = fixed_point_correction_option({'weight': 2, 'iterations': [16, 8, 8]})
    assert option == {'weight': 2.0, 'iterations': (8, 16)}


def test_model_refuses_a_bad_option(srcnn_ckpt):
    with pytest.raises(ValueError, match='train.fixed_point_correction.iterations'):
        build_model(model_opt(srcnn_ckpt, fixed_point_correction={'weight': 1.0, 'iterations': [0]}))


# ------------------------------------------------------------------------------------------ the lever works
def early_gap_after_training(ckpt, **train):
    """40 Adam steps on 4 patches of a real photo, then (MSE of a 3-iteration solve to the ground truth, its MSE to
    the layer's own fixed point), eval mode."""
    torch.manual_seed(0)
    model = build_model(model_opt(ckpt, lr=1e-2, **train))
    batch = training_batch(count=4)
    for it in range(1, 41):
        model.feed_data(batch)
        model.optimize_parameters(it)
    net = model.net_g.eval()
    with torch.no_grad():
        fixed = net(batch['lq'])
        net.set_solver(forward={'tol': 1e-5, 'max_iter': 3}, backward={'tol': 1e-4, 'max_iter': 100})
        early = net(batch['lq'])
    return float((early - batch['gt']).square().mean()), float((early - fixed).square().mean())


def test_training_with_the_correction_improves_early_outputs(srcnn_ckpt):
    """The same training with and without a strong correction at 3 iterations: with it, the output of a 3-iteration
    solve is closer to the ground truth. (On this random layer it moves away from the layer's own fixed point: the
    correction asks for good early outputs, not for a fixed point reached sooner; what it does to a trained layer's
    iterations at equal PSNR is measured in docs/benchmarks.md.)"""
    mse_plain, gap_plain = early_gap_after_training(srcnn_ckpt)
    mse_fpc, gap_fpc = early_gap_after_training(srcnn_ckpt, fixed_point_correction={'weight': 10.0, 'iterations': [3]})
    print(f'3-iteration solve: MSE {mse_plain:.3e} -> {mse_fpc:.3e}, to the fixed point {gap_plain:.3e} -> '
          f'{gap_fpc:.3e}')
    assert mse_fpc <= 0.99 * mse_plain
