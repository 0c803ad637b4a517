import torch
from torch import nn
from torch.nn import functional as F

from mcnet_basicsr.utils.registration import ARCH_REGISTRY


class _PixelAttention(nn.Module):
    """Pixel attention: a 1x1 convolution and a sigmoid give one gate per pixel and channel."""

    def __init__(self, num_feat):
        super().__init__()
        self.conv = nn.Conv2d(num_feat, num_feat, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.conv(x))


class _PixelAttentionConv(nn.Module):
    """The attention branch of an SCPA block: a 3x3 convolution gated by pixel attention, then a 3x3 convolution."""

    def __init__(self, num_feat):
        super().__init__()
        self.k2 = nn.Conv2d(num_feat, num_feat, 1)
        self.k3 = nn.Conv2d(num_feat, num_feat, 3, 1, 1, bias=False)
        self.k4 = nn.Conv2d(num_feat, num_feat, 3, 1, 1, bias=False)

    def forward(self, x):
        return self.k4(self.k3(x) * torch.sigmoid(self.k2(x)))


class _SCPA(nn.Module):
    """Self-calibrated convolution with pixel attention.

    Two bias-free 1x1 convolutions split the features into halves; one half goes through a plain 3x3
    convolution, the other through the pixel-attention branch; a bias-free 1x1 convolution fuses them
    and the block's input is added.
    """

    def __init__(self, num_feat, reduction, negative_slope):
        super().__init__()
        width = num_feat // reduction
        self.conv1_a = nn.Conv2d(num_feat, width, 1, bias=False)
        self.conv1_b = nn.Conv2d(num_feat, width, 1, bias=False)
        self.k1 = nn.Sequential(nn.Conv2d(width, width, 3, 1, 1, bias=False))
        self.PAConv = _PixelAttentionConv(width)
        self.conv3 = nn.Conv2d(width * reduction, num_feat, 1, bias=False)
        self.act = nn.LeakyReLU(negative_slope, inplace=True)

    def forward(self, x):
        a = self.act(self.k1(self.act(self.conv1_a(x))))
        b = self.act(self.PAConv(self.act(self.conv1_b(x))))
        return self.conv3(torch.cat([a, b], dim=1)) + x


@ARCH_REGISTRY.register()
class PAN(nn.Module):
    """PAN: pixel attention network for efficient super-resolution.

    Paper: Efficient Image Super-Resolution Using Pixel Attention (Zhao, Kong, He, Qiao and Dong,
    ECCV Workshops 2020). RGB in [0, 1] at LR size, RGB out at HR size. A 3x3 feature convolution,
    ``num_block`` SCPA blocks and a 3x3 trunk convolution with a long skip; then, per upsampling stage
    (one for x2/x3, two x2 stages for x4), nearest-neighbour upsampling, a 3x3 convolution to
    ``num_feat_up`` channels, pixel attention and a 3x3 convolution; a last 3x3 convolution to RGB,
    added to the bilinearly upsampled input.

    Parameter names follow the authors' release (``conv_first``, ``SCPA_trunk.<i>`` with ``conv1_a``,
    ``conv1_b``, ``k1.0``, ``PAConv.k2..k4``, ``conv3``, ``trunk_conv``, ``upconv1``/``att1``/``HRconv1``
    and at x4 ``upconv2``/``att2``/``HRconv2``, ``conv_last``), so their DF2K-trained checkpoints load
    strictly (``scripts/convert_weights.py --type pan`` writes them as BasicSR checkpoints).

    Args:
        num_in_ch (int): Channel number of inputs. Default: 3.
        num_out_ch (int): Channel number of outputs. Default: 3.
        num_feat (int): Trunk feature channels. Default: 40.
        num_feat_up (int): Feature channels of the upsampling stages. Default: 24.
        num_block (int): Number of SCPA blocks. Default: 16.
        upscale (int): Upsampling factor: 2, 3 or 4. Default: 4.
        reduction (int): Split of an SCPA block's features into branches. Default: 2.
        negative_slope (float): Slope of the LeakyReLUs. Default: 0.2.
    """

    def __init__(self,
                 num_in_ch=3,
                 num_out_ch=3,
                 num_feat=40,
                 num_feat_up=24,
                 num_block=16,
                 upscale=4,
                 reduction=2,
                 negative_slope=0.2):
        super().__init__()
        if upscale not in (2, 3, 4):
            raise ValueError(f'PAN upscale must be 2, 3 or 4, got {upscale}.')
        self.upscale = upscale
        self.conv_first = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1)
        self.SCPA_trunk = nn.Sequential(*[_SCPA(num_feat, reduction, negative_slope) for _ in range(num_block)])
        self.trunk_conv = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.stage_factors = (2, 2) if upscale == 4 else (upscale, )
        in_ch = num_feat
        for i, _ in enumerate(self.stage_factors, start=1):  # the release's names: upconv1/att1/HRconv1, ...2
            self.add_module(f'upconv{i}', nn.Conv2d(in_ch, num_feat_up, 3, 1, 1))
            self.add_module(f'att{i}', _PixelAttention(num_feat_up))
            self.add_module(f'HRconv{i}', nn.Conv2d(num_feat_up, num_feat_up, 3, 1, 1))
            in_ch = num_feat_up
        self.conv_last = nn.Conv2d(num_feat_up, num_out_ch, 3, 1, 1)
        self.act = nn.LeakyReLU(negative_slope, inplace=True)

    def forward(self, x):
        fea = self.conv_first(x)
        fea = fea + self.trunk_conv(self.SCPA_trunk(fea))
        for i, factor in enumerate(self.stage_factors, start=1):
            fea = getattr(self, f'upconv{i}')(F.interpolate(fea, scale_factor=factor, mode='nearest'))
            fea = self.act(getattr(self, f'att{i}')(fea))
            fea = self.act(getattr(self, f'HRconv{i}')(fea))
        base = F.interpolate(x, scale_factor=self.upscale, mode='bilinear', align_corners=False)
        return self.conv_last(fea) + base
