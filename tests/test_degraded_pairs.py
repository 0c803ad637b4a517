"""DegradedPairDataset: LR made on the fly by a known degradation, and the model told it per batch."""
import random

import cv2
import pytest
import torch
from basicsr.data import build_dataset
from torch.utils.data import default_collate

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import sample_photo, train_through_pipeline
from mcnet_basicsr.models.protocol_sr_model import ProtocolSRModel
from mcnet_basicsr.ops import BlurDownsample, StackedOperator, build_degradation, build_operator
from mcnet_basicsr.ops.blur import pad_kernel


@pytest.fixture
def photo_folder(tmp_path):
    for name, size in (('astronaut', 120), ('coffee', (100, 130))):
        cv2.imwrite(str(tmp_path / f'{name}.png'), sample_photo(name, size)[:, :, ::-1])
    return tmp_path


def dataset(folder, phase='train', **kw):
    opt = dict(name='degraded', type='DegradedPairDataset', dataroot_gt=str(folder), io_backend={'type': 'disk'},
               phase=phase, scale=4, gt_size=48)
    opt.update(kw)
    return build_dataset(opt)


def test_kernel_family_pairs_are_the_told_operator_of_the_crop(photo_folder):
    ds = dataset(photo_folder, degradation={'kernels': {'size': 13}}, quantize='float')
    for i in range(len(ds)):
        item = ds[i]
        assert item['kernel'].shape == (13, 13) and float(item['kernel'].sum()) == pytest.approx(1.0, abs=1e-6)
        op = build_operator({'type': 'blur', 'scale': 4, 'kernel': item['kernel'].double()})
        assert torch.allclose(op(item['gt'][None].double()), item['lq'][None].double(), atol=1e-6)
        assert float(item['noise_sigma']) == 0


@pytest.fixture
def seeded_random():
    """Python's ``random`` seeded (training draws come from it, as BasicSR seeds it per run), restored after."""
    state = random.getstate()
    random.seed(0)
    yield
    random.setstate(state)


def test_resizer_pairs_with_noise_rounded_then_noisy(photo_folder, seeded_random):
    ds = dataset(photo_folder, degradation={'resizers': ['pil-bicubic', 'cv2-area']}, noise=[2, 10])
    names = set()
    for i in range(12):
        item = ds[i % len(ds)]
        names.add(item['degradation'])
        sigma = float(item['noise_sigma'])
        assert 2 / 255 <= sigma <= 10 / 255
        clean = build_degradation(item['degradation'], 4)(item['gt'][None].double())
        clean = (clean * 255 + 0.5).floor().clamp(0, 255) / 255
        # inside only: the LR is made from the whole image before cropping, and a resizer's borders differ from the
        # crop's within its support (2 LR pixels at x4)
        noise = (item['lq'][None].double() - clean)[..., 3:-3, 3:-3]
        assert abs(float(noise.std()) - sigma) < 0.3 * sigma, (item['degradation'], float(noise.std()), sigma)
    assert names == {'pil-bicubic', 'cv2-area'}


def test_test_phase_draws_are_the_same_every_epoch_and_per_image(photo_folder):
    ds = dataset(photo_folder, phase='val', degradation={'kernels': {}}, noise=[0, 7.65], seed=3)
    a, b = ds[0], ds[0]
    assert torch.equal(a['lq'], b['lq']) and torch.equal(a['kernel'], b['kernel'])
    assert not torch.equal(ds[1]['kernel'], a['kernel'])
    assert a['gt'].shape[-2:] == (120, 120)  # whole image, mod-cropped
    other = dataset(photo_folder, phase='val', degradation={'kernels': {}}, noise=[0, 7.65], seed=4)
    assert not torch.equal(other[0]['kernel'], a['kernel'])


def test_bad_degradations_are_refused(photo_folder):
    with pytest.raises(ValueError, match='one of the keys'):
        dataset(photo_folder, degradation={'kernels': {}, 'kernel': 'k.npy'})
    with pytest.raises(ValueError, match='resizer_share'):
        dataset(photo_folder, degradation={'kernels': {}, 'resizers': ['pil-bicubic'], 'resizer_share': 1.5})
    with pytest.raises(ValueError, match='noise'):
        dataset(photo_folder, degradation={'kernels': {}}, noise=[5, 1])
    with pytest.raises(ValueError, match='quantize'):
        dataset(photo_folder, degradation={'kernels': {}}, quantize='uint16')
    with pytest.raises(ValueError):
        dataset(photo_folder, degradation={'resizers': ['paint-bicubic']})


def test_the_model_builds_each_batchs_operator_from_its_samples(photo_folder):
    model = ProtocolSRModel.__new__(ProtocolSRModel)  # only the measurement of a batch: no network needed
    model.opt, model.device = {'scale': 4}, torch.device('cpu')
    ds = dataset(photo_folder, degradation={'kernels': {'size': 13}}, noise=[1, 2])
    batch = default_collate([ds[0], ds[1]])
    m = model.batch_measurement(batch)
    assert isinstance(m['operator'], BlurDownsample) and m['operator'].kernel.shape == (2, 13, 13)
    assert m['noise_sigma'].shape == (2, ) and m['noise_sigma'].dtype == torch.float64
    ds = dataset(photo_folder, degradation={'resizers': ['pil-bicubic', 'cv2-area']})
    batch = {'degradation': ['pil-bicubic', 'cv2-area'], 'noise_sigma': torch.zeros(2)}
    m = model.batch_measurement(batch)
    assert isinstance(m['operator'], StackedOperator) and 'noise_sigma' not in m
    m = model.batch_measurement({'degradation': ['cv2-area', 'cv2-area']})
    assert type(m['operator']).__name__ == 'OpenCVResizeDownsample'
    assert model.batch_measurement({}) == {}


def test_a_mix_tells_each_sample_its_resizer_or_kernel_at_one_size(photo_folder, seeded_random):
    """Kernels and resizers in one set: a resized sample's LR is its resizer's (inside the image) and its kernel the
    circular blur equal to it there; a blurred one's LR is its kernel's; every kernel is padded to one size, which
    leaves its blur unchanged; the model builds a batch's operator from both."""
    ds = dataset(photo_folder, degradation={'kernels': {'size': 13}, 'resizers': ['pil-bicubic', 'cv2-cubic']},
                 quantize='float')
    items = [ds[i % len(ds)] for i in range(16)]
    assert {item['degradation'] for item in items} == {'', 'pil-bicubic', 'cv2-cubic'}
    assert {tuple(item['kernel'].shape) for item in items} == {(19, 19)}  # pil-bicubic's at x4
    for item in items:
        gt, lq = item['gt'][None].double(), item['lq'][None].double()
        blur = build_operator({'type': 'blur', 'scale': 4, 'kernel': item['kernel'].double()})
        if item['degradation']:
            op = build_degradation(item['degradation'], 4)
            torch.testing.assert_close(item['kernel'].double(), torch.from_numpy(
                pad_kernel(op.circular_blur().kernel, 19)), rtol=0, atol=1e-7)
            assert torch.allclose(op(gt)[..., 3:-3, 3:-3], lq[..., 3:-3, 3:-3], atol=1e-6)
        else:
            assert torch.allclose(blur(gt), lq, atol=1e-6)
    model = ProtocolSRModel.__new__(ProtocolSRModel)
    model.opt, model.device = {'scale': 4}, torch.device('cpu')
    blurred = next(item for item in items if not item['degradation'])
    resized = next(item for item in items if item['degradation'])
    batch = default_collate([blurred, resized])
    op = model.batch_measurement(batch)['operator']
    assert isinstance(op, StackedOperator) and isinstance(op.operators[0], BlurDownsample)
    assert op.operators[1] is model.batch_measurement({'degradation': [resized['degradation']]})['operator']
    x = torch.rand(2, 3, 48, 48, dtype=torch.float64)
    torch.testing.assert_close(op.circular_blur()(x), BlurDownsample(4, batch['kernel'].double())(x))
    only_blur = model.batch_measurement(default_collate([blurred, blurred]))['operator']
    assert isinstance(only_blur, BlurDownsample) and only_blur.kernel.shape == (2, 19, 19)


def _shrunk_training(tmp_path, photo_folder, option, name):
    """BasicSR's train_pipeline on ``options/<option>``, shrunk to two iterations on the CPU with a random IMDN x4 and
    ``photo_folder`` for both phases; returns (the run's log, its validations' mean fidelity ``||Ax - b||_2`` on Y, the
    parameters it saved)."""
    import re

    import yaml
    from basicsr.archs import build_network

    from conftest import REPO_ROOT
    from mcnet_basicsr.archs.backbone_presets_arch import backbone_options
    torch.manual_seed(0)
    imdn = build_network(backbone_options('imdn', 4))
    torch.save({'params': imdn.state_dict()}, tmp_path / 'imdn_x4.pth')
    with open(REPO_ROOT / 'options' / option) as f:
        opt = yaml.safe_load(f)
    opt.update(name=name, num_gpu=0)
    for phase in ('train', 'val'):
        opt['datasets'][phase].update(dataroot_gt=str(photo_folder))
        if 'kernels' in opt['datasets'][phase]['degradation']:
            opt['datasets'][phase]['degradation'] = {'kernels': {'size': 13}}
    opt['datasets']['val']['noise'] = 0
    opt['datasets']['train'].update(gt_size=48, batch_size_per_gpu=2, num_worker_per_gpu=0, dataset_enlarge_ratio=1)
    opt['train']['loss_crop_border'] = min(opt['train']['loss_crop_border'], 8)
    net = opt['network_g']
    net['backbone']['path'] = str(tmp_path / 'imdn_x4.pth')
    net['settings']['solver'] = {'forward': {'tol': 1e-3, 'max_iter': 6}, 'backward': {'tol': 1e-2, 'max_iter': 4}}
    opt['train'].update(total_iter=2)
    opt['train']['scheduler']['milestones'] = [2]
    opt['val']['val_freq'] = 2
    opt['logger'].update(print_freq=1, save_checkpoint_freq=2)
    exp, log = train_through_pipeline(opt, tmp_path)
    fidelity = [float(v) for v in re.findall(r'fidelity_float \|\|Ax-b\|\|_2 \(Y, \[0,1\]\) mean (\S+),', log)]
    return log, fidelity, torch.load(exp / 'models' / 'net_g_2.pth', map_location='cpu')['params']


@pytest.mark.slow
def test_training_on_kernels_tells_the_layer_each_batchs_kernel(tmp_path_factory, photo_folder):
    """options/train_mcnet_imdn_kernels_x4.yml shrunk to a CPU run: BasicSR's train_pipeline on blurred pairs, the
    layer told each sample's kernel and noise, R, G and B consistent, and the validation measured under them."""
    log, fidelity, params = _shrunk_training(tmp_path_factory.mktemp('kernels_run'), photo_folder,
                                             'train_mcnet_imdn_kernels_x4.yml', 'e2e_kernels')
    assert 'fidelity_float' in log and 'beta:' in log and 'beta_slope:' in log  # a beta per noise level
    # within the uint8 ball of each image's own kernel (eps_rms times the root of 30 x 30 or 25 x 32 LR values)
    assert fidelity and max(fidelity) <= 0.0011320 * 30 * (1 + 1e-6)
    assert bytes(params['_extra_state'].tolist()).decode().strip() == 'IMDN x4 bicubic'


@pytest.mark.slow
def test_training_on_resizers_starts_from_the_shipped_layer_and_tells_it_each_resizer(tmp_path_factory, photo_folder):
    """options/train_mcnet_imdn_resizers_x4.yml shrunk to a CPU run: pairs made by the six resizers, the layer told
    each sample's resizer, started from the shipped bicubic layer with its beta held, and the validation consistent
    with each image's own resizer."""
    from conftest import REPO_ROOT
    _, fidelity, params = _shrunk_training(tmp_path_factory.mktemp('resizers_run'), photo_folder,
                                           'train_mcnet_imdn_resizers_x4.yml', 'e2e_resizers')
    assert fidelity and max(fidelity) <= 0.0011320 * 30 * (1 + 1e-6)
    shipped = torch.load(REPO_ROOT / 'mcnet_basicsr' / 'weights' / 'mcnet_imdn_x4.pth', map_location='cpu')['params']
    assert float(params['log_beta']) == float(shipped['log_beta'])  # held
    key = 'denoiser.dncnn.0.weight'
    assert params[key].shape == shipped[key].shape
    change = (params[key] - shipped[key]).norm() / shipped[key].norm()
    assert 0 < change < 0.05, change  # two Adam steps of lr 1e-4 from the shipped denoiser
