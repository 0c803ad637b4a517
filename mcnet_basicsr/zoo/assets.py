"""Third-party data and weights: one manifest (``assets.yml``), fetched with checksums.

Every file the option files use and this project did not make itself -- the Set5 / Set14 / T91 /
BSD200 HR images and the official SRCNN, DnCNN, IMDN and PAN weights -- is listed once in
``mcnet_basicsr/zoo/assets.yml``: its public source (a GitHub repository pinned to a commit and a path
there), its download URL, its SHA256 and where it goes under the repository root
(``datasets/<Name>/HR/``, ``experiments/pretrained_models/``). :func:`fetch` downloads the files
(or copies them from a local folder laid out like the manifest's ``mirror`` paths), verifies each
checksum before the file takes its final name, and runs the weight converters where an entry says
``convert``. Nothing in the package downloads anything implicitly; ``scripts/fetch_assets.py`` is
the command line.

Checksums: ``sha256`` is the hash of the file's bytes. ``sha256_pixels`` (T91, whose upstream
files are BMP while the data sets here are PNG) is :func:`pixel_sha256` of the decoded image:
the file is decoded with Pillow, its pixels are checked and it is written as a lossless PNG.

Writes are atomic (a temporary file in the destination folder, renamed when verified), a file
already present with the right checksum is skipped, and nothing is replaced without ``force``.
"""
import hashlib
import http.client
import os
import os.path as osp
import shlex
import shutil
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

from ..utils.paths import SHIPPED_WEIGHTS_DIR, relative_to, resolve_path, shipped_file

MANIFEST = Path(__file__).with_name('assets.yml')
RAW_BASE = 'https://raw.githubusercontent.com'
KINDS = ('dataset', 'weights')
CHUNK = 1 << 16
TIMEOUT_S = 60
# the repository's scripts/ (fetch_assets.py, prepare_datasets.py, ...) beside the package, in a clone
REPO_DIR = Path(__file__).resolve().parents[2]


class AssetError(Exception):
    """A problem with the manifest, a source or a destination; its message is one line for the user."""


@dataclass(frozen=True)
class AssetFile:
    """One file of an asset; paths relative to the repository root (``dest``) or a mirror (``mirror``)."""
    name: str
    upstream_path: str
    url: str
    dest: str
    mirror: str
    sha256: Optional[str] = None
    sha256_pixels: Optional[str] = None
    converted: Optional[str] = None


@dataclass(frozen=True)
class Asset:
    name: str
    kind: str
    description: str
    repo: str
    commit: str
    licence: str
    dest: str
    files: Tuple[AssetFile, ...]
    convert: Optional[str] = None
    out_dir: Optional[str] = None

    def raw_url(self, path):
        """The download URL of ``path`` in the pinned commit (what every ``url`` in the manifest must be)."""
        from urllib.parse import quote
        return f'{RAW_BASE}/{self.repo}/{self.commit}/{quote(path)}'

    def outputs(self):
        """Paths the asset provides (relative to the root): the converted checkpoints where it converts."""
        if self.convert:
            return [f'{self.out_dir}/{f.converted}' for f in self.files]
        return [f.dest for f in self.files]


def _require(entry, key, where):
    if key not in entry:
        raise AssetError(f'{where}: missing key {key!r}')
    return entry[key]


def load_manifest(path=MANIFEST):
    """{name: :class:`Asset`} from a manifest file, checked for the keys and values :func:`fetch` relies on."""
    import yaml
    try:
        with open(path, encoding='utf-8') as f:
            raw = yaml.safe_load(f)
    except OSError as err:
        raise AssetError(f'cannot read the asset manifest {path}: {err.strerror or err}') from None
    if not isinstance(raw, dict) or not raw:
        raise AssetError(f'{path}: expected a mapping of asset names to entries')
    assets = {}
    for name, entry in raw.items():
        where = f'{path}: {name}'
        kind = _require(entry, 'kind', where)
        if kind not in KINDS:
            raise AssetError(f'{where}: kind {kind!r}; supported ones are: {", ".join(KINDS)}')
        source = _require(entry, 'source', where)
        dest, mirror = _require(entry, 'dest', where), _require(entry, 'mirror', where)
        convert = entry.get('convert')
        files = []
        for item in _require(entry, 'files', where):
            fname = _require(item, 'name', where)
            checks = [k for k in ('sha256', 'sha256_pixels') if item.get(k)]
            if len(checks) != 1:
                raise AssetError(f'{where}: {fname} needs exactly one of sha256 / sha256_pixels')
            if convert and not item.get('converted'):
                raise AssetError(f'{where}: {fname} is converted ({convert}) but names no "converted" output')
            files.append(AssetFile(name=fname, upstream_path=_require(item, 'path', where),
                                   url=_require(item, 'url', where), dest=f'{dest}/{fname}',
                                   mirror=f'{mirror}/{item.get("mirror_name", fname)}', sha256=item.get('sha256'),
                                   sha256_pixels=item.get('sha256_pixels'), converted=item.get('converted')))
        if not files:
            raise AssetError(f'{where}: no files')
        assets[name] = Asset(name=name, kind=kind, description=entry.get('description', ''),
                             repo=_require(source, 'repo', where), commit=str(_require(source, 'commit', where)),
                             licence=_require(entry, 'licence', where), dest=dest, files=tuple(files), convert=convert,
                             out_dir=entry.get('out_dir', dest) if convert else None)
    return assets


def select(assets, names=None):
    """The assets called ``names`` (all when empty), in manifest order; unknown names are an error."""
    if not names:
        return list(assets.values())
    unknown = [n for n in names if n not in assets]
    if unknown:
        raise AssetError(f'unknown asset(s) {", ".join(unknown)}. Known ones are: {", ".join(assets)}')
    return [a for n, a in assets.items() if n in names]


# ------------------------------------------------------------------------------------ checksums
def sha256_file(path):
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(CHUNK), b''):
            h.update(block)
    return h.hexdigest()


def pixel_sha256(path):
    """SHA256 of an image's decoded pixels: Pillow mode and array shape, then the raw sample bytes.

    Equal for two files exactly when they decode (with Pillow) to the same mode, size and samples,
    whatever their container (BMP, PNG) and compression.
    """
    import numpy as np
    from PIL import Image
    with Image.open(path) as img:
        arr = np.ascontiguousarray(np.asarray(img))
        mode = img.mode
    header = f'{mode}:{"x".join(map(str, arr.shape))}:{arr.dtype.str}:'.encode()
    return hashlib.sha256(header + arr.tobytes()).hexdigest()


def checksum_of(afile, path):
    """(kind, digest) of ``path`` in the form the manifest gives for ``afile``."""
    if afile.sha256_pixels:
        try:
            return 'sha256_pixels', pixel_sha256(path)
        except Exception as err:  # noqa: BLE001  (any decoder error means: not the image we expect)
            return 'sha256_pixels', f'<not a readable image: {type(err).__name__}>'
    return 'sha256', sha256_file(path)


def is_verified(afile, path):
    kind, digest = checksum_of(afile, path)
    return digest == getattr(afile, kind)


# ------------------------------------------------------------------------------------ transfers
def download(url, target, desc=None):
    """Stream ``url`` into ``target`` with a progress bar (stderr); a short or failed transfer raises."""
    from tqdm import tqdm
    try:
        response = urllib.request.urlopen(url, timeout=TIMEOUT_S)  # noqa: S310  (http(s) URLs of the manifest)
    except urllib.error.HTTPError as err:
        raise AssetError(f'{url}: HTTP {err.code} {err.reason}') from None
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, 'reason', err)
        raise AssetError(f'{url}: cannot connect ({reason})') from None
    with response:
        length = response.headers.get('Content-Length')
        total = int(length) if length and length.isdigit() else None
        received = 0
        with open(target, 'wb') as out, tqdm(total=total, unit='B', unit_scale=True, unit_divisor=1024, desc=desc,
                                             leave=False, disable=None, file=sys.stderr) as bar:
            while True:
                try:
                    block = response.read(CHUNK)
                except http.client.IncompleteRead as err:  # closed before Content-Length: checked below
                    block = err.partial
                    out.write(block)
                    received += len(block)
                    break
                except (OSError, http.client.HTTPException) as err:  # reset, timeout, protocol error
                    raise AssetError(f'{url}: transfer interrupted after {received} bytes ({type(err).__name__})') \
                        from None
                if not block:
                    break
                out.write(block)
                received += len(block)
                bar.update(len(block))
    if total is not None and received != total:
        raise AssetError(f'{url}: transfer interrupted: {received} of {total} bytes')


def _write_png(src, target):
    """Lossless PNG of the image ``src`` (mode kept)."""
    from PIL import Image
    with Image.open(src) as img:
        img.load()
        img.save(target, format='PNG')


def _same_format_as_dest(src, dest):
    from PIL import Image
    with Image.open(src) as img:
        fmt = (img.format or '').lower()
    return osp.splitext(dest)[1].lower().lstrip('.') in {fmt, {'jpeg': 'jpg'}.get(fmt, fmt)}


def fetch_file(afile, root, mirror=None, base_url=None, force=False):
    """Put ``afile`` at ``root/afile.dest``; returns 'present' (already there, verified) or 'fetched'.

    The bytes go to a temporary file beside the destination, are verified, and only then renamed to
    it; on any failure the temporary file is deleted and the destination is left as it was.
    """
    target = Path(root) / afile.dest
    if target.exists():
        if is_verified(afile, target) and not force:
            return 'present'
        if not force:
            raise AssetError(f'{target} exists with other content than the manifest\'s {afile.name}; '
                             'pass --force to replace it')
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.parent / f'.{target.name}.{os.getpid()}.part'
    png = target.parent / f'.{target.name}.{os.getpid()}.png'
    try:
        if mirror is not None:
            src = Path(mirror) / afile.mirror
            if not src.is_file():
                raise AssetError(f'{src}: not found in the local copy given with --from '
                                 f'(expected {afile.mirror} under it)')
            shutil.copyfile(src, part)
            origin = str(src)
        else:
            url = afile.url if base_url is None else base_url.rstrip('/') + afile.url[len(RAW_BASE):]
            download(url, part, desc=afile.name)
            origin = url
        kind, digest = checksum_of(afile, part)
        if digest != getattr(afile, kind):
            raise AssetError(f'{origin}: checksum mismatch for {afile.name} ({kind} {digest}, the manifest says '
                             f'{getattr(afile, kind)}); deleted the partial file {part}')
        final = part
        if afile.sha256_pixels and not _same_format_as_dest(part, afile.dest):
            _write_png(part, png)
            if pixel_sha256(png) != afile.sha256_pixels:  # the re-encoded file must hold the same pixels
                raise AssetError(f'{png}: pixels changed when writing PNG; deleted it')
            final = png
        os.replace(final, target)
    finally:
        for tmp in (part, png):
            if tmp.exists():
                tmp.unlink()
    return 'fetched'


def convert_asset(asset, root, force=False):
    """Run the asset's converter on its fetched files; returns the written checkpoints (existing ones are kept)."""
    from .convert import ConversionError, convert_weights  # the package's one converter
    written = []
    for afile in asset.files:
        out = Path(root) / asset.out_dir / afile.converted
        if out.exists() and not force:
            continue
        try:
            written += convert_weights(asset.convert, str(Path(root) / afile.dest), str(out.parent),
                                       name=afile.converted, force=force)
        except ConversionError as err:
            raise AssetError(f'{asset.name}: converting {afile.dest} ({asset.convert}) failed: {err}') from None
    return [Path(p) for p in written]


def fetch(names=None, root='.', mirror=None, base_url=None, force=False, manifest=MANIFEST, log=print):
    """Fetch the assets ``names`` (all when None) into ``root``; returns the list of failures (messages).

    Args:
        names (list[str] | None): Asset names from the manifest. Default: None (all).
        root (str | Path): Repository root the manifest's ``dest`` paths are relative to. Default: '.'.
        mirror (str | Path | None): Copy from this folder (laid out like the manifest's ``mirror`` paths)
            instead of downloading. Default: None.
        base_url (str | None): Replaces ``https://raw.githubusercontent.com`` in the URLs (a mirror
            server with the same layout). Default: None.
        force (bool): Replace files (and converted checkpoints) that are present. Default: False.
        manifest (str | Path): The manifest file. Default: the package's ``assets.yml``.
        log (callable): Progress lines. Default: print.
    """
    if mirror is not None and not Path(mirror).is_dir():
        raise AssetError(f'--from {mirror}: not a folder')
    assets = select(load_manifest(manifest), names)
    failures = []
    for asset in assets:
        counts = {'present': 0, 'fetched': 0}
        errors = []
        for afile in asset.files:
            try:
                counts[fetch_file(afile, root, mirror, base_url, force)] += 1
            except AssetError as err:
                errors.append(str(err))
            except OSError as err:
                errors.append(f'{afile.dest}: {err.strerror or err}')
        failures += errors
        line = f'{asset.name}: {counts["fetched"]} fetched, {counts["present"]} already present'
        if errors:  # one line per asset, with its first error (a network outage fails every file alike)
            more = f' (and {len(errors) - 1} more)' if len(errors) > 1 else ''
            print(f'error: {line}, {len(errors)} failed -> {asset.dest}/; first: {errors[0]}{more}', file=sys.stderr,
                  flush=True)
        else:
            log(f'{line} -> {asset.dest}/')
        if asset.convert and not errors:
            try:
                written = convert_asset(asset, root, force=force)
            except AssetError as err:
                print(f'error: {err}', file=sys.stderr, flush=True)
                failures.append(str(err))
                continue
            if written:
                log(f'{asset.name}: converted ({asset.convert}) -> {", ".join(str(p) for p in written)}')
    return failures


def missing_outputs(asset, root):
    """The asset's outputs (see :meth:`Asset.outputs`) that are not under ``root``."""
    return [p for p in asset.outputs() if not (Path(root) / p).exists()]


# ------------------------------------------------------------------------------------ option files
def option_inputs(opt):
    """[(key, path)] of the files and folders an option dict reads: data roots, backbone / denoiser / start /
    network weights."""
    found = []
    for ds_key, ds in (opt.get('datasets') or {}).items():
        for key in ('dataroot_gt', 'dataroot_lq'):
            if isinstance(ds, dict) and ds.get(key):
                found.append((f'datasets.{ds_key}.{key}', str(ds[key])))
    net = opt.get('network_g') or {}
    for key in ('backbone', 'denoiser', 'start'):  # the groups that name a checkpoint as their path
        group = net.get(key)
        if isinstance(group, dict) and group.get('path') and (key != 'backbone' or 'net' in group):
            found.append((f'network_g.{key}.path', str(group['path'])))
    path_opt = opt.get('path') or {}
    if path_opt.get('pretrain_network_g'):
        found.append(('path.pretrain_network_g', str(path_opt['pretrain_network_g'])))
    return found


def script_command(name, *args):
    """``python <scripts/name> args...`` as it runs from the current folder: the script's path relative to the current
    folder when it lies under it (``scripts/fetch_assets.py`` in the repository root), else absolute."""
    script = REPO_DIR / 'scripts' / name
    if not script.is_file():  # the package without its repository: the script of a clone
        return ' '.join(['python', f'scripts/{name}', *args])
    try:
        shown = script.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        shown = str(script)
    return ' '.join(['python', shlex.quote(shown), *args])


def fetch_command(names, root='.'):
    """The command, run from the current folder, that puts the assets ``names`` under ``root`` (as typed there:
    ``root/datasets/<Name>/HR``, ``root/experiments/pretrained_models``); ``--root`` is left out where it is
    fetch_assets.py's default, the repository root."""
    args = list(names)
    if Path(root).resolve() != REPO_DIR:
        args += ['--root', shlex.quote(str(root))]
    return script_command('fetch_assets.py', *args)


def how_to_make(path, manifest=None):
    """The command that makes ``path`` (as an option file names it, relative to the current folder) when run from the
    current folder, or a sentence saying where it comes from."""
    import re
    parts = Path(path).as_posix().split('/')
    manifest = load_manifest() if manifest is None else manifest
    for asset in manifest.values():
        if path in asset.outputs():
            return fetch_command([asset.name])
    datasets = {a.name for a in manifest.values() if a.kind == 'dataset'}
    # a folder name joins data set names with '_'; '<Name>_half' is prepare_datasets.py --half's
    names = re.findall(r'[^_]+(?:_half)?', parts[1]) if len(parts) >= 3 and parts[0] == 'datasets' else []
    sources = [name.removesuffix('_half') for name in names]
    halves = [source for name, source in zip(names, sources) if name != source]
    if names and set(sources) <= datasets:
        fetch_cmd = '' if all(Path('datasets', n, 'HR').is_dir() for n in sources) else f'{fetch_command(sources)} && '
        lmdb = re.fullmatch(r'.*_sub_x(\d+)\.lmdb', parts[-1])
        folder = re.fullmatch(r'(?:HR_mod|X)(\d+)', parts[-1])
        half = ['--half', *halves] if halves else []
        if lmdb:  # prepare_datasets.py reads and writes ./datasets by default
            args = ['--eval-sets', '--train-sets', '+'.join(names), '--scales', lmdb.group(1), *half]
        elif folder and not halves:
            args = ['--eval-sets', parts[1], '--train-sets', '--scales', folder.group(1)]
        else:
            args = ['--eval-sets', '--train-sets', *half] if halves else []
        return fetch_cmd + script_command('prepare_datasets.py', *args)
    stem = Path(path).stem
    if Path('options', f'train_{stem}.yml').is_file():
        return f'python -m mcnet_basicsr.train -opt options/train_{stem}.yml trains it'
    if shipped_file(path) is not None:
        return f'the installed package has no such file in {SHIPPED_WEIGHTS_DIR}; reinstall mcnet_basicsr or fix ' \
               'the path'
    if parts[0] == 'experiments' and 'pretrained_models' in parts:
        out = [] if Path.cwd().resolve() == REPO_DIR else ['--out-dir', shlex.quote(str(Path(path).parent))]
        return f'convert your copy of the official weights with {script_command("convert_weights.py", *out)} (see ' \
               "the option file's header)"
    return 'no command in this repository makes it'


def missing_option_inputs(opt):
    """[(key, path, how to make it)] for the inputs of ``opt`` (see :func:`option_inputs`) that do not exist where
    the package reads them (:func:`mcnet_basicsr.utils.paths.resolve_path`: relative to the current folder, shipped
    weights from the installed package)."""
    missing = [(key, path) for key, path in option_inputs(opt) if not osp.exists(resolve_path(path))]
    if not missing:
        return []
    manifest = load_manifest()
    return [(key, path, how_to_make(path, manifest)) for key, path in missing]


def _apply_force_yml(opt, items):
    """BasicSR's ``--force_yml key:sub=value`` overrides, so the check sees the paths BasicSR will use (values read
    by BasicSR's own rules: ``!!float1e-4``, ``~``, ``[1, 2]``...)."""
    from basicsr.utils.options import _postprocess_yml_value
    for item in items or ():
        keys, _, value = item.partition('=')
        *parents, last = keys.strip().split(':')
        node = opt
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node[last] = _postprocess_yml_value(value.strip())


def check_option_file_inputs(argv):
    """Exit with one line per missing input (path, option key, the command that makes it) when the option file
    that a BasicSR-style command line ``argv`` names (``-opt FILE [--force_yml ...]``) reads missing files.

    Runs before BasicSR builds anything, so a fresh clone gets a sentence instead of a traceback from deep in a
    data loader. An option file that cannot be read is left to BasicSR's own error.
    """
    import argparse

    import yaml
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument('-opt')
    parser.add_argument('--force_yml', nargs='+', default=None)
    args, _ = parser.parse_known_args(argv)
    if not args.opt or not osp.isfile(args.opt):
        return
    with open(args.opt, encoding='utf-8') as f:
        opt = yaml.safe_load(f)
    if not isinstance(opt, dict):
        return
    _apply_force_yml(opt, args.force_yml)
    exit_if_inputs_missing(opt, args.opt)


def exit_if_inputs_missing(opt, label):
    """Print ``error: <label>: <path> (<key>[, relative to the current folder <cwd>]) is missing; <command>`` per
    missing input and exit(2), if any."""
    missing = missing_option_inputs(opt)
    for key, path, how in missing:
        where = ', '.join(filter(None, (key, relative_to(path))))
        print(f'error: {label}: {path} ({where}) is missing; {how}', file=sys.stderr)
    if missing:
        sys.exit(2)
