"""mcnet_basicsr.utils.checkpoint: the one checkpoint loader (layouts, prefix, weights_only, errors)."""
import argparse

import pytest
import torch
from torch import nn

from mcnet_basicsr.utils.checkpoint import CheckpointError, load_network, load_state_dict, read_checkpoint


def _sd(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {'weight': torch.randn(2, 3, generator=g), 'bias': torch.randn(2, generator=g)}


@pytest.mark.parametrize('layout', ['params', 'params_ema', 'bare', 'module_prefix'])
def test_layouts_give_the_same_tensors(tmp_path, layout):
    sd = _sd()
    obj = {'params': {'params': sd}, 'params_ema': {'params_ema': sd, 'iter': torch.tensor(3)}, 'bare': sd,
           'module_prefix': {'params': {f'module.{k}': v for k, v in sd.items()}}}[layout]
    path = tmp_path / 'w.pth'
    torch.save(obj, path)
    key = 'params_ema' if layout == 'params_ema' else 'params'
    got = load_state_dict(path, key)
    assert got.keys() == sd.keys()
    for k in sd:
        assert torch.equal(got[k], sd[k])
    net = load_network(nn.Linear(3, 2), path, key)
    assert torch.equal(net.weight, sd['weight'])


def test_errors_name_file_expected_and_found_keys(tmp_path):
    path = tmp_path / 'ema_only.pth'
    torch.save({'params_ema': _sd(), 'meta': {'iter': 1}}, path)
    with pytest.raises(CheckpointError) as err:
        load_state_dict(path, 'params')
    message = str(err.value)
    assert str(path) in message and "'params'" in message and 'params_ema' in message and 'meta' in message
    with pytest.raises(CheckpointError, match='no such file'):
        load_state_dict(tmp_path / 'missing.pth')
    junk = tmp_path / 'junk.pth'
    junk.write_bytes(b'not a checkpoint')
    with pytest.raises(CheckpointError, match='not a readable PyTorch checkpoint'):
        load_state_dict(junk)
    with pytest.raises(CheckpointError, match=r'missing keys: bias.*unexpected keys: extra'):
        torch.save({'params': {'weight': torch.zeros(2, 3), 'extra': torch.zeros(1)}}, path)
        load_network(nn.Linear(3, 2), path)


def test_pickled_objects_need_an_explicit_opt_in(tmp_path):
    """weights_only=True refuses arbitrary objects; only a caller passing allow_pickle reads them."""
    path = tmp_path / 'legacy.pth'
    torch.save({'params': _sd(), 'opt': argparse.Namespace(lr=1e-4)}, path)
    with pytest.raises(CheckpointError, match='not a readable PyTorch checkpoint of tensors'):
        read_checkpoint(path)
    assert load_state_dict(path, allow_pickle=True).keys() == _sd().keys()
