"""Every name we register resolves through BasicSR's registries and builders; state-dict round trips."""
import subprocess
import sys

import pytest
import torch
from basicsr.archs import build_network
from basicsr.models import build_model
from basicsr.utils.registry import ARCH_REGISTRY

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import REPO_ROOT, sample_photo
from mcnet_basicsr.archs.mcnet_arch import MCNetArch
from mcnet_basicsr.models.mcnet_model import MCNetModel
from mcnet_basicsr.utils.color import rgb_to_ycbcr

ARCHS = ('DnCNN', 'SRCNN', 'RDN', 'MCNetArch')


@pytest.mark.slow
def test_import_registers_every_name():
    """In a fresh interpreter: absent from BasicSR's registries before `import mcnet_basicsr`, present after."""
    code = f"""
import sys
sys.path.insert(0, {str(REPO_ROOT)!r})
try:  # the alias basicsr 1.4.2 needs (mcnet_basicsr.basicsr_import's), without importing the package
    import torchvision.transforms.functional_tensor
except ImportError:
    import torchvision.transforms.functional
    sys.modules['torchvision.transforms.functional_tensor'] = torchvision.transforms.functional
import basicsr.archs, basicsr.models, basicsr.metrics
from basicsr.utils.registry import ARCH_REGISTRY, METRIC_REGISTRY, MODEL_REGISTRY
names = [(ARCH_REGISTRY, n) for n in {ARCHS!r}] + [(MODEL_REGISTRY, 'MCNetModel'),
                                                   (METRIC_REGISTRY, 'calculate_data_fidelity')]
before = [n for r, n in names if n in r]
import mcnet_basicsr
after = [n for r, n in names if n not in r]
print('BEFORE', before, 'MISSING_AFTER', after)
"""
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'BEFORE [] MISSING_AFTER []' in proc.stdout, proc.stdout + proc.stderr[-2000:]


@pytest.fixture(scope='module')
def srcnn_ckpt(tmp_path_factory):
    torch.manual_seed(0)
    net = build_network({'type': 'SRCNN', 'padding_mode': 'zeros'})
    path = tmp_path_factory.mktemp('registry') / 'srcnn.pth'
    torch.save({'params': net.state_dict()}, path)
    return str(path)


def mcnet_opt(ckpt):
    return {
        'type': 'MCNetArch',
        'backbone': {'net': {'type': 'SRCNN', 'padding_mode': 'zeros'}, 'path': ckpt, 'input': 'upsampled',
                     'channels': 1},
        'operator': {'type': 'bicubic', 'scale': 2},
        'eps': 0,
        'denoiser': {'num_feat': 8},
        'settings': {'solver': {'forward': {'tol': 1e-4, 'max_iter': 20}}},
    }


def photo(size, channels=3, dtype=torch.float32):
    x = torch.from_numpy(sample_photo('coffee', size)).permute(2, 0, 1)[None].to(dtype) / 255.0
    return x if channels == 3 else rgb_to_ycbcr(x)[:, :1]


def arch_cases(ckpt):
    return [
        ({'type': 'DnCNN', 'num_feat': 8, 'depth': 5}, photo(24, 1)),
        ({'type': 'DnCNN', 'num_feat': 8, 'depth': 6, 'batch_norm': True, 'spectral_norm': False}, photo(24, 1)),
        ({'type': 'SRCNN', 'padding_mode': 'replicate'}, photo(24, 1)),
        ({'type': 'RDN', 'num_feat': 8, 'num_block': 2, 'num_layer': 2, 'growth': 8, 'upscale': 2}, photo(12)),
        (mcnet_opt(ckpt), photo(12)),
    ]


def test_build_network_round_trip(srcnn_ckpt, tmp_path):
    for k, (opt, x) in enumerate(arch_cases(srcnn_ckpt)):
        torch.manual_seed(10)
        net = build_network(dict(opt)).eval()
        assert type(net) is ARCH_REGISTRY.get(opt['type'])
        with torch.no_grad():
            ref = net(x)
        path = tmp_path / f'{k}.pth'
        torch.save({'params': net.state_dict()}, path)

        torch.manual_seed(11)  # different random init: the outputs differ before loading
        other = build_network(dict(opt)).eval()
        with torch.no_grad():
            assert not torch.allclose(other(x), ref), opt['type']
        other.load_state_dict(torch.load(path)['params'], strict=True)
        with torch.no_grad():
            out = other(x)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-6, msg=f'{opt["type"]} round trip')


def model_opt(ckpt, pretrain=None, models_dir=None):
    return {
        'model_type': 'MCNetModel',
        'name': 'registry_test',
        'is_train': False,
        'num_gpu': 0,
        'dist': False,
        'scale': 2,
        'network_g': mcnet_opt(ckpt),
        'path': {'pretrain_network_g': pretrain, 'strict_load_g': True, 'models': models_dir},
    }


CASES = [('plain', False, False), ('mcnet', False, False), ('mcnet', True, False), ('mcnet', True, True)]


@pytest.mark.parametrize('network, allow, wrapped', CASES)
def test_protocol_model_runs_the_network_in_float32_unless_it_allows_tf32(srcnn_ckpt, set_tf32_flags, monkeypatch,
                                                                          network, allow, wrapped):
    """A backbone's row of the tables runs as the backbone inside an MCNet layer does: TF32 off (PyTorch's default turns
    it on for cuDNN convolutions) unless the network's settings set allow_tf32, read through a wrapper (DataParallel)
    too; the process's flags are restored afterwards."""
    net_opt = {'type': 'SRCNN', 'scale': 2} if network == 'plain' else dict(
        mcnet_opt(srcnn_ckpt), settings={'allow_tf32': allow, 'solver': {'forward': {'max_iter': 2}}})
    model = build_model({'model_type': 'ProtocolSRModel', 'name': 'tf32_test', 'is_train': False, 'num_gpu': 0,
                         'dist': False, 'scale': 2, 'network_g': net_opt, 'path': {'pretrain_network_g': None}})
    bare = model.net_g
    if wrapped:  # as BasicSR wraps it with num_gpu > 1 (on the CPU DataParallel calls the module itself)
        model.net_g = torch.nn.DataParallel(bare)
    process = not allow
    set_tf32_flags(process)
    seen = []

    def record(*_):
        seen.append((torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32))

    if hasattr(bare, 'run'):  # a layer is called through run (output and solve statistics)
        run = bare.run
        monkeypatch.setattr(bare, 'run', lambda *a, **k: (record(), run(*a, **k))[1])
    else:
        bare.register_forward_pre_hook(record)
    model.feed_data({'lq': photo(12)})
    model.test()
    assert seen == [(allow, allow)]
    assert model.output.shape == (1, 3, 24, 24)
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == (process, process)


def test_build_model_and_checkpoint_round_trip(srcnn_ckpt, tmp_path):
    lq = photo(12)
    torch.manual_seed(20)
    model = build_model(model_opt(srcnn_ckpt, models_dir=str(tmp_path)))
    assert type(model) is MCNetModel and isinstance(model.net_g, MCNetArch)
    model.feed_data({'lq': lq})
    model.test()
    ref = model.output.clone()
    assert ref.shape == (1, 3, 24, 24)
    assert model.last_measurement['fidelity'] <= 1e-5  # eps = 0: the float output is consistent
    model.save_network(model.net_g, 'net_g', 7)  # BasicSR's own checkpoint writer
    ckpt = tmp_path / 'net_g_7.pth'
    assert ckpt.is_file()
    saved = torch.load(ckpt)['params']
    assert 'log_beta' in saved and not any(k.startswith(('conv', 'backbone')) for k in saved)

    torch.manual_seed(21)
    fresh = build_model(model_opt(srcnn_ckpt))
    fresh.feed_data({'lq': lq})
    fresh.test()
    assert not torch.allclose(fresh.output, ref)

    torch.manual_seed(21)
    loaded = build_model(model_opt(srcnn_ckpt, pretrain=str(ckpt)))  # BasicSR's load_network, strict
    loaded.feed_data({'lq': lq})
    loaded.test()
    torch.testing.assert_close(loaded.output, ref, rtol=0, atol=1e-6)
