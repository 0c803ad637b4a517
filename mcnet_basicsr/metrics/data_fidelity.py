import numpy as np
import torch
from basicsr.utils.registry import METRIC_REGISTRY

from mcnet_basicsr.ops import build_operator
from mcnet_basicsr.utils.color import luma


def _to_tensor(img, input_order='HWC'):
    """Image -> float64 NCHW tensor in [0, 1], RGB (or one channel).

    numpy images follow BasicSR's conventions (HWC or CHW, BGR, uint8 in [0, 255] or float in
    [0, 1]); tensors are taken as RGB (N)CHW in [0, 1].
    """
    if torch.is_tensor(img):
        t = img.detach().to(torch.float64)
        return t.unsqueeze(0) if t.dim() == 3 else t
    arr = np.asarray(img)
    arr = arr.astype(np.float64) / (255.0 if arr.dtype == np.uint8 else 1.0)
    if arr.ndim == 2:
        arr = arr[None]
    elif input_order == 'HWC':
        arr = arr.transpose(2, 0, 1)
    t = torch.from_numpy(np.ascontiguousarray(arr)).unsqueeze(0)
    return t.flip(1) if t.shape[1] == 3 else t  # BGR -> RGB


def data_fidelity(x, b, operator):
    """||A x - b||_2 per image (float tensor (N,)): x the SR result, b the LR, both Y in [0, 1]."""
    return operator.residual_norm(x, b)


@METRIC_REGISTRY.register()
def calculate_data_fidelity(img, img2, scale=None, lq=None, operator='bicubic', input_order='HWC'):
    """Measurement consistency ``||A x - b||_2`` on Y (BT.601) in [0, 1].

    ``img`` is the SR output x. ``b`` is ``lq`` when given; otherwise it is regenerated from the
    ground truth ``img2`` exactly as the evaluation data are made (A applied to the RGB HR, rounded
    to uint8, then Y), which is what BasicSR's validation loop can offer a metric (it passes only
    the output and the ground truth). Note that in that loop ``img`` is the *uint8-quantised*
    output, so the value includes the quantisation of x (typically 1e-2..1e-1 per image); the
    float fidelity of the layer itself is logged by MCNetModel as ``fidelity_float``.

    Args:
        img (ndarray | Tensor): SR image, HWC BGR uint8/float (BasicSR convention) or NCHW RGB tensor.
        img2 (ndarray | Tensor): Ground-truth HR image, same conventions (unused when ``lq`` given).
        scale (int): Downsampling factor of A. Required.
        lq (ndarray | Tensor | None): The LR input, same conventions. Default: None.
        operator (str | dict): Operator type or options for ``build_operator``. Default: 'bicubic'.
        input_order (str): 'HWC' or 'CHW' for numpy inputs. Default: 'HWC'.

    Returns:
        float: The fidelity of one image (mean over a batch).
    """
    if scale is None:
        raise ValueError('calculate_data_fidelity needs `scale` (the downsampling factor of A).')
    op_opt = {'type': operator, 'scale': scale} if isinstance(operator, str) else dict(operator, scale=scale)
    op = build_operator(op_opt)
    x = luma(_to_tensor(img, input_order))
    if lq is not None:
        b = luma(_to_tensor(lq, input_order))
    else:  # the evaluation protocol: LR = uint8(A hr), round half up
        lr = torch.floor(op(_to_tensor(img2, input_order)).clamp(0, 1) * 255.0 + 0.5) / 255.0
        b = luma(lr)
    return float(data_fidelity(x, b, op).mean())
