"""Convert third-party backbone weights into BasicSR checkpoints ``{'params': state_dict}`` for our archs.

Kinds (``convert_weights(kind, ...)``; ``python scripts/convert_weights.py --type KIND FILE...``):

    srcnn_mat   original SRCNN MATLAB release (srcnn_*.mat) -> SRCNN, padding_mode 'replicate'
    srcnn_pth   MCNet authors' SRCNN state dicts (conv{1,2,3}.*) -> SRCNN, padding_mode 'zeros'
    rdn         official RDN (EDSR-PyTorch, SFENet1/RDBs/GFF/UPNet) or yjn870 RDN-pytorch
                (sfe1/rdbs/gff/upscale/output) state dict -> RDN
    rcan        official RCAN (yulunzhang/RCAN, EDSR-PyTorch: head/body/tail, e.g. RCAN_BIX2.pt)
                -> basicsr's RCAN (conv_first/body.<g>.residual_group/.../conv_last)
    imdn        official IMDN (Zheng222/IMDN, IMDN_x<s>.pth, ``module.`` keys) -> IMDN, written as imdn_x<s>.pth
    pan         official PAN (zhaohengyuan1/PAN, PANx<s>_DF2K.pth) -> PAN, written as pan_x<s>.pth; the scale
                comes from the file name (x2 and x3 weights have the same shapes)
    usrnet      official USRNet (cszn/USRNet model zoo, e.g. usrnet_tiny.pth, a bare state dict) -> USRNet; the
                prior's widths, blocks per level and iterations come from the tensors' shapes
    ffdnet      KAIR's FFDNet (``model.<i>`` keys, e.g. ffdnet_color.pth, a legacy torch.save) -> FFDNet

Adding a kind is one function ``path -> (state_dict, net, options)`` and one entry in :data:`CONVERTERS`.
Every converted state dict is loaded into its arch with ``strict=True`` before anything is written; nothing
is written if any input fails.
"""
import logging
import os
import os.path as osp
import re
from pathlib import Path

import torch
from basicsr.archs.rcan_arch import RCAN

from mcnet_basicsr.archs.ffdnet_arch import FFDNet
from mcnet_basicsr.archs.imdn_arch import IMDN
from mcnet_basicsr.archs.pan_arch import PAN
from mcnet_basicsr.archs.rdn_arch import RDN, convert_rdn_state_dict
from mcnet_basicsr.archs.srcnn_arch import SRCNN, convert_srcnn_mat, srcnn_options_from_state_dict
from mcnet_basicsr.archs.usrnet_arch import USRNet
from mcnet_basicsr.utils.checkpoint import CheckpointError, load_state_dict, strip_key_prefix

SRCNN_KEYS = {f'conv{i}.{p}' for i in (1, 2, 3) for p in ('weight', 'bias')}

logger = logging.getLogger(__name__)


class ConversionError(Exception):
    """A bad input file or request; the message names it (command lines print it without a traceback)."""


def read_state_dict(path, allow_pickle=False):
    """The tensors of a third-party torch file (bare or under ``params``), ``module.`` removed.

    ``allow_pickle``: a kind whose official release is a full pickle may pass True (the user named the file).
    """
    try:
        return load_state_dict(path, param_key='params', allow_pickle=allow_pickle)
    except CheckpointError as err:
        raise ConversionError(str(err)) from None


def convert_srcnn_mat_file(path):
    import scipy.io
    try:
        mat = scipy.io.loadmat(path)
    except Exception as err:  # noqa: BLE001  (re-raised with the file name)
        raise ConversionError(f'{path}: cannot read as a MATLAB .mat file ({err}).') from err
    try:
        state_dict = convert_srcnn_mat(mat)
    except (KeyError, ValueError) as err:
        raise ConversionError(f'{path}: {err}') from err
    options = dict(srcnn_options_from_state_dict(state_dict), padding_mode='replicate')
    return state_dict, SRCNN(**options), options


def convert_srcnn_pth_file(path):
    state_dict = read_state_dict(path)
    if set(state_dict) != SRCNN_KEYS:
        raise ConversionError(f'{path}: not an SRCNN state dict: keys {sorted(state_dict)}, '
                              f'expected {sorted(SRCNN_KEYS)}.')
    state_dict = {k: v.float().contiguous() for k, v in state_dict.items()}
    options = dict(srcnn_options_from_state_dict(state_dict), padding_mode='zeros')
    return state_dict, SRCNN(**options), options


def rdn_options_from_state_dict(state_dict):
    """RDN constructor arguments read off an (our-layout) state dict."""
    try:
        num_block = 1 + max(int(k.split('.')[1]) for k in state_dict if k.startswith('rdbs.'))
        num_layer = 1 + max(int(k.split('.')[3]) for k in state_dict if k.startswith('rdbs.0.layers.'))
        sfe1, output = state_dict['sfe1.weight'], state_dict['output.weight']
        up0 = state_dict['upscale.0.weight']
        growth = state_dict['rdbs.0.layers.0.conv.weight'].shape[0]
    except (KeyError, ValueError) as err:
        raise ConversionError(f'not an RDN state dict ({err!r} missing or malformed).') from err
    num_feat = sfe1.shape[0]
    if 'upscale.2.weight' in state_dict:
        upscale = 4
    else:
        upscale = round((up0.shape[0] / num_feat)**0.5)
    return {
        'num_in_ch': sfe1.shape[1],
        'num_out_ch': output.shape[0],
        'num_feat': num_feat,
        'num_block': num_block,
        'num_layer': num_layer,
        'growth': growth,
        'upscale': upscale,
    }


def convert_rdn_file(path):
    state_dict = read_state_dict(path)  # 'module.' removed
    if 'SFENet1.weight' in state_dict:
        logger.info('  official (EDSR-PyTorch) layout: renaming keys; use img_range 255, rgb_mean None')
        try:
            state_dict = convert_rdn_state_dict(state_dict)
        except KeyError as err:
            raise ConversionError(f'{path}: {err}') from err
    elif 'sfe1.weight' in state_dict:
        logger.info('  yjn870 layout (ours): keys kept; yjn870-trained weights expect img_range 1')
    else:
        raise ConversionError(f'{path}: neither official RDN keys (SFENet1, ...) nor yjn870 keys (sfe1, ...).')
    try:
        options = rdn_options_from_state_dict(state_dict)
    except ConversionError as err:
        raise ConversionError(f'{path}: {err}') from err
    return {k: v.float().contiguous() for k, v in state_dict.items()}, RDN(**options), options


# official RCAN key -> basicsr RCAN key; body.<g>.body.<B> (the group's last conv) and body.<G> (the conv
# after all groups) depend on the configuration and are handled in convert_rcan_state_dict
_RCAN_RULES = (
    (re.compile(r'^head\.0\.'), 'conv_first.'),
    (re.compile(r'^body\.(\d+)\.body\.(\d+)\.body\.([02])\.'), r'body.\1.residual_group.\2.rcab.\3.'),
    (re.compile(r'^body\.(\d+)\.body\.(\d+)\.body\.3\.conv_du\.0\.'), r'body.\1.residual_group.\2.rcab.3.attention.1.'),
    (re.compile(r'^body\.(\d+)\.body\.(\d+)\.body\.3\.conv_du\.2\.'), r'body.\1.residual_group.\2.rcab.3.attention.3.'),
    (re.compile(r'^tail\.0\.(\d+)\.'), r'upsample.\1.'),
    (re.compile(r'^tail\.1\.'), 'conv_last.'),
)
RCAN_MEAN = (0.4488, 0.4371, 0.4040)


def convert_rcan_state_dict(state_dict):
    """Map an official RCAN state dict (EDSR-PyTorch ``rcan.py``) onto basicsr's ``RCAN`` and read its options.

    The fixed ``sub_mean``/``add_mean`` convolutions are dropped: basicsr's RCAN subtracts ``rgb_mean`` and
    scales by ``img_range`` itself; their bias must be the DIV2K mean that basicsr uses (checked). Returns
    (state dict, RCAN options).
    """
    sd = strip_key_prefix(state_dict, 'module.')
    if 'head.0.weight' not in sd or 'tail.1.weight' not in sd:
        raise ConversionError('not an official RCAN state dict (no head.0.weight / tail.1.weight).')
    for name, sign in (('sub_mean', -1), ('add_mean', 1)):
        if f'{name}.bias' in sd:
            bias = sd[f'{name}.bias'].double() * sign / 255.0
            if not torch.allclose(bias, torch.tensor(RCAN_MEAN, dtype=torch.float64), atol=1e-4):
                raise ConversionError(f'{name} has mean {bias.tolist()}, not basicsr RCAN\'s {list(RCAN_MEAN)} '
                                      '(rgb_range 255): set rgb_mean/img_range by hand.')
    groups = sorted({int(k.split('.')[1]) for k in sd if re.match(r'^body\.\d+\.', k)})
    num_group = groups[-1]  # body.<G> is the conv after the groups
    blocks = sorted({int(k.split('.')[3]) for k in sd if re.match(r'^body\.0\.body\.\d+\.', k)})
    num_block = blocks[-1]  # body.<g>.body.<B> is the group's last conv
    converted = {}
    for key, value in sd.items():
        if key.startswith(('sub_mean.', 'add_mean.')):
            continue
        m = re.match(r'^body\.(\d+)\.(weight|bias)$', key)
        if m and int(m.group(1)) == num_group:
            converted[f'conv_after_body.{m.group(2)}'] = value
            continue
        m = re.match(r'^body\.(\d+)\.body\.(\d+)\.(weight|bias)$', key)
        if m and int(m.group(2)) == num_block:
            converted[f'body.{m.group(1)}.conv.{m.group(3)}'] = value
            continue
        for pattern, replacement in _RCAN_RULES:
            if pattern.match(key):
                converted[pattern.sub(replacement, key)] = value
                break
        else:
            raise ConversionError(f'unexpected key {key!r} for the official RCAN layout.')
    num_feat = converted['conv_first.weight'].shape[0]
    up = converted['upsample.0.weight'].shape[0] // num_feat
    upscale = 4 if 'upsample.2.weight' in converted else round(up**0.5)
    squeeze = num_feat // converted['body.0.residual_group.0.rcab.3.attention.1.weight'].shape[0]
    options = dict(num_in_ch=converted['conv_first.weight'].shape[1], num_out_ch=converted['conv_last.weight'].shape[0],
                   num_feat=num_feat, num_group=num_group, num_block=num_block, squeeze_factor=squeeze,
                   upscale=upscale, res_scale=1, img_range=255., rgb_mean=RCAN_MEAN)
    return converted, options


def convert_rcan_file(path):
    try:
        state_dict, options = convert_rcan_state_dict(read_state_dict(path))
    except ConversionError as err:
        raise ConversionError(f'{path}: {err}') from err
    logger.info('  official RCAN layout: %s', options)
    return {k: v.float().contiguous() for k, v in state_dict.items()}, RCAN(**options), options


def _indices(state_dict, pattern):
    return {int(m.group(1)) for m in (re.match(pattern, k) for k in state_dict) if m}


def convert_imdn_file(path):
    state_dict = read_state_dict(path)  # 'module.' removed
    try:
        num_feat, num_in_ch = state_dict['fea_conv.weight'].shape[:2]
        up_ch = state_dict['upsampler.0.weight'].shape[0]
    except KeyError as err:
        raise ConversionError(f'{path}: not an IMDN state dict ({err} missing).') from err
    num_out_ch = 3 if up_ch % 3 == 0 else 1
    options = dict(num_in_ch=num_in_ch, num_out_ch=num_out_ch, num_feat=num_feat,
                   num_block=len(_indices(state_dict, r'^IMDB(\d+)\.')), upscale=round((up_ch // num_out_ch)**0.5))
    return {k: v.float().contiguous() for k, v in state_dict.items()}, IMDN(**options), options


def scale_from_name(path):
    """The scale an official release names in its file name (``..._x2.pth``, ``PANx3_...``)."""
    found = re.findall(r'x([234])(?![0-9])', osp.basename(path).lower())
    if len(set(found)) != 1:
        raise ConversionError(f'{path}: cannot read the scale from the file name (expected one of x2, x3, x4 in it, '
                              'as the official releases name them).')
    return int(found[0])


def convert_pan_file(path):
    state_dict = read_state_dict(path)
    try:
        num_feat, num_in_ch = state_dict['conv_first.weight'].shape[:2]
        num_feat_up = state_dict['upconv1.weight'].shape[0]
        num_out_ch = state_dict['conv_last.weight'].shape[0]
    except KeyError as err:
        raise ConversionError(f'{path}: not a PAN state dict ({err} missing).') from err
    scale = 4 if 'upconv2.weight' in state_dict else scale_from_name(path)
    if scale == 4 and 'upconv2.weight' not in state_dict:
        raise ConversionError(f'{path}: named x4 but has one upsampling stage (x2 or x3 weights).')
    options = dict(num_in_ch=num_in_ch, num_out_ch=num_out_ch, num_feat=num_feat, num_feat_up=num_feat_up,
                   num_block=len(_indices(state_dict, r'^SCPA_trunk\.(\d+)\.')), upscale=scale)
    return {k: v.float().contiguous() for k, v in state_dict.items()}, PAN(**options), options


def convert_usrnet_file(path):
    state_dict = read_state_dict(path)
    num_block = len(_indices(state_dict, r'^p\.m_body\.(\d+)\.'))  # m_down<i>: the blocks, then the strided conv
    try:
        channels = (state_dict['p.m_head.weight'].shape[0],) + tuple(
            state_dict[f'p.m_down{i}.{num_block}.weight'].shape[0] for i in (1, 2, 3))
        options = dict(n_iter=state_dict['h.mlp.4.weight'].shape[0] // 2, in_ch=state_dict['p.m_tail.weight'].shape[0],
                       channels=channels, num_block=num_block, hidden=state_dict['h.mlp.0.weight'].shape[0])
    except KeyError as err:
        raise ConversionError(f'{path}: not a USRNet state dict ({err} missing).') from err
    return {k: v.float().contiguous() for k, v in state_dict.items()}, USRNet(**options), options


def convert_ffdnet_file(path):
    state_dict = read_state_dict(path, allow_pickle=True)  # KAIR's releases are legacy torch.save files
    convs = sorted(_indices(state_dict, r'^model\.(\d+)\.weight$'))
    if not convs:
        raise ConversionError(f'{path}: not an FFDNet state dict (no model.<i>.weight keys).')
    first = state_dict[f'model.{convs[0]}.weight']
    options = dict(in_ch=(first.shape[1] - 1) // 4, num_feat=first.shape[0], num_layer=len(convs))
    return {k: v.float().contiguous() for k, v in state_dict.items()}, FFDNet(**options), options


CONVERTERS = {'srcnn_mat': convert_srcnn_mat_file, 'srcnn_pth': convert_srcnn_pth_file, 'rdn': convert_rdn_file,
              'rcan': convert_rcan_file, 'imdn': convert_imdn_file, 'pan': convert_pan_file,
              'usrnet': convert_usrnet_file, 'ffdnet': convert_ffdnet_file}


def output_name(kind, path):
    """Default output file name: the input's stem (srcnn_pth: plus its folder, TORCH/ and PIL/ share stems)."""
    stem = osp.splitext(osp.basename(path))[0]
    if kind in ('imdn', 'pan'):  # the names the option files read: imdn_x2.pth, pan_x4.pth
        return f'{kind}_x{scale_from_name(path)}.pth'
    if kind == 'srcnn_pth':
        stem = f'{stem}_{osp.basename(osp.dirname(osp.abspath(path))).lower()}'
    return stem + '.pth'


def _as_list(value):
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def convert_weights(kind, src, out_dir, name=None, force=False):
    """Convert ``src`` (one file or a list of files) of ``kind`` into ``out_dir``; returns the written paths.

    Args:
        kind (str): A key of :data:`CONVERTERS`.
        src (str | Path | list): Input file(s).
        out_dir (str | Path): Output folder (created).
        name (str | list | None): Output name(s), one per input; '.pth' is added when missing.
            Default: None (from the input's name, see :func:`output_name`).
        force (bool): Replace existing outputs. Default: False (refuse).
    """
    if kind not in CONVERTERS:
        raise ConversionError(f'Unknown --type {kind!r}. Supported ones are: {sorted(CONVERTERS)}.')
    inputs = _as_list(src)
    if not inputs:
        raise ConversionError(f'No input files given for --type {kind}.')
    names = None if name is None else _as_list(name)
    if names is not None and len(names) != len(inputs):
        raise ConversionError(f'--name gives {len(names)} names for {len(inputs)} inputs.')
    missing = [p for p in inputs if not osp.isfile(p)]
    if missing:
        raise ConversionError(f'Input file(s) not found: {missing}.')
    targets = [Path(out_dir) / ((n if n.endswith('.pth') else n + '.pth') if names else output_name(kind, p))
               for p, n in zip(inputs, names or inputs)]
    if len(set(targets)) != len(targets):
        raise ConversionError(f'Two inputs would be written to the same file: {[str(t) for t in targets]}. '
                              'Use --name.')
    existing = [str(t) for t in targets if t.exists()]
    if existing and not force:
        raise ConversionError(f'Refusing to overwrite {existing}; pass --force to replace them.')

    converted = []
    for i, path in enumerate(inputs, 1):
        logger.info('[%d/%d] %s (%s)', i, len(inputs), path, kind)
        state_dict, net, options = CONVERTERS[kind](path)
        try:
            net.load_state_dict(state_dict, strict=True)
        except RuntimeError as err:
            raise ConversionError(
                f'{path}: converted weights do not fit {type(net).__name__}({options}): {err}') from err
        n_params = sum(v.numel() for v in state_dict.values())
        logger.info('  loads strictly into %s(%s), %d parameters', type(net).__name__, options, n_params)
        converted.append(net.state_dict())

    os.makedirs(out_dir, exist_ok=True)
    for state_dict, target in zip(converted, targets):
        torch.save({'params': state_dict}, target)
        logger.info('wrote %s', target)
    return targets
