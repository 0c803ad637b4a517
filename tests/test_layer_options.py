"""The grouped options of the layer map their YAML forms onto typed values, and refuse what they do not know."""
import pytest

from mcnet_basicsr.archs.frozen_backbone import BackboneOptions
from mcnet_basicsr.archs.layer_options import BetaOptions, NetworkWeights
from mcnet_basicsr.archs.learned_start_arch import StartOptions


def test_beta_forms():
    assert BetaOptions.from_options(None) == BetaOptions(init=0.01, learn=True, noise=False)
    assert BetaOptions.from_options(0.05) == BetaOptions.from_options({'init': 0.05}) == BetaOptions(init=0.05)
    assert BetaOptions.from_options({'learn': False, 'noise': True}) == BetaOptions(0.01, False, True)
    with pytest.raises(ValueError, match=r"Unknown beta option\(s\) \['lr'\]"):
        BetaOptions.from_options({'lr': 1e-3})
    with pytest.raises(ValueError, match='beta init must be a number > 0, got 0'):
        BetaOptions.from_options(0)
    with pytest.raises(ValueError, match='beta must be a number or'):
        BetaOptions.from_options('small')
    assert BetaOptions.from_options({'init': 3, 'noise': True, 'slope': 1}).slope == 1.0
    with pytest.raises(ValueError, match='beta slope 0.5 needs noise: true'):
        BetaOptions.from_options({'slope': 0.5})
    with pytest.raises(ValueError, match='beta slope must be a number'):
        BetaOptions.from_options({'noise': True, 'slope': 'steep'})


def test_network_weights_and_start_forms():
    dn = NetworkWeights.from_options('denoiser', {'depth': 6, 'path': 'dn.pth'})
    assert dn == NetworkWeights({'depth': 6}, 'dn.pth')
    assert NetworkWeights.from_options('denoiser', None) == NetworkWeights({}, None)
    with pytest.raises(ValueError, match='denoiser must be a dict'):
        NetworkWeights.from_options('denoiser', 'dncnn6')
    assert StartOptions.from_options({}) == StartOptions(depth=8, num_feat=64, path=None)
    assert StartOptions.from_options({'depth': 4, 'path': 's.pth'}) == StartOptions(4, 64, 's.pth')
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['bias'\]"):
        StartOptions.from_options({'bias': True})


def test_backbone_forms():
    assert BackboneOptions.from_options('imdn') == BackboneOptions(net='imdn')
    net = {'type': 'SRCNN', 'num_feat': [8, 4]}
    assert BackboneOptions.from_options(net).net == net
    full = BackboneOptions.from_options({'net': 'srcnn', 'path': 'b.pth', 'input': 'upsampled', 'channels': 1})
    assert (full.path, full.param_key, full.input, full.channels) == ('b.pth', 'params', 'upsampled', 1)
    with pytest.raises(ValueError, match=r"Unknown backbone option\(s\) \['weights'\]"):
        BackboneOptions.from_options({'net': 'srcnn', 'weights': 'b.pth'})
    with pytest.raises(ValueError, match='backbone must be a preset name'):
        BackboneOptions.from_options({'path': 'b.pth'})
