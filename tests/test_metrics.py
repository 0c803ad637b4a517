"""calculate_data_fidelity: ||A x - b||_2 on Y, with b given or regenerated from the ground truth."""
import math

import numpy as np
import pytest
import torch
from basicsr.metrics import calculate_metric

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import sample_photo
from mcnet_basicsr.metrics import calculate_data_fidelity
from mcnet_basicsr.ops import QUANTIZATION_EPS_RMS, build_operator, imresize

SCALE = 2


def y_of(rgb01):
    """BT.601 luma (MATLAB convention) of float64 RGB in [0, 1], NCHW; written out independently."""
    r, g, b = rgb01[:, 0:1], rgb01[:, 1:2], rgb01[:, 2:3]
    return (65.481 * r + 128.553 * g + 24.966 * b + 16.0) / 255.0


def to_bgr_hwc(t, uint8):
    """(1, 3, H, W) RGB [0, 1] tensor -> HWC BGR numpy, uint8 (rounded) or float in [0, 1]."""
    arr = t[0].permute(1, 2, 0).numpy()[:, :, ::-1]
    if uint8:
        return np.clip(np.floor(arr * 255.0 + 0.5), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(arr)


def hr_tensor(name, size):
    return torch.from_numpy(sample_photo(name, size)).permute(2, 0, 1)[None].double() / 255.0


def quantised_lr(op, hr):
    return torch.floor(op(hr).clamp(0, 1) * 255.0 + 0.5) / 255.0


def test_with_lq_equals_residual_on_independent_luma():
    op = build_operator({'type': 'bicubic', 'scale': SCALE})
    hr = hr_tensor('chelsea', (48, 40))
    lr = quantised_lr(op, hr)
    g = torch.Generator().manual_seed(0)
    sr = (imresize(lr, SCALE) + 0.02 * torch.randn(hr.shape, generator=g, dtype=torch.float64)).clamp(0, 1)
    expected = float((op(y_of(sr)) - y_of(lr)).norm())
    assert expected > 0.05
    got = calculate_data_fidelity(to_bgr_hwc(sr, False), to_bgr_hwc(hr, False), scale=SCALE,
                                  lq=to_bgr_hwc(lr, False))
    assert got == pytest.approx(expected, rel=1e-6)
    # CHW numpy and NCHW RGB tensors give the same value
    chw = lambda t: np.ascontiguousarray(to_bgr_hwc(t, False).transpose(2, 0, 1))  # noqa: E731
    assert calculate_data_fidelity(chw(sr), chw(hr), scale=SCALE, lq=chw(lr),
                                   input_order='CHW') == pytest.approx(expected, rel=1e-6)
    assert calculate_data_fidelity(sr, hr, scale=SCALE, lq=lr) == pytest.approx(expected, rel=1e-6)
    # img2 is unused when lq is given
    assert calculate_data_fidelity(sr, hr * 0.5, scale=SCALE, lq=lr) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize('name, size', [('astronaut', 64), ('coffee', (48, 64)), ('rocket', (64, 48))])
def test_regenerated_lr_on_hr_itself_is_quantisation_level(name, size):
    op = build_operator({'type': 'bicubic', 'scale': SCALE})
    hr_u8 = sample_photo(name, size)  # the ground truth as BasicSR's validation sees it: uint8
    hr = torch.from_numpy(hr_u8).permute(2, 0, 1)[None].double() / 255.0
    lr = quantised_lr(op, hr)
    expected = float((op(y_of(hr)) - y_of(lr)).norm())
    img = np.ascontiguousarray(hr_u8[:, :, ::-1])  # HWC BGR uint8
    got = calculate_data_fidelity(img, img, scale=SCALE)
    assert got == pytest.approx(expected, rel=1e-6)  # (basicsr rounds the Y coefficients to float32)
    level = QUANTIZATION_EPS_RMS * math.sqrt(lr[:, :1].numel())
    assert level / 2 <= got <= 2 * level, (got, level)
    # through BasicSR's metric dispatcher, as its validation loop calls it
    via_basicsr = calculate_metric({'img': img, 'img2': img}, {'type': 'calculate_data_fidelity', 'scale': SCALE})
    assert via_basicsr == pytest.approx(got, rel=1e-12)


def test_upsampled_lr_much_less_consistent_than_projected():
    op = build_operator({'type': 'bicubic', 'scale': SCALE})
    hr = hr_tensor('astronaut', 64)
    lr = quantised_lr(op, hr)
    up = imresize(lr, SCALE)
    proj = op.project(up, lr, 0.0)  # per RGB channel: A proj = lr exactly
    assert float((op(proj) - lr).abs().max()) < 1e-10
    img2 = to_bgr_hwc(hr, True)
    f_up = calculate_data_fidelity(to_bgr_hwc(up.clamp(0, 1), True), img2, scale=SCALE)
    f_proj = calculate_data_fidelity(to_bgr_hwc(proj.clamp(0, 1), True), img2, scale=SCALE)
    level = QUANTIZATION_EPS_RMS * math.sqrt(lr[:, :1].numel())
    assert f_proj <= 2 * level, (f_proj, level)  # only the uint8 rounding of the output is left
    assert f_up > 5 * f_proj, (f_up, f_proj)
    # in float (no rounding of the output) the projected image is consistent to rounding
    assert calculate_data_fidelity(proj, hr, scale=SCALE) < 1e-9


def test_missing_scale_raises():
    img = sample_photo('coffee', 16)
    with pytest.raises(ValueError, match='scale'):
        calculate_data_fidelity(img, img)
    with pytest.raises(ValueError, match='scale'):
        calculate_metric({'img': img, 'img2': img}, {'type': 'calculate_data_fidelity'})


# ------------------------------------------------------------------ y_uint8_metrics: the tables' protocol
@pytest.mark.parametrize('name', ['astronaut', 'camera'])
def test_y_uint8_psnr_matches_a_hand_computation(name):
    """PSNR of the output's Y rounded to uint8 against the float Y of the uint8 HR, crop = scale, computed here
    from the definition; noise-free, only the rounding remains (about 10 log10(255^2 * 12) = 58.9 dB)."""
    from mcnet_basicsr.metrics import y_uint8_metrics
    hr = hr_tensor(name, (64, 80))
    gt_img = to_bgr_hwc(hr, uint8=True)
    y_hr = y_of(hr)
    crop = 3
    noise = torch.from_numpy(np.random.default_rng(0).normal(0, 2 / 255, y_hr.shape))
    for y, noisy in ((y_hr, False), (y_hr + noise, True)):
        psnr, ssim = y_uint8_metrics(y, gt_img, crop)
        diff = (torch.clamp(torch.round(y * 255.0), 0, 255) - y_hr * 255.0)[..., crop:-crop, crop:-crop]
        assert psnr == pytest.approx(10 * math.log10(255.0 ** 2 / float(diff.pow(2).mean())), abs=1e-4)
        assert (40 < psnr < 44) if noisy else (57 < psnr < 61)
        assert 0 < ssim <= 1


def test_y_uint8_metrics_takes_one_y_image():
    from mcnet_basicsr.metrics import y_uint8_metrics
    hr = hr_tensor('coffee', 16)
    with pytest.raises(ValueError, match='1x1xHxW'):
        y_uint8_metrics(hr, to_bgr_hwc(hr, uint8=True), 2)
