"""The project's primary PSNR/SSIM protocol: the output's Y channel rounded to uint8.

Not a METRIC_REGISTRY entry: BasicSR's validation hands a metric the output after ``tensor2img`` has
rounded its *RGB* channels, from which the float Y cannot be recovered. Validation (``ProtocolSRModel``,
``MCNetModel``) computes it on the float output itself (``image_metrics``); the tables are made from that.
"""
import numpy as np
from basicsr.metrics import calculate_psnr, calculate_ssim
from basicsr.utils.color_util import bgr2ycbcr


def y_uint8_metrics(y, gt_img, crop_border):
    """PSNR and SSIM of the output's *Y channel quantised to uint8* (a Y-channel method's own uint8 output)
    against BasicSR's Y of the uint8 HR (float), with BasicSR's ``calculate_psnr`` / ``calculate_ssim``.

    The protocol of the literature's SRCNN numbers and of DESIGN.md's reference table (crop_border = scale;
    docs/results.md, "Protocol"). BasicSR's validation rounds RGB instead (``tensor2img``) and reads a little
    higher.

    Args:
        y (Tensor): 1x1xHxW, the output's Y (BT.601) in [0, 1], float.
        gt_img (ndarray): The HR as HxWx3 BGR uint8 (BasicSR's convention).
        crop_border (int): Pixels cropped at each edge (the scale, in this project's protocol).

    Returns:
        tuple[float, float]: PSNR (dB) and SSIM.
    """
    if y.dim() != 4 or y.shape[:2] != (1, 1):
        raise ValueError(f'y_uint8_metrics takes one Y image of shape 1x1xHxW, got {tuple(y.shape)}.')
    y_u8 = np.round(np.clip(y[0, 0].double().cpu().numpy() * 255.0, 0, 255))[..., None]
    gt_y = bgr2ycbcr(gt_img.astype(np.float32) / 255.0, y_only=True)[..., None] * 255.0
    # test_y_channel=False: both are Y already (a one-channel image is not converted anyway)
    return (calculate_psnr(y_u8, gt_y, crop_border=crop_border, input_order='HWC', test_y_channel=False),
            calculate_ssim(y_u8, gt_y, crop_border=crop_border, input_order='HWC', test_y_channel=False))
