"""FFDNet (Zhang, Zuo, Zhang, "FFDNet: toward a fast and flexible solution for CNN-based image denoising", IEEE TIP
2018): a denoiser told the noise level, here as the prior of PnP solvers and MCNet layers.

Written from the paper: the noisy image is split into its four 2 x 2 polyphase sub-images (pixel unshuffle), a noise
level map is appended as one more channel, a plain CNN (3x3 convolutions with bias, ReLU between) maps them to the
clean sub-images, and pixel shuffle puts them back. The default arguments build the colour model of KAIR's model zoo
(852,108 parameters), whose weights (keys ``model.<i>``) load with ``strict=True``.
"""
import torch
import torch.nn.functional as F
from torch import nn

from mcnet_basicsr.utils.registration import ARCH_REGISTRY


@ARCH_REGISTRY.register()
class FFDNet(nn.Module):
    """``forward(x, sigma)``: the denoised image of ``x`` (N, C, H, W) in [0, 1] with Gaussian noise of std ``sigma``
    (a float, or one per sample as an (N,) or (N, 1, 1, 1) tensor; [0, 1] units). Odd sides are padded (replicate)
    and cropped back.

    As MCNetArch's prior (``denoiser: {arch: FFDNet, level, path}``): ``takes_level`` tells the layer to give it its
    level, and ``colour`` whether it denoises R, G and B together (``in_ch`` 3).

    Args:
        in_ch (int): Image channels. Default: 3.
        num_feat (int): Features of the hidden layers. Default: 96.
        num_layer (int): Convolutions in all. Default: 12.
    """

    takes_level = True

    def __init__(self, in_ch=3, num_feat=96, num_layer=12):
        super().__init__()
        self.in_ch = in_ch
        layers = [nn.Conv2d(4 * in_ch + 1, num_feat, 3, 1, 1), nn.ReLU(inplace=True)]
        for _ in range(num_layer - 2):
            layers += [nn.Conv2d(num_feat, num_feat, 3, 1, 1), nn.ReLU(inplace=True)]
        layers.append(nn.Conv2d(num_feat, 4 * in_ch, 3, 1, 1))
        self.model = nn.Sequential(*layers)

    @property
    def colour(self):
        """Whether it denoises the three channels of an RGB image together."""
        return self.in_ch == 3

    def forward(self, x, sigma):
        h, w = x.shape[-2:]
        x = F.pad(x, (0, w % 2, 0, h % 2), mode='replicate')
        sub = F.pixel_unshuffle(x, 2)
        sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device).reshape(-1, 1, 1, 1)
        level = sigma.expand(sub.shape[0], 1, *sub.shape[-2:])
        return F.pixel_shuffle(self.model(torch.cat([sub, level], dim=1)), 2)[..., :h, :w]
