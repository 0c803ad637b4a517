"""The learned start of MCNetArch: it begins as the standard start, never moves the fixed point, loads from a start
file or a whole layer checkpoint, stays out of the layer's training, and MCNetStartModel fits it so that the solve
needs fewer iterations to the same output.

CPU only; a random SRCNN (8-4 features) as the backbone, a 3-layer 8-channel DnCNN and a 3-layer 8-channel start, on
16x16 HR patches of a real photo.
"""
import pytest
import torch
from basicsr.archs import build_network
from basicsr.models import build_model
from basicsr.utils import get_root_logger

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import sample_photo, tiny_layer_options
from mcnet_basicsr.archs.learned_start_arch import build_start_network, load_start_network
from mcnet_basicsr.ops import build_operator
from mcnet_basicsr.utils.checkpoint import CheckpointError, load_network

START = {'depth': 3, 'num_feat': 8}


def layer_opt(ckpt, **kw):
    return tiny_layer_options(ckpt, {'tol': 1e-6, 'max_iter': 300}, {'tol': 1e-4, 'max_iter': 100}, **kw)


@pytest.fixture(scope='module')
def layer_ckpt(srcnn_ckpt, tmp_path_factory):
    """A layer without a start, saved as training saves it (params and params_ema)."""
    torch.manual_seed(1)
    net = build_network(layer_opt(srcnn_ckpt))
    path = tmp_path_factory.mktemp('learned_start') / 'layer.pth'
    torch.save({'params': net.state_dict(), 'params_ema': net.state_dict()}, path)
    return str(path)


def photo(size, count):
    rgb = torch.from_numpy(sample_photo('astronaut', size * count)).permute(2, 0, 1)[None].float() / 255.0
    return torch.cat([rgb[..., size * k:size * (k + 1), size * k:size * (k + 1)] for k in range(count)])


def lr_of(hr):
    return build_operator({'type': 'bicubic', 'scale': 2})(hr.double()).float()


def layer(srcnn_ckpt, layer_ckpt, **kw):
    net = build_network(layer_opt(srcnn_ckpt, **kw))
    load_network(net, layer_ckpt)
    return net.eval()


def solved(net, lr):
    with torch.no_grad():
        out, info = net.run(lr)
    assert info['forward'].converged.all()
    return out, info['forward'].iterations


# ------------------------------------------------------------------------------------------ the network
def test_start_begins_as_the_identity():
    net = build_start_network(START)
    x = photo(16, 2)[:, :1]
    assert torch.equal(net(x), x)
    with pytest.raises(ValueError, match="unknown key"):
        build_start_network({'depth': 3, 'bias': True})


def test_an_identity_start_is_the_standard_start(srcnn_ckpt, layer_ckpt):
    lr = lr_of(photo(16, 2))
    plain_out, plain_its = solved(layer(srcnn_ckpt, layer_ckpt), lr)
    start_out, start_its = solved(layer(srcnn_ckpt, layer_ckpt, start=START), lr)
    # the same iterates but for the rounding of one more projection of x0 (in S already); at tol 1e-6 the float32
    # residual is near its rounding floor, where that rounding can move the stop by a few iterations (2 seen)
    assert (plain_its - start_its).abs().max() <= 3
    torch.testing.assert_close(start_out, plain_out, rtol=0, atol=1e-5)


def test_any_start_leads_to_the_same_fixed_point(srcnn_ckpt, layer_ckpt):
    """A random (non-identity) start does not change the output beyond the solver's tolerance."""
    lr = lr_of(photo(16, 2))
    plain_out, plain_its = solved(layer(srcnn_ckpt, layer_ckpt), lr)
    net = layer(srcnn_ckpt, layer_ckpt, start=START)
    torch.manual_seed(3)
    torch.nn.init.normal_(net.start.dncnn[-1].weight, std=0.05)
    start_out, _ = solved(net, lr)
    x = plain_out[:, :1]
    assert float((net.start(x) - x).abs().max()) > 1e-2  # a different start indeed
    assert float((start_out - plain_out).abs().max()) < 1e-4


def test_tiled_start_is_the_whole_image_start(srcnn_ckpt, layer_ckpt):
    net = layer(srcnn_ckpt, layer_ckpt, start=START)
    torch.manual_seed(5)
    torch.nn.init.normal_(net.start.dncnn[-1].weight, std=0.05)
    x = photo(40, 1)[:, :1]
    with torch.no_grad():
        whole = net.start_guess(x)
        tiled = net.start_guess(x, tile=6)  # 12 x 12 HR tiles
    assert float((whole - x).abs().max()) > 1e-2
    torch.testing.assert_close(tiled, whole, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------------ weights
def test_layer_checkpoint_without_a_start_keeps_the_start_of_its_path(srcnn_ckpt, layer_ckpt, tmp_path):
    torch.manual_seed(4)
    start = build_start_network(START)
    torch.nn.init.normal_(start.dncnn[-1].weight, std=0.05)
    torch.save(start.state_dict(), tmp_path / 'start.pth')
    net = layer(srcnn_ckpt, layer_ckpt, start=dict(START, path=str(tmp_path / 'start.pth')))  # strict load
    for name, p in start.state_dict().items():
        assert torch.equal(net.start.state_dict()[name], p), name
    # a whole layer checkpoint with its start: start.path takes its start.* entries (params_ema first)
    zero_start = {k: torch.zeros_like(v) if k.startswith('start.') else v for k, v in net.state_dict().items()}
    torch.save({'params': zero_start, 'params_ema': net.state_dict()}, tmp_path / 'whole.pth')
    again = build_start_network(START)
    load_start_network(again, str(tmp_path / 'whole.pth'))
    assert all(torch.equal(again.state_dict()[k], v) for k, v in start.state_dict().items())
    # and a layer checkpoint with a start replaces the one of start.path
    other = layer(srcnn_ckpt, str(tmp_path / 'whole.pth'), start=dict(START, path=str(tmp_path / 'start.pth')))
    assert all(not v.any() for v in other.start.state_dict().values())


def test_bad_start_weights_and_options_are_refused(srcnn_ckpt, layer_ckpt, tmp_path):
    torch.save(build_start_network({'depth': 4, 'num_feat': 8}).state_dict(), tmp_path / 'deep.pth')
    with pytest.raises(CheckpointError, match='not the weights of this start network'):
        load_start_network(build_start_network(START), str(tmp_path / 'deep.pth'))
    # a path alone is the default start (depth 8), which those weights do not fit
    with pytest.raises(CheckpointError, match='not the weights of this start network'):
        build_network(layer_opt(srcnn_ckpt, start={'path': str(tmp_path / 'deep.pth')}))
    with pytest.raises(ValueError, match='start must be a dict'):
        build_network(layer_opt(srcnn_ckpt, start=str(tmp_path / 'deep.pth')))
    # a checkpoint with a start does not load into a layer without one
    net = layer(srcnn_ckpt, layer_ckpt, start=START)
    torch.save({'params': net.state_dict()}, tmp_path / 'with_start.pth')
    with pytest.raises(CheckpointError, match='unexpected keys: start.'):
        layer(srcnn_ckpt, str(tmp_path / 'with_start.pth'))


def test_a_model_loads_a_layer_checkpoint_beside_a_start_path_without_missing_keys(srcnn_ckpt, layer_ckpt, tmp_path,
                                                                                   caplog):
    """BasicSR's model loading (test.py, train.py) of a layer checkpoint without start.* entries: the start of
    ``start.path`` stays, and the log says so instead of listing its weights as missing."""
    torch.manual_seed(5)
    start = build_start_network(START)
    torch.nn.init.normal_(start.dncnn[-1].weight, std=0.05)
    torch.save({'params': start.state_dict()}, tmp_path / 'start.pth')
    opt = model_opt(srcnn_ckpt, layer_ckpt, model_type='MCNetModel')
    opt['is_train'] = False
    opt['network_g']['start'] = dict(START, path=str(tmp_path / 'start.pth'))
    logger = get_root_logger()  # BasicSR's logger does not propagate to the root logger caplog listens to
    level = logger.level
    logger.addHandler(caplog.handler)
    logger.setLevel('INFO')  # as train.py / test.py set it with their log file
    try:
        net = build_model(opt).net_g
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(level)
    assert all(torch.equal(net.start.state_dict()[k], v) for k, v in start.state_dict().items())
    assert 'the learned start keeps its weights' in caplog.text
    assert 'start.dncnn' not in caplog.text and 'Current net - loaded net' not in caplog.text


# ------------------------------------------------------------------------------------------ training
def model_opt(srcnn_ckpt, layer_ckpt, model_type='MCNetStartModel', **train):
    train_opt = {'pixel_opt': {'type': 'MSELoss'}, 'optim_g': {'type': 'Adam', 'lr': 1e-2},
                 'scheduler': {'type': 'MultiStepLR', 'milestones': [10**6], 'gamma': 0.5}}
    train_opt.update(train)
    return {'model_type': model_type, 'name': 'learned_start', 'is_train': True, 'num_gpu': 0, 'dist': False,
            'scale': 2, 'network_g': layer_opt(srcnn_ckpt, start=dict(START)),
            'path': {'pretrain_network_g': layer_ckpt, 'strict_load_g': True}, 'train': train_opt}


def test_fitting_the_start_cuts_iterations_and_keeps_the_layer(srcnn_ckpt, layer_ckpt):
    torch.manual_seed(0)
    model = build_model(model_opt(srcnn_ckpt, layer_ckpt))
    net = model.net_g
    layer_before = {k: v.clone() for k, v in net.state_dict().items() if not k.startswith('start.')}
    hr = photo(16, 8)
    batch = {'lq': lr_of(hr), 'gt': hr}
    net.eval()
    out_before, its_before = solved(net, batch['lq'])
    net.train()
    gaps = []
    for it in range(1, 61):
        model.feed_data(batch)
        model.optimize_parameters(it)
        gaps.append(model.log_dict['gap'])
    net.eval()
    out_after, its_after = solved(net, batch['lq'])
    print(f'gap {gaps[0]:.3f} -> {gaps[-1]:.3f}, iterations {its_before.float().mean():.1f} -> '
          f'{its_after.float().mean():.1f}')
    assert gaps[0] == pytest.approx(1.0, abs=1e-3)  # the identity start: the standard start's error
    assert gaps[-1] < 0.7
    assert its_after.float().mean() < its_before.float().mean()
    assert float((out_after - out_before).abs().max()) < 1e-4  # the same fixed point
    for k, v in net.state_dict().items():
        if k in layer_before:
            assert torch.equal(v, layer_before[k]), f'{k} changed: the layer must stay frozen'


def test_a_target_bank_solves_part_of_each_batch_and_still_fits(srcnn_ckpt, layer_ckpt, monkeypatch):
    import mcnet_basicsr.models.mcnet_start_model as start_model
    solve, solved_batches = start_model.solve, []

    def counting_solve(f, z, config):
        solved_batches.append(z.shape[0])
        return solve(f, z, config)

    monkeypatch.setattr(start_model, 'solve', counting_solve)
    torch.manual_seed(0)
    model = build_model(model_opt(srcnn_ckpt, layer_ckpt, target_bank={'size': 16, 'new_per_step': 2}))
    net = model.net_g
    hr = photo(16, 16)
    net.eval()
    _, its_before = solved(net, lr_of(hr))
    net.train()
    gaps = []
    for it in range(60):
        pick = torch.randperm(16)[:8]
        model.feed_data({'lq': lr_of(hr[pick]), 'gt': hr[pick]})
        model.optimize_parameters(it + 1)
        gaps.append(model.log_dict['gap'])
    assert solved_batches[:2] == [8, 8] and set(solved_batches[2:]) == {2}  # fills with whole batches, then 2
    assert len(model.bank) == 16
    net.eval()
    _, its_after = solved(net, lr_of(hr))
    print(f'gap {gaps[0]:.3f} -> {gaps[-1]:.3f}, iterations {its_before.float().mean():.1f} -> '
          f'{its_after.float().mean():.1f}')
    assert gaps[0] == pytest.approx(1.0, abs=1e-3)
    assert gaps[-1] < 0.7
    assert its_after.float().mean() < its_before.float().mean()


def test_target_bank_keeps_the_newest_pairs_and_draws_distinct_ones():
    from mcnet_basicsr.models.mcnet_start_model import TargetBank
    bank = TargetBank.from_option({'size': 5, 'new_per_step': 2}, 3)
    assert bank.new_samples(3) == 3  # filling: whole batches
    for first in (0, 3, 6):
        bank.add(torch.arange(first, first + 3.0).view(3, 1, 1, 1))
    assert len(bank) == 5 and bank.new_samples(3) == 2
    (drawn,) = bank.draw(5)
    assert sorted(drawn.flatten().tolist()) == [4.0, 5.0, 6.0, 7.0, 8.0]  # the oldest four are gone
    (drawn,) = bank.draw(3)
    assert len(set(drawn.flatten().tolist())) == 3
    with pytest.raises(ValueError, match='one size'):
        bank.add(torch.zeros(2, 1, 2, 2))


def test_layer_training_leaves_the_start_alone(srcnn_ckpt, layer_ckpt):
    torch.manual_seed(0)
    model = build_model(model_opt(srcnn_ckpt, layer_ckpt, model_type='MCNetModel'))
    start_before = {k: v.clone() for k, v in model.net_g.start.state_dict().items()}
    hr = photo(16, 2)
    model.feed_data({'lq': lr_of(hr), 'gt': hr})
    model.optimize_parameters(1)
    assert all(not p.requires_grad for p in model.net_g.start.parameters())
    optimized = {id(p) for group in model.optimizer_g.param_groups for p in group['params']}
    assert not optimized & {id(p) for p in model.net_g.start.parameters()}
    assert all(torch.equal(model.net_g.start.state_dict()[k], v) for k, v in start_before.items())


@pytest.mark.parametrize('change, message', [
    ({'dist': True}, 'trains in one process'),
    ({'network_g': 'no start'}, 'give network_g.start'),
    ({'path': {'pretrain_network_g': None}}, 'set path.pretrain_network_g'),
    ({'train': {'target_solver': {'preset': 'no_such_preset'}}}, 'train.target_solver'),
    ({'train': {'target_bank': {'new_per_step': 4}}}, r'give \{size: N'),
    ({'train': {'target_bank': {'size': 0, 'new_per_step': 4}}}, 'size must be a positive integer'),
    ({'train': {'target_bank': {'size': 8, 'new_per_step': 9}}}, r'need new_per_step \(9\) <= batch_size_per_gpu'),
])
def test_start_model_refuses_bad_options(srcnn_ckpt, layer_ckpt, change, message):
    opt = model_opt(srcnn_ckpt, layer_ckpt)
    opt['datasets'] = {'train': {'batch_size_per_gpu': 8}}
    if change.get('network_g') == 'no start':
        del opt['network_g']['start']
    elif 'train' in change:
        opt['train'].update(change['train'])
    elif 'path' in change:
        opt['path'].update(change['path'])
    else:
        opt.update(change)
    with pytest.raises(ValueError, match=message):
        build_model(opt)
