"""USRNet and FFDNet (mcnet_basicsr/archs/usrnet_arch.py, ffdnet_arch.py): USRNet's data step is the exact minimiser
for the project's blur operator, its kernel spectrum is that operator's blur, FFDNet's sub-image layout and cropping,
and the official weights (strict loading, parameter counts, what they do on a photo)."""
import numpy as np
import pytest
import torch
from scipy import ndimage
from torch import nn

from conftest import sample_photo, shared_path
from mcnet_basicsr.archs.ffdnet_arch import FFDNet
from mcnet_basicsr.archs.usrnet_arch import USRNet, alias_mean, kernel_spectrum
from mcnet_basicsr.data.kernel_family import gaussian_kernel
from mcnet_basicsr.ops import build_operator

# (HR height, HR width, scale, kernel shape): odd and even kernel sides
CASES = [(8, 12, 2, (5, 5)), (9, 12, 3, (4, 6)), (12, 8, 4, (3, 4))]


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
