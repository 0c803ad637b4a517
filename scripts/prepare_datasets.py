"""Make BasicSR-ready SR data from folders of HR images.

For every evaluation set (default Set5, Set14) and scale s:
    <root>/<Name>/HR_mod<s>/<img>.png          HR mod-cropped to a multiple of s
    <root>/<Name>/LR_bicubic/X<s>/<img>.png    MATLAB bicubic downscale of it, rounded to uint8
    <root>/<Name>/LR_<degradation>/X<s>/...    with --degradation NAME: the same by another resizer (e.g. cv2-area)
    <root>/<Name>/LR_<kernel>_<i>/X<s>/...     with --kernel FILE [--kernel-index I]: circular blur by that kernel,
                                               then the upper-left pixel of each s x s block, rounded to uint8
With --half NAME: <root>/<Name>_half/HR/<img>.png, the HR images area-downscaled by 2 (cleaner images for training
denoisers: options/train_ffdnet_rgb.yml).
For every training set (default T91), sub-image patches of those pairs packed into LMDBs with
basicsr's lmdb utilities (meta_info.txt included), for ``PairedImageDataset`` with
``io_backend: {type: lmdb}``:
    <root>/<Name>/<Name>_HR_sub_x<s>.lmdb  and  <root>/<Name>/<Name>_LR_sub_x<s>.lmdb

HR images are read from <src>/<Name>/HR (default <src> = <root>, where scripts/fetch_assets.py puts
them: datasets/<Name>/HR). Gray images become 3 identical channels, an alpha
channel is dropped. Re-running with the same settings does nothing; different settings or
foreign content in an output folder is refused unless --force is given. Outputs are written to a
temporary name and renamed when complete, so an interrupted run leaves nothing half-written.

    python scripts/fetch_assets.py Set5 Set14 T91 BSD200     # datasets/<Name>/HR
    python scripts/prepare_datasets.py                       # Set5, Set14 (x2/x3/x4) + T91 LMDBs
    python scripts/prepare_datasets.py --train-sets T91 BSD200 --scales 2
    python scripts/prepare_datasets.py --train-sets T91+BSD200   # one union LMDB
    python scripts/prepare_datasets.py --eval-sets --train-sets T91+BSD200_half --scales 2 --half BSD200
    python scripts/prepare_datasets.py --eval-sets Set5 --train-sets --degradation pil-bicubic cv2-area
    python scripts/prepare_datasets.py --eval-sets CBSD68 --train-sets --kernel datasets/kernels/kernels_12.mat \
        --kernel-index 2
"""
import argparse
import hashlib
import json
import os
import os.path as osp
import shutil
import sys
import tempfile

import mcnet_basicsr  # noqa: F401  (first: the torchvision alias basicsr 1.4.2 needs)  # isort: split

import cv2
from basicsr.utils.lmdb_util import make_lmdb_from_imgs
from tqdm import tqdm

from mcnet_basicsr.data.degradations import degraded_lr_uint8
from mcnet_basicsr.ops import DEGRADATIONS, BlurDownsample, build_degradation, load_kernel
from mcnet_basicsr.utils.images import bicubic_lr, list_images, mod_crop, read_hr
from mcnet_basicsr.zoo.assets import fetch_command, load_manifest

MARKER = '.prepared.json'


def patch_origins(length, patch, step):
    """Top-left corners covering [0, length) with the last patch flush with the end."""
    if length < patch:
        return []
    origins = list(range(0, length - patch + 1, step))
    if origins[-1] != length - patch:
        origins.append(length - patch)
    return origins


def settings_digest(settings, sources):
    h = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for path in sources:
        st = os.stat(path)
        h.update(f'{osp.basename(path)}:{st.st_size}'.encode())
    return h.hexdigest()


def check_output(out_dirs, digest, force):
    """True if every output exists with this digest; raise if something else is in the way."""
    states = []
    for d in out_dirs:
        marker = osp.join(d, MARKER)
        if not osp.exists(d):
            states.append('missing')
        elif osp.isfile(marker) and json.load(open(marker)).get('digest') == digest:
            states.append('done')
        else:
            states.append('foreign')
    if all(s == 'done' for s in states):
        return True
    if 'foreign' in states or 'done' in states:
        if not force:
            clash = [d for d, s in zip(out_dirs, states) if s != 'missing']
            raise FileExistsError(f'{clash} exist(s) with other settings or content; pass --force to replace.')
        for d in out_dirs:
            if osp.exists(d):
                shutil.rmtree(d)
    return False


def commit_dir(tmp_dir, out_dir, digest, settings):
    with open(osp.join(tmp_dir, MARKER), 'w') as f:
        json.dump({'digest': digest, 'settings': settings}, f, indent=1)
    os.replace(tmp_dir, out_dir)


def prepare_eval_set(src_dir, root, name, scale, force):
    sources = list_images(src_dir)
    hr_out, lr_out = osp.join(root, name, f'HR_mod{scale}'), osp.join(root, name, 'LR_bicubic', f'X{scale}')
    settings = {'kind': 'eval', 'scale': scale, 'version': 1}
    digest = settings_digest(settings, sources)
    if check_output([hr_out, lr_out], digest, force):
        print(f'{name} x{scale}: up to date')
        return
    tmp_hr, tmp_lr = hr_out + '.tmp', lr_out + '.tmp'
    for d in (tmp_hr, tmp_lr):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    for path in tqdm(sources, desc=f'{name} x{scale}', unit='img'):
        hr = mod_crop(read_hr(path), scale)
        stem = osp.splitext(osp.basename(path))[0]
        cv2.imwrite(osp.join(tmp_hr, stem + '.png'), hr)
        cv2.imwrite(osp.join(tmp_lr, stem + '.png'), bicubic_lr(hr, scale))
    commit_dir(tmp_hr, hr_out, digest, settings)
    commit_dir(tmp_lr, lr_out, digest, settings)


def half_size(img):
    """``img`` (H, W, C uint8) area-downscaled by 2 to (H // 2, W // 2), rounded to uint8."""
    return cv2.resize(img, (img.shape[1] // 2, img.shape[0] // 2), interpolation=cv2.INTER_AREA)


def write_image_set(sources, out, settings, force, label, image_of):
    """``out``: ``image_of(path)`` (uint8) of every path of ``sources`` as ``<stem>.png``, written to a temporary
    folder and renamed when complete; nothing is done where ``out`` holds these settings already."""
    digest = settings_digest(settings, sources)
    if check_output([out], digest, force):
        print(f'{label}: up to date')
        return
    tmp = out + '.tmp'
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for path in tqdm(sources, desc=label, unit='img'):
        cv2.imwrite(osp.join(tmp, osp.splitext(osp.basename(path))[0] + '.png'), image_of(path))
    commit_dir(tmp, out, digest, settings)


def prepare_half_set(src_dir, root, name, force):
    """``<root>/<name>_half/HR``: every HR image of ``src_dir`` at half its size (:func:`half_size`)."""
    write_image_set(list_images(src_dir), osp.join(root, f'{name}_half', 'HR'), {'kind': 'half', 'version': 1}, force,
                    f'{name}_half', lambda path: half_size(read_hr(path)))


def prepare_degraded_set(src_dir, root, name, scale, label, operator, identity, force):
    """``<root>/<name>/LR_<label>/X<scale>``: the uint8 LR of every HR image (mod-cropped) under ``operator``
    (``identity``: what defines it, for the settings check)."""
    settings = {'kind': 'degraded', 'scale': scale, 'operator': identity, 'version': 1}

    def lr_of(path):
        return degraded_lr_uint8(operator, mod_crop(read_hr(path), scale))

    write_image_set(list_images(src_dir), osp.join(root, name, f'LR_{label}', f'X{scale}'), settings, force,
                    f'{name} x{scale} {label}', lr_of)


def prepare_train_set(src_dirs, root, name, scale, patch, step, force):
    """Patch LMDBs of the union of the images in ``src_dirs`` (one folder, or several for a union
    such as T91+BSD200; keys then carry the folder's set name so equal file names cannot collide)."""
    if patch % scale or step % scale:
        raise ValueError(f'--patch-size {patch} and --step {step} must be multiples of the scale {scale}.')
    if isinstance(src_dirs, str):
        src_dirs = [src_dirs]
    sources = [path for src_dir in src_dirs for path in list_images(src_dir)]
    prefix = {path: (osp.basename(osp.dirname(osp.dirname(path))) + '_' if len(src_dirs) > 1 else '')
              for path in sources}
    hr_out = osp.join(root, name, f'{name}_HR_sub_x{scale}.lmdb')
    lr_out = osp.join(root, name, f'{name}_LR_sub_x{scale}.lmdb')
    settings = {'kind': 'train', 'scale': scale, 'patch': patch, 'step': step, 'version': 1}
    digest = settings_digest(settings, sources)
    if check_output([hr_out, lr_out], digest, force):
        print(f'{name} x{scale} LMDB: up to date')
        return
    os.makedirs(osp.join(root, name), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=osp.join(root, name)) as tmp:
        hr_dir, lr_dir = osp.join(tmp, 'hr'), osp.join(tmp, 'lr')
        os.makedirs(hr_dir)
        os.makedirs(lr_dir)
        keys, skipped = [], []
        for path in tqdm(sources, desc=f'{name} x{scale} patches', unit='img'):
            hr = mod_crop(read_hr(path), scale)
            lr = bicubic_lr(hr, scale)
            stem = prefix[path] + osp.splitext(osp.basename(path))[0]
            ys, xs = patch_origins(hr.shape[0], patch, step), patch_origins(hr.shape[1], patch, step)
            if not ys or not xs:
                skipped.append(stem)
                continue
            idx = 0
            for y in ys:
                for x in xs:
                    idx += 1
                    key = f'{stem}_s{idx:03d}'
                    cv2.imwrite(osp.join(hr_dir, key + '.png'), hr[y:y + patch, x:x + patch])
                    ly, lx, lp = y // scale, x // scale, patch // scale
                    cv2.imwrite(osp.join(lr_dir, key + '.png'), lr[ly:ly + lp, lx:lx + lp])
                    keys.append(key)
        if skipped:
            print(f'{name} x{scale}: skipped {len(skipped)} image(s) smaller than {patch}px: {", ".join(skipped)}')
        if not keys:
            raise ValueError(f'{name}: no image is at least {patch}px on both sides; lower --patch-size.')
        files = [k + '.png' for k in keys]
        for data_dir, out in ((hr_dir, hr_out), (lr_dir, lr_out)):
            tmp_out = out[:-len('.lmdb')] + '.tmp.lmdb'  # basicsr insists on the suffix
            shutil.rmtree(tmp_out, ignore_errors=True)
            make_lmdb_from_imgs(data_dir, tmp_out, files, keys, batch=1000, multiprocessing_read=False)
            commit_dir(tmp_out, out, digest, settings)
    print(f'{name} x{scale}: {len(keys)} patch pairs -> {hr_out}, {lr_out}')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--root', default='datasets', help='output root (default: datasets)')
    parser.add_argument('--src', default=None, help='root of <Name>/HR input folders (default: --root)')
    parser.add_argument('--eval-sets', nargs='*', default=['Set5', 'Set14'])
    parser.add_argument('--train-sets', nargs='*', default=['T91'])
    parser.add_argument('--half', nargs='*', default=[], metavar='NAME',
                        help='also write <root>/<NAME>_half/HR: the HR images area-downscaled by 2')
    parser.add_argument('--scales', nargs='+', type=int, default=[2, 3, 4])
    parser.add_argument('--patch-size', type=int, default=96, help='HR sub-image size (multiple of every scale)')
    parser.add_argument('--step', type=int, default=48, help='HR sub-image stride (multiple of every scale)')
    parser.add_argument('--force', action='store_true', help='replace outputs made with other settings')
    parser.add_argument('--degradation', nargs='+', default=[], choices=sorted(DEGRADATIONS), metavar='NAME',
                        help='also write the eval sets\' LR made by these resizers: ' + ', '.join(DEGRADATIONS))
    parser.add_argument('--kernel', metavar='FILE', help='also write the eval sets\' LR made by this blur kernel '
                        '(.npy, .png, .mat): circular blur, then the upper-left pixel of each s x s block')
    parser.add_argument('--kernel-index', type=int, default=None, metavar='I', help='kernel of a .mat cell array')
    args = parser.parse_args(argv)
    if args.kernel_index is not None and not args.kernel:
        parser.error('--kernel-index needs --kernel')
    for s in args.scales:
        if s < 1:
            parser.error(f'--scales must be positive integers, got {s}')
    return args


def has_images(folder):
    try:
        return bool(list_images(folder))
    except FileNotFoundError:
        return False


def missing_hr_message(src, names):
    """One sentence: the HR folders of ``names`` under ``src`` that hold no images, and the command that fills them
    (scripts/fetch_assets.py for the manifest's data sets)."""
    folders = ', '.join(osp.join(src, name, 'HR') for name in names)
    known = [name for name in names if load_manifest().get(name) is not None]
    if not known:
        return f'no HR images in {folders}; put the data set\'s HR images there'
    src = osp.normpath(src)
    if osp.basename(src) == 'datasets':  # fetch_assets.py writes <root>/datasets/<Name>/HR
        how = f'fetch them with: {fetch_command(known, osp.dirname(src) or ".")}'
    else:
        how = f'fetch them with: {fetch_command(known, src)}, then pass --src {osp.join(src, "datasets")}'
    other = [name for name in names if name not in known]
    return f'no HR images in {folders}; {how}' + (f' (and put your own images for {", ".join(other)})' if other else '')


def main(argv=None):
    args = parse_args(argv)
    src = args.src or args.root
    names = dict.fromkeys(args.eval_sets + args.half + [part for spec in args.train_sets for part in spec.split('+')])
    made = {f'{name}_half' for name in args.half}  # made below, before the training sets that read them
    missing = [name for name in names if name not in made and not has_images(osp.join(src, name, 'HR'))]
    if missing:
        raise FileNotFoundError(missing_hr_message(src, missing))
    os.makedirs(args.root, exist_ok=True)
    kernel = load_kernel(args.kernel, args.kernel_index) if args.kernel else None
    kernel_label = None if kernel is None else osp.splitext(osp.basename(args.kernel))[0] + (
        '' if args.kernel_index is None else f'_{args.kernel_index}')
    for name in args.eval_sets:
        for s in args.scales:
            prepare_eval_set(osp.join(src, name, 'HR'), args.root, name, s, args.force)
            for label in args.degradation:
                prepare_degraded_set(osp.join(src, name, 'HR'), args.root, name, s, label,
                                     build_degradation(label, s), label, args.force)
            if kernel is not None:
                prepare_degraded_set(osp.join(src, name, 'HR'), args.root, name, s, kernel_label,
                                     BlurDownsample(s, kernel), hashlib.sha256(kernel.tobytes()).hexdigest(),
                                     args.force)
    for name in args.half:
        prepare_half_set(osp.join(src, name, 'HR'), args.root, name, args.force)

    for spec in args.train_sets:
        # 'T91+BSD200' is one training set made of both (datasets/T91_BSD200/T91_BSD200_*_sub_x<s>.lmdb)
        parts = spec.split('+')
        name = '_'.join(parts)
        for s in args.scales:
            # the halves are read where --half wrote them (--root), everything else from --src
            dirs = [osp.join(args.root if part in made else src, part, 'HR') for part in parts]
            prepare_train_set(dirs, args.root, name, s, args.patch_size, args.step, args.force)
    return 0


if __name__ == '__main__':
    try:
        sys.exit(main())
    except (FileNotFoundError, FileExistsError, ValueError) as err:
        print(f'error: {err}', file=sys.stderr)
        sys.exit(2)
