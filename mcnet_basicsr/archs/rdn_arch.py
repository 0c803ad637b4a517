import re

import torch
from torch import nn

from mcnet_basicsr.utils.checkpoint import strip_key_prefix
from mcnet_basicsr.utils.registration import ARCH_REGISTRY


class _DenseLayer(nn.Module):
    """3x3 conv + ReLU whose output is concatenated to its input (growth channels)."""

    def __init__(self, in_ch, growth):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, growth, 3, 1, 1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return torch.cat([x, self.relu(self.conv(x))], dim=1)


class _RDB(nn.Module):
    """Residual dense block: C dense layers, 1x1 local feature fusion, local residual."""

    def __init__(self, num_feat, growth, num_layer):
        super().__init__()
        self.layers = nn.Sequential(*[_DenseLayer(num_feat + i * growth, growth) for i in range(num_layer)])
        self.lff = nn.Conv2d(num_feat + num_layer * growth, num_feat, 1)

    def forward(self, x):
        return x + self.lff(self.layers(x))


@ARCH_REGISTRY.register()
class RDN(nn.Module):
    """Residual Dense Network.

    Paper: Residual Dense Network for Image Super-Resolution (Zhang et al., CVPR 2018).

    Parameter names follow the PyTorch port yjn870/RDN-pytorch (``sfe1``, ``sfe2``,
    ``rdbs.<i>.layers.<j>.conv``, ``rdbs.<i>.lff``, ``gff.0``, ``gff.1``, ``upscale.<k>``,
    ``output``), so its checkpoints load with ``strict=True``; checkpoints of the official
    implementation (EDSR-PyTorch ``rdn.py``) load after :func:`convert_rdn_state_dict`. Where the
    two differ for growth != num_feat, this class follows the official one (each block outputs
    num_feat channels; the upsampler keeps num_feat channels); with the standard configuration
    (num_feat = growth = 64) the layouts are identical.

    Inputs are RGB in [0, 1]; they are scaled by ``img_range`` (and the mean removed if
    ``rgb_mean`` is given) before the network, and mapped back after it.

    Args:
        num_in_ch (int): Channel number of inputs. Default: 3.
        num_out_ch (int): Channel number of outputs. Default: 3.
        num_feat (int): Feature channels G0. Default: 64.
        num_block (int): Number of residual dense blocks D. Default: 16.
        num_layer (int): Conv layers per block C. Default: 8.
        growth (int): Growth rate G. Default: 64.
        upscale (int): Upsampling factor, 2, 3 or 4 (x4 = two x2 PixelShuffle stages). Default: 4.
        img_range (float): Range the network sees: 255 for the official RDN weights (inputs in
            [0, 255]), 1 for yjn870-trained weights (inputs in [0, 1]). Default: 255.
        rgb_mean (list[float] | None): Mean (in [0, 1]) subtracted before and added after the
            network, as in basicsr's EDSR/RCAN; None subtracts nothing (as in the official RDN).
            Default: None.
    """

    def __init__(self,
                 num_in_ch=3,
                 num_out_ch=3,
                 num_feat=64,
                 num_block=16,
                 num_layer=8,
                 growth=64,
                 upscale=4,
                 img_range=255.,
                 rgb_mean=None):
        super().__init__()
        if upscale not in (2, 3, 4):
            raise ValueError(f'Unsupported upscale {upscale}. Supported ones are: 2, 3, 4.')
        self.upscale_factor = upscale
        self.img_range = img_range
        if rgb_mean is None:
            self.mean = None
        else:
            if len(rgb_mean) != num_in_ch or num_in_ch != num_out_ch:
                raise ValueError(f'rgb_mean {rgb_mean} needs num_in_ch == num_out_ch == len(rgb_mean).')
            self.register_buffer('mean', torch.tensor(rgb_mean, dtype=torch.float32).view(1, -1, 1, 1),
                                 persistent=False)

        self.sfe1 = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1)
        self.sfe2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.rdbs = nn.ModuleList([_RDB(num_feat, growth, num_layer) for _ in range(num_block)])
        self.gff = nn.Sequential(nn.Conv2d(num_block * num_feat, num_feat, 1), nn.Conv2d(num_feat, num_feat, 3, 1, 1))
        stages = [2, 2] if upscale == 4 else [upscale]
        up = []
        for r in stages:
            up += [nn.Conv2d(num_feat, num_feat * r * r, 3, 1, 1), nn.PixelShuffle(r)]
        self.upscale = nn.Sequential(*up)
        self.output = nn.Conv2d(num_feat, num_out_ch, 3, 1, 1)

    def forward(self, x):
        if self.mean is not None:
            x = x - self.mean
        x = x * self.img_range
        shallow = self.sfe1(x)
        feat = self.sfe2(shallow)
        block_outputs = []
        for rdb in self.rdbs:
            feat = rdb(feat)
            block_outputs.append(feat)
        feat = self.gff(torch.cat(block_outputs, dim=1)) + shallow
        x = self.output(self.upscale(feat)) / self.img_range
        if self.mean is not None:
            x = x + self.mean
        return x


_OFFICIAL_RULES = (
    (re.compile(r'SFENet([12])\.(weight|bias)$'), r'sfe\1.\2'),
    (re.compile(r'RDBs\.(\d+)\.convs\.(\d+)\.conv\.0\.(weight|bias)$'), r'rdbs.\1.layers.\2.conv.\3'),
    (re.compile(r'RDBs\.(\d+)\.LFF\.(weight|bias)$'), r'rdbs.\1.lff.\2'),
    (re.compile(r'GFF\.([01])\.(weight|bias)$'), r'gff.\1.\2'),
)
_UPNET = re.compile(r'UPNet\.(\d+)\.(weight|bias)$')


def convert_rdn_state_dict(state_dict):
    """Map an official RDN state dict (EDSR-PyTorch ``rdn.py``) onto :class:`RDN`'s key layout.

    ``SFENet{1,2}`` -> ``sfe{1,2}``, ``RDBs.<i>.convs.<j>.conv.0`` -> ``rdbs.<i>.layers.<j>.conv``,
    ``RDBs.<i>.LFF`` -> ``rdbs.<i>.lff``, ``GFF.<k>`` -> ``gff.<k>``; in ``UPNet`` the last conv
    becomes ``output`` and the others keep their index under ``upscale``. A ``module.`` prefix
    (DataParallel) is removed. Tensors are not copied. Official RDN weights expect
    ``img_range=255`` and ``rgb_mean=None``.

    Args:
        state_dict (dict[str, Tensor]): Official-layout state dict.

    Returns:
        dict[str, Tensor]: State dict for :class:`RDN` (load it with ``strict=True``).

    Raises:
        KeyError: For a key that is not part of the official layout.
    """
    state_dict = strip_key_prefix(state_dict, 'module.')
    up_indices = sorted({int(m.group(1)) for m in map(_UPNET.match, state_dict) if m})
    if not up_indices:
        raise KeyError('No UPNet.* keys: this is not an official RDN state dict.')
    converted = {}
    for key, value in state_dict.items():
        up = _UPNET.match(key)
        if up:
            index, param = int(up.group(1)), up.group(2)
            new_key = f'output.{param}' if index == up_indices[-1] else f'upscale.{index}.{param}'
        else:
            for pattern, replacement in _OFFICIAL_RULES:
                if pattern.match(key):
                    new_key = pattern.sub(replacement, key)
                    break
            else:
                raise KeyError(f'Unexpected key {key!r} for the official RDN layout (SFENet1/2, '
                               'RDBs.<i>.convs.<j>.conv.0, RDBs.<i>.LFF, GFF.0/1, UPNet.<k>).')
        converted[new_key] = value
    return converted
