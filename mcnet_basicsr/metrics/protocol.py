"""Everything the tables measure of one output image: the function both validation (``ProtocolSRModel`` and
``MCNetModel``) and the tables (``mcnet_basicsr.evaluation``) take their numbers from."""
import torch
from basicsr.metrics import calculate_psnr, calculate_ssim
from basicsr.utils import tensor2img

from mcnet_basicsr.utils.color import luma, rgb_to_ycbcr
from .y_uint8 import y_uint8_metrics


def psnr_float_y(y, gt, scale):
    """The paper's secondary protocol: PSNR of the *float* output Y (clipped to [0, 1], not rounded) against the HR
    Y, both BT.601 in [0, 1], crop = scale. ``y``: 1x1xHxW; ``gt``: the HR as 1x3xHxW RGB in [0, 1]."""
    gt_y = rgb_to_ycbcr(gt.detach().cpu().double())[:, :1]
    diff = (y.double().cpu().clamp(0, 1) - gt_y)[..., scale:-scale, scale:-scale]
    return float(10 * torch.log10(1 / diff.pow(2).mean()))


def image_metrics(output, lq, gt, scale, operator):
    """The protocol's numbers for one image (batch of one).

    Args:
        output (Tensor): 1x3xHxW RGB (or 1x1xHxW Y) network output in [0, 1], float, not rounded.
        lq (Tensor): The LR input b, 1x3xhxw (or 1x1xhxw).
        gt (Tensor | None): The HR, 1x3xHxW RGB in [0, 1] (as BasicSR's datasets give it), or None.
        scale (int): The crop border of PSNR/SSIM.
        operator: The measurement operator A (``residual_norm``).

    Returns:
        dict: ``fidelity`` (||A x - b||_2 on Y in [0, 1] of the float output) and, with ``gt``: ``psnr`` / ``ssim``
        (the output's Y rounded to uint8, the tables' protocol), ``psnr_rgb_uint8`` / ``ssim_rgb_uint8`` (the RGB
        output rounded to uint8 by ``tensor2img``, Y in float: BasicSR's own validation metric) and
        ``psnr_float_y``.
    """
    if output.shape[0] != 1:
        raise ValueError(f'image_metrics measures one image at a time, got a batch of {output.shape[0]}.')
    y, b = luma(output.double()), luma(lq.double())
    out = {'fidelity': float(operator.residual_norm(y, b)[0])}
    if gt is None:
        return out
    # tensor2img clamps in place (on CPU tensors): hand it copies
    gt_img = tensor2img([gt.detach().cpu().clone()])
    sr_img = tensor2img([output.detach().cpu().clone()])
    out['psnr'], out['ssim'] = y_uint8_metrics(y, gt_img, scale)
    out['psnr_rgb_uint8'] = calculate_psnr(sr_img, gt_img, crop_border=scale, test_y_channel=True)
    out['ssim_rgb_uint8'] = calculate_ssim(sr_img, gt_img, crop_border=scale, test_y_channel=True)
    out['psnr_float_y'] = psnr_float_y(y, gt, scale)
    return out
