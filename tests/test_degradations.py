"""The kernel-SR protocol's LR (USRNet's Table 1) and PSNR, and the random kernel families for training."""
import math

import numpy as np
import pytest

from conftest import sample_photo
from mcnet_basicsr.data.degradations import psnr_rgb_uint8, usrnet_lr, usrnet_measurement, usrnet_mod_crop
from mcnet_basicsr.data.kernel_family import KernelFamily, gaussian_kernel, motion_kernel


def moments(k):
    """Mean and covariance of a kernel seen as a distribution over its grid (row, column)."""
    rows, cols = np.meshgrid(np.arange(k.shape[0]), np.arange(k.shape[1]), indexing='ij')
    pts = np.stack([rows.ravel(), cols.ravel()])
    w = k.ravel()
    mean = pts @ w
    d = pts - mean[:, None]
    return mean, (d * w) @ d.T


def test_gaussian_kernels_have_the_asked_covariance_and_orientation():
    k = gaussian_kernel(41, 2.0)
    mean, cov = moments(k)
    assert k.sum() == pytest.approx(1.0) and np.allclose(mean, 20)
    assert np.allclose(cov, 4.0 * np.eye(2), atol=1e-6)
    theta = 0.6
    k = gaussian_kernel(51, 3.0, 1.2, theta)
    _, cov = moments(k)
    vals, vecs = np.linalg.eigh(cov)
    assert vals == pytest.approx([1.44, 9.0], abs=1e-4)
    major = vecs[:, 1]  # (row, column) components: along theta from the column axis
    assert abs(abs(major @ np.array([math.sin(theta), math.cos(theta)])) - 1) < 1e-6
    with pytest.raises(ValueError, match='odd'):
        gaussian_kernel(24, 1.0)


def test_motion_kernels_are_normalised_seeded_paths_of_the_asked_length():
    a = motion_kernel(25, np.random.default_rng(5), length=10)
    b = motion_kernel(25, np.random.default_rng(5), length=10)
    c = motion_kernel(25, np.random.default_rng(6), length=10)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert a.min() >= 0 and a.sum() == pytest.approx(1.0)
    rows, cols = np.nonzero(a)
    extent = max(rows.max() - rows.min(), cols.max() - cols.min())
    assert 5 <= extent <= 12  # the path spans `length` along its widest axis (+1 for the bilinear splat)
    fam = KernelFamily(size=25)
    rng = np.random.default_rng(0)
    kinds = [fam.draw(rng)[1] for _ in range(60)]
    assert set(kinds) == {'isotropic', 'anisotropic', 'motion'}
    with pytest.raises(ValueError, match='subset'):
        KernelFamily(kinds=['disk'])


def test_usrnet_lr_truncates_the_uint8_blur_and_seeds_the_noise():
    from scipy import ndimage
    hr = usrnet_mod_crop(sample_photo('astronaut', (100, 90)), 3)
    assert hr.shape[:2] == (96, 72)
    k = gaussian_kernel(25, 1.6)
    lr = usrnet_lr(hr, k, 3)
    exact = ndimage.convolve(hr.astype(np.float64), k[..., None], mode='wrap')[0::3, 0::3] / 255
    assert lr.dtype == np.float32 and lr.shape == (32, 24, 3)
    # truncated to a uint8 level: 0 to 1 level below the exact blur, never above
    gap = (exact - lr) * 255
    assert gap.min() > -1e-4 and gap.max() < 1 + 1e-4 and 0.3 < gap.mean() < 0.7
    b, eps_rms, sigma = usrnet_measurement(lr)
    assert abs(float(((exact - b) * 255).mean())) < 0.2 and eps_rms == pytest.approx(1 / 255 / math.sqrt(12))
    noisy = usrnet_lr(hr, k, 3, noise_sigma=7.65 / 255)
    assert np.array_equal(noisy, usrnet_lr(hr, k, 3, noise_sigma=7.65 / 255))
    assert float((noisy - lr).std()) == pytest.approx(7.65 / 255, rel=0.05)
    with pytest.raises(ValueError, match='uint8'):
        usrnet_lr(hr.astype(np.float32), k, 3)


def test_psnr_rgb_uint8_is_basicsrs_rgb_psnr_with_the_border():
    from basicsr.metrics import calculate_psnr
    rng = np.random.default_rng(0)
    hr = rng.integers(0, 256, (40, 30, 3), dtype=np.uint8)
    out = np.clip(hr.astype(int) + rng.integers(-9, 10, hr.shape), 0, 255).astype(np.uint8)
    ref = calculate_psnr(out, hr, crop_border=9, test_y_channel=False)
    assert psnr_rgb_uint8(out, hr, 9) == pytest.approx(ref, abs=1e-9)
    assert psnr_rgb_uint8(hr, hr, 4) == float('inf')
