"""USRNet and FFDNet (mcnet_basicsr/archs/usrnet_arch.py, ffdnet_arch.py): USRNet's data step is the exact minimiser
for the project's blur operator, its kernel spectrum is that operator's blur, FFDNet's sub-image layout and cropping,
the official weights (strict loading, parameter counts, what they do on a photo), and the kernel table's usrnet_tiny row
(told the kernel, the scale and the noise level; a Table K cell against a GPU record)."""
import json

import numpy as np
import pytest
import torch
from scipy import ndimage
from torch import nn

from conftest import REPO_ROOT, SHARED, sample_photo, shared_path
from mcnet_basicsr.archs.ffdnet_arch import FFDNet
from mcnet_basicsr.archs.usrnet_arch import USRNet, alias_mean, kernel_spectrum
from mcnet_basicsr.data.kernel_family import gaussian_kernel
from mcnet_basicsr.ops import build_operator

# (HR height, HR width, scale, kernel shape): odd and even kernel sides
CASES = [(8, 12, 2, (5, 5)), (9, 12, 3, (4, 6)), (12, 8, 4, (3, 4))]
GPU_RECORD = REPO_ROOT / 'benchmarks' / 'records' / 'kernel_table_usrnet_tiny_h100.json'


def _kernel(shape, seed=0):
    k = np.random.default_rng(seed).random(shape)
    return k / k.sum()


def _dense(op, h, w):
    """The matrix of ``op`` on one-channel h x w images (float64, (h w / s^2) x (h w))."""
    basis = torch.eye(h * w, dtype=torch.float64).reshape(h * w, 1, h, w)
    return op(basis).reshape(h * w, -1).T.numpy()


@pytest.mark.parametrize('h, w, s, kshape', CASES)
def test_blur_operator_is_circular_convolution_then_upper_left_decimation(h, w, s, kshape):
    """The operator the data step is checked against: scipy's circular convolution, then pixel (0, 0) of each block."""
    k = _kernel(kshape)
    a = _dense(build_operator({'type': 'blur', 'scale': s, 'kernel': k}), h, w)
    x = np.random.default_rng(1).random((h, w))
    expected = ndimage.convolve(x, k, mode='wrap')[::s, ::s]
    np.testing.assert_allclose(a @ x.ravel(), expected.ravel(), rtol=0, atol=1e-12)


@pytest.mark.parametrize('h, w, s, kshape', CASES)
def test_kernel_spectrum_is_the_operators_blur(h, w, s, kshape):
    """``kernel_spectrum`` applied by FFT, then upper-left decimation, is the project's operator (float64)."""
    k = _kernel(kshape)
    op = build_operator({'type': 'blur', 'scale': s, 'kernel': k})
    x = torch.from_numpy(np.random.default_rng(2).random((2, 3, h, w)))
    spectrum = kernel_spectrum(torch.from_numpy(k)[None, None], h, w)
    blurred = torch.fft.ifft2(spectrum * torch.fft.fft2(x)).real
    torch.testing.assert_close(blurred[..., ::s, ::s], op(x), rtol=0, atol=1e-10)
    # a kernel as wide as USRNet's (25 x 25) on a larger image, and the alias mean of its power is A A^T's spectrum
    k = gaussian_kernel(25, 1.6, 2.4, 0.3).astype(np.float64)
    op = build_operator({'type': 'blur', 'scale': s, 'kernel': k})
    big = torch.from_numpy(np.random.default_rng(3).random((1, 1, 16 * s, 14 * s)))
    spectrum = kernel_spectrum(torch.from_numpy(k)[None, None], *big.shape[-2:])
    blurred = torch.fft.ifft2(spectrum * torch.fft.fft2(big)).real[..., ::s, ::s]
    torch.testing.assert_close(blurred, op(big), rtol=0, atol=1e-10)
    y = torch.from_numpy(np.random.default_rng(4).random((1, 1, 16, 14)))
    aat_y = torch.fft.ifft2(alias_mean(spectrum.abs()**2, s) * torch.fft.fft2(y)).real
    torch.testing.assert_close(aat_y, op(op.adjoint(y)), rtol=0, atol=1e-10)


class _FixedWeights(nn.Module):
    """A hyper-network stand-in: the given alphas (and betas of 0.5), whatever the noise level and scale."""

    def __init__(self, alphas):
        super().__init__()
        self.alphas = alphas

    def forward(self, x):
        values = torch.tensor(list(self.alphas) + [0.5] * len(self.alphas), dtype=x.dtype)
        return values.reshape(1, -1, 1, 1).expand(x.shape[0], -1, 1, 1)


class _ImageOnly(nn.Module):
    """A prior stand-in that returns its input image (the noise-level map dropped): USRNet is its data steps alone."""

    def forward(self, x):
        return x[:, :-1]


@pytest.mark.parametrize('h, w, s, kshape', CASES)
@pytest.mark.parametrize('alphas', [(0.3,), (1e-3,), (2.0, 0.05)])
def test_data_step_is_the_dense_least_squares_solution(h, w, s, kshape, alphas):
    """With the prior replaced by the identity, USRNet's forward is its data steps: each is
    ``argmin_x ||y - A x||^2 + alpha ||x - z||^2`` for the project's operator A, solved densely, starting from z = the
    nearest-neighbour upsampled LR."""
    k = _kernel(kshape)
    a = _dense(build_operator({'type': 'blur', 'scale': s, 'kernel': k}), h, w)
    lr = np.random.default_rng(5).random((h // s, w // s))
    x = np.kron(lr, np.ones((s, s))).ravel()  # nearest-neighbour upsampling
    for alpha in alphas:
        x = np.linalg.solve(a.T @ a + alpha * np.eye(h * w), a.T @ lr.ravel() + alpha * x)
    net = USRNet(n_iter=len(alphas), in_ch=1).double()
    net.h, net.p = _FixedWeights(alphas), _ImageOnly()
    out = net(torch.from_numpy(lr)[None, None], torch.from_numpy(k)[None, None], s, 0.0)
    np.testing.assert_allclose(out[0, 0].numpy().ravel(), x, rtol=0, atol=1e-10)


def _pass_through_ffdnet(source_channel=None):
    """A two-layer FFDNet whose second convolution copies its features; the first copies the 12 sub-images (None) or
    puts input channel ``source_channel`` (of the 12 sub-images and the noise-level map) into every feature."""
    net = FFDNet(in_ch=3, num_feat=12, num_layer=2)
    with torch.no_grad():
        for i, conv in enumerate((net.model[0], net.model[2])):
            conv.weight.zero_()
            conv.bias.zero_()
            for c in range(12):
                conv.weight[c, c if i or source_channel is None else source_channel, 1, 1] = 1
    return net


@pytest.mark.parametrize('h, w', [(8, 10), (7, 10), (8, 11), (7, 9)])
def test_ffdnet_sub_images_are_put_back_and_odd_sides_cropped(h, w):
    x = torch.rand(2, 3, h, w)
    with torch.no_grad():
        torch.testing.assert_close(_pass_through_ffdnet()(x, 0.1), x, rtol=0, atol=1e-6)
        # sub-image 1 is colour 0's pixels (2i, 2j + 1): they fill every output pixel of their 2 x 2 block
        out = _pass_through_ffdnet(source_channel=1)(x, 0.1)
        padded = torch.nn.functional.pad(x, (0, w % 2, 0, h % 2), mode='replicate')
        expected = padded[:, :1, 0::2, 1::2].repeat_interleave(2, -2).repeat_interleave(2, -1)
        torch.testing.assert_close(out, expected[..., :h, :w].expand(-1, 3, -1, -1), rtol=0, atol=1e-6)
        # the noise-level map is the last input channel, one level per sample
        out = _pass_through_ffdnet(source_channel=12)(x, torch.tensor([0.1, 0.3]))
    assert out.shape == x.shape
    torch.testing.assert_close(out[0], torch.full_like(out[0], 0.1), rtol=0, atol=1e-6)
    torch.testing.assert_close(out[1], torch.full_like(out[1], 0.3), rtol=0, atol=1e-6)


def _psnr(a, b):
    return float(10 * torch.log10(1 / ((a.clamp(0, 1) - b)**2).mean()))


def _official(arch, *parts):
    net = arch()
    state = torch.load(shared_path(*parts), map_location='cpu', weights_only=False)
    result = net.load_state_dict(state, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    return net.eval()


def test_official_usrnet_tiny_loads_strictly_and_deblurs():
    """590,332 parameters; on a blurred, decimated photo (x3, a Gaussian kernel) it is far above nearest-neighbour
    upsampling, and told the wrong kernel it does worse: the kernel is used as the weights expect."""
    net = _official(USRNet, 'weights', 'usrnet_tiny', 'usrnet_tiny.pth')
    assert sum(p.numel() for p in net.parameters()) == 590_332
    hr = torch.from_numpy(sample_photo('astronaut', (96, 96))).permute(2, 0, 1)[None].float() / 255
    k = gaussian_kernel(25, 1.6).astype(np.float64)
    lr = build_operator({'type': 'blur', 'scale': 3, 'kernel': k})(hr)
    kt = torch.from_numpy(k).float()[None, None]
    with torch.no_grad():
        sr = net(lr, kt, 3, 0.0)
        wrong = net(lr, torch.from_numpy(gaussian_kernel(25, 0.5)).float()[None, None], 3, 0.0)
    nearest = lr.repeat_interleave(3, -2).repeat_interleave(3, -1)
    assert _psnr(sr, hr) > _psnr(nearest, hr) + 4, (_psnr(sr, hr), _psnr(nearest, hr))
    assert _psnr(sr, hr) > _psnr(wrong, hr) + 1, (_psnr(sr, hr), _psnr(wrong, hr))


def test_official_ffdnet_loads_strictly_and_denoises():
    """852,108 parameters; on a photo with noise of std 25/255 it gains over 8 dB, told the noise level."""
    net = _official(FFDNet, 'weights', 'kair_denoisers', 'ffdnet_color.pth')
    assert sum(p.numel() for p in net.parameters()) == 852_108
    clean = torch.from_numpy(sample_photo('coffee', (95, 97))).permute(2, 0, 1)[None].float() / 255
    noisy = clean + torch.randn(clean.shape, generator=torch.Generator().manual_seed(0)) * 25 / 255
    with torch.no_grad():
        out = net(noisy, 25 / 255)
    assert out.shape == clean.shape
    assert _psnr(out, clean) > _psnr(noisy, clean) + 8, (_psnr(out, clean), _psnr(noisy, clean))


def test_protocol_forward_tells_a_non_blind_network_the_kernel_scale_and_noise():
    """The kernel table's third kind of row: the LR as it is, the operator's kernel as an (1, 1, kh, kw) tensor, its
    scale and the noise level."""
    from mcnet_basicsr.evaluation.kernel_table import protocol_forward
    k = gaussian_kernel(7, 1.1, 0.6, 0.4)
    op = build_operator({'type': 'blur', 'scale': 3, 'kernel': k})
    lr = np.random.default_rng(6).random((2, 5, 4, 3)).astype(np.float32)
    seen = {}
    net = USRNet()

    def forward(*args):
        seen['args'] = args
        return torch.full((2, 3, 15, 12), 0.5)

    net.forward = forward
    sr, residuals, info = protocol_forward(net, False, lr, op, 2.55 / 255, torch.device('cpu'))
    x, kernel, scale, sigma = seen['args']
    assert torch.equal(x, torch.from_numpy(lr).permute(0, 3, 1, 2))
    assert kernel.shape == (1, 1, 7, 7) and kernel.dtype == torch.float32
    torch.testing.assert_close(kernel[0, 0], torch.from_numpy(k).float(), rtol=0, atol=0)
    assert scale == 3 and sigma == 2.55 / 255
    assert sr.shape == (2, 15, 12, 3) and (sr == 128).all() and residuals is None and info == {}


def test_usrnet_tiny_row_is_the_protocols_psnr(tmp_path, monkeypatch, keep_tf32_flags):
    """The usrnet_tiny row (options/test_usrnet_tiny_x3.yml, the official weights as fetch_assets.py converts them) on
    x3 with noise 2.55: each image's PSNR is the one USRNet-tiny gives when called directly on the protocol's LR
    (scipy's circular blur of the uint8 HR, upper-left decimation, the noise of seed 0) with the kernel, the scale and
    the noise level."""
    from types import SimpleNamespace

    import cv2
    import scipy.io

    from mcnet_basicsr.data.degradations import psnr_rgb_uint8
    from mcnet_basicsr.evaluation.kernel_table import measure
    from mcnet_basicsr.zoo.assets import fetch
    shared_path('weights', 'usrnet_tiny')
    assert fetch(['usrnet_tiny'], root=tmp_path, mirror=SHARED, log=lambda m: None) == []
    (tmp_path / 'options').symlink_to(REPO_ROOT / 'options')
    (tmp_path / 'data' / 'CBSD68' / 'HR').mkdir(parents=True)
    (tmp_path / 'data' / 'kernels').mkdir()
    photos = {'astronaut.png': sample_photo('astronaut', (72, 96)), 'coffee.png': sample_photo('coffee', (96, 72))}
    for name, img in photos.items():
        cv2.imwrite(str(tmp_path / 'data' / 'CBSD68' / 'HR' / name), img[:, :, ::-1])
    kernels = np.empty((1, 12), dtype=object)
    for i in range(12):
        kernels[0, i] = gaussian_kernel(25, 0.7 + 0.2 * i).astype(np.float32)
    scipy.io.savemat(tmp_path / 'data' / 'kernels' / 'kernels_12.mat', {'kernels': kernels})
    monkeypatch.chdir(tmp_path)
    measure(SimpleNamespace(rows=['usrnet_tiny'], families=['x3_n2.55'], kernels=[3], images=None, batch=1, tol=1e-5,
                            max_iter=200, device='cpu', data='data', out='k.json', time_limit=None, tf32=False))
    cell = json.loads((tmp_path / 'k.json').read_text())['cells']['usrnet_tiny|x3_n2.55|k3']

    net = USRNet()
    net.load_state_dict(torch.load(tmp_path / 'experiments' / 'pretrained_models' / 'usrnet_tiny.pth',
                                   weights_only=True)['params'])
    k = kernels[0, 2].astype(np.float64)
    for name, hr in photos.items():
        lr = ndimage.convolve(hr, k[..., None], mode='wrap')[0::3, 0::3].astype(np.float32) / np.float32(255)
        np.random.seed(0)
        lr += np.random.normal(0, 2.55 / 255, lr.shape)
        psnr = {}
        for sigma in (2.55 / 255, 0.0):
            with torch.no_grad():
                sr = net.eval()(torch.from_numpy(lr).permute(2, 0, 1)[None], torch.from_numpy(k).float()[None, None],
                                3, sigma)
            psnr[sigma] = psnr_rgb_uint8((sr.clamp(0, 1) * 255).round().byte()[0].permute(1, 2, 0).numpy(), hr, 9)
        # the table's run may round a pixel or two to the other uint8 level (seen: 5e-6 dB on one image); the noise
        # level it is told matters far more than that
        assert cell['per_image'][name] == pytest.approx(psnr[2.55 / 255], abs=1e-4), name
        assert abs(psnr[0.0] - psnr[2.55 / 255]) > 1e-2, name
    assert cell['images'] == 2 and cell['fidelity_max'] == 0.0


TABLE_K_IMAGES = 8  # the first CBSD68 images of the x4 / k1 cell (one batch): about 15 s on two idle CPU cores


@pytest.mark.slow
@pytest.mark.skipif(not GPU_RECORD.is_file(), reason=f'needs the GPU record {GPU_RECORD.relative_to(REPO_ROOT)} '
                    '(USRNet-tiny on Table K, per image); absent here')
def test_usrnet_tiny_reproduces_a_table_k_cell(tmp_path, monkeypatch, keep_tf32_flags):
    """The usrnet_tiny row of scripts/kernel_table.py (its option file, the official weights as fetch_assets.py
    converts them, the protocol's LR) gives each of the first images of the x4 / k1 cell within 0.01 dB of the GPU
    record."""
    from types import SimpleNamespace

    from mcnet_basicsr.evaluation.kernel_table import measure
    from mcnet_basicsr.zoo.assets import fetch
    for part in ('datasets/CBSD68', 'kernels/usrnet', 'weights/usrnet_tiny'):
        shared_path(*part.split('/'))
    assert fetch(['CBSD68', 'usrnet_kernels', 'usrnet_tiny'], root=tmp_path, mirror=SHARED, log=lambda m: None) == []
    (tmp_path / 'options').symlink_to(REPO_ROOT / 'options')
    monkeypatch.chdir(tmp_path)
    out = tmp_path / 'k.json'
    measure(SimpleNamespace(rows=['usrnet_tiny'], families=['x4'], kernels=[1], images=TABLE_K_IMAGES, batch=8,
                            tol=1e-5, max_iter=200, device='cpu', data='datasets', out=str(out), time_limit=None,
                            tf32=False))
    ours = json.loads(out.read_text())['cells']['usrnet_tiny|x4|k1']['per_image']
    gpu = json.loads(GPU_RECORD.read_text())['cells']['usrnet_tiny|x4|k1']['per_image']
    assert len(ours) == TABLE_K_IMAGES
    for name, psnr in ours.items():
        assert psnr == pytest.approx(gpu[name], abs=0.01), name
