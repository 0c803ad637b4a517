"""scripts/fetch_assets.py and mcnet_basicsr.zoo.assets: downloads against a real HTTP server on 127.0.0.1
(good, corrupted, missing and cut-off files), copies from ../shared, idempotence and --force. No test
touches the internet: the manifest's URLs are redirected to the local server with ``base_url``."""
import hashlib
import http.server
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from conftest import REPO_ROOT, SHARED, load_script, repo_env
from mcnet_basicsr.zoo import assets
from mcnet_basicsr.zoo.assets import RAW_BASE, AssetError, fetch, load_manifest, pixel_sha256

REPO, COMMIT = 'someone/data', '0123456789abcdef0123456789abcdef01234567'
CUT_PREFIX = '/cut/'  # the server announces more bytes than it sends for these paths


class _Handler(http.server.SimpleHTTPRequestHandler):
    timeout = 10  # a stuck client cannot hold the server thread

    def do_GET(self):  # noqa: N802  (http.server's naming)
        self.server.requests.append(self.path)
        if self.path.startswith(CUT_PREFIX):
            body = (Path(self.directory) / self.path[len(CUT_PREFIX):]).read_bytes()
            self.send_response(200)
            self.send_header('Content-Length', str(len(body) + 1000))
            self.end_headers()
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        super().do_GET()

    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    """(served folder, base URL, request log); stops at the end of the test, or by itself after 120 s."""
    folder = tmp_path / 'served'
    folder.mkdir()

    def handler(*args, **kwargs):
        return _Handler(*args, directory=str(folder), **kwargs)

    httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True)
    thread.start()
    watchdog = threading.Timer(120, httpd.shutdown)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield folder, f'http://127.0.0.1:{httpd.server_address[1]}', httpd.requests
    finally:
        watchdog.cancel()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def _serve(folder, path, data):
    """Place ``data`` where the raw-URL layout <repo>/<commit>/<path> puts it; returns its URL in the manifest."""
    target = folder / REPO / COMMIT / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return f'{RAW_BASE}/{REPO}/{COMMIT}/{path}'


def _manifest(tmp_path, files, kind='weights', dest='experiments/pretrained_models'):
    """A one-asset manifest 'test' with ``files`` (dicts with name, path, url and a checksum)."""
    entry = {'kind': kind, 'description': 'test files', 'source': {'repo': REPO, 'commit': COMMIT},
             'licence': 'no licence file', 'dest': dest, 'mirror': 'weights/test', 'files': files}
    path = tmp_path / 'assets.yml'
    path.write_text(yaml.safe_dump({'test': entry}, sort_keys=False))
    return path


def _leftovers(folder):
    return sorted(p.name for p in Path(folder).rglob('*') if p.name.startswith('.'))


def test_download_good_corrupt_missing_and_cut_off(server, tmp_path):
    folder, base, requests = server
    rng = np.random.default_rng(0)
    good, corrupt, cut = (rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in (300_000, 5_000, 200_000))
    files = [
        {'name': 'good.pth', 'path': 'w/good.pth', 'url': _serve(folder, 'w/good.pth', good),
         'sha256': hashlib.sha256(good).hexdigest()},
        # the server holds other bytes than the manifest's checksum describes
        {'name': 'corrupt.pth', 'path': 'w/corrupt.pth', 'url': _serve(folder, 'w/corrupt.pth', corrupt),
         'sha256': hashlib.sha256(corrupt + b'x').hexdigest()},
        {'name': 'missing.pth', 'path': 'w/missing.pth', 'url': f'{RAW_BASE}/{REPO}/{COMMIT}/w/missing.pth',
         'sha256': '0' * 64},
    ]
    _serve(folder, 'w/cut.pth', cut)
    files.append({'name': 'cut.pth', 'path': 'w/cut.pth', 'url': f'{RAW_BASE}/cut/{REPO}/{COMMIT}/w/cut.pth',
                  'sha256': hashlib.sha256(cut).hexdigest()})
    manifest = _manifest(tmp_path, files)
    root = tmp_path / 'root'
    failures = fetch(root=root, base_url=base, manifest=manifest, log=lambda msg: None)

    out = root / 'experiments' / 'pretrained_models'
    assert (out / 'good.pth').read_bytes() == good
    assert sorted(p.name for p in out.iterdir()) == ['good.pth'], 'a failed file left something behind'
    assert len(failures) == 3, failures
    corrupt_msg, missing_msg, cut_msg = failures
    assert 'checksum mismatch' in corrupt_msg and 'corrupt.pth' in corrupt_msg and 'deleted the partial file' \
        in corrupt_msg and re.search(r'\.corrupt\.pth\.\d+\.part', corrupt_msg), corrupt_msg
    assert 'HTTP 404' in missing_msg and 'w/missing.pth' in missing_msg, missing_msg
    assert 'interrupted' in cut_msg and f'{len(cut) // 2} of {len(cut) + 1000} bytes' in cut_msg, cut_msg
    assert len(requests) == 4


def test_idempotent_and_force(server, tmp_path):
    folder, base, requests = server
    data = b'weights v1' * 1000
    manifest = _manifest(tmp_path, [{'name': 'a.pth', 'path': 'a.pth', 'url': _serve(folder, 'a.pth', data),
                                     'sha256': hashlib.sha256(data).hexdigest()}])
    root = tmp_path / 'root'
    target = root / 'experiments' / 'pretrained_models' / 'a.pth'
    lines = []
    assert fetch(root=root, base_url=base, manifest=manifest, log=lines.append) == []
    assert target.read_bytes() == data and len(requests) == 1

    # present and verified: nothing is downloaded again
    assert fetch(root=root, base_url=base, manifest=manifest, log=lines.append) == []
    assert len(requests) == 1 and '0 fetched, 1 already present' in lines[-1]

    # a file with other content is never replaced without force, and is left as it is
    target.write_bytes(b'my own file')
    failures = fetch(root=root, base_url=base, manifest=manifest, log=lines.append)
    assert len(failures) == 1 and 'pass --force' in failures[0] and str(target) in failures[0]
    assert target.read_bytes() == b'my own file' and len(requests) == 1

    assert fetch(root=root, base_url=base, manifest=manifest, force=True, log=lines.append) == []
    assert target.read_bytes() == data and len(requests) == 2
    assert _leftovers(root) == []


def test_pixel_checksum_converts_bmp_to_png(server, tmp_path):
    """An upstream BMP checked by its decoded pixels lands as a lossless PNG with the same pixels."""
    folder, base, _ = server
    from skimage import data as skdata
    img = Image.fromarray(skdata.astronaut()[:40, :56])
    bmp = tmp_path / 'x.bmp'
    img.save(bmp)
    expected = pixel_sha256(bmp)
    manifest = _manifest(tmp_path, [{'name': 'x.png', 'path': 'Train/x.bmp',
                                     'url': _serve(folder, 'Train/x.bmp', bmp.read_bytes()),
                                     'sha256_pixels': expected}], kind='dataset', dest='datasets/Toy/HR')
    root = tmp_path / 'root'
    assert fetch(root=root, base_url=base, manifest=manifest, log=lambda msg: None) == []
    out = root / 'datasets' / 'Toy' / 'HR' / 'x.png'
    with Image.open(out) as saved:
        assert saved.format == 'PNG'
        assert np.array_equal(np.asarray(saved), np.asarray(img))
    assert pixel_sha256(out) == expected
    # one changed pixel changes the checksum: a wrong image is refused
    arr = np.asarray(img).copy()
    arr[0, 0, 0] ^= 1
    Image.fromarray(arr).save(bmp)
    _serve(folder, 'Train/x.bmp', bmp.read_bytes())
    failures = fetch(root=root, base_url=base, manifest=manifest, force=True, log=lambda msg: None)
    assert len(failures) == 1 and 'checksum mismatch' in failures[0]
    assert pixel_sha256(out) == expected, 'the good file was replaced by a bad one'


def test_manifest_urls_are_pinned_raw_urls_and_unknown_names_are_refused():
    manifest = load_manifest()
    for asset in manifest.values():
        assert re.fullmatch(r'[0-9a-f]{40}', asset.commit), asset.name
        for afile in asset.files:
            assert afile.url == asset.raw_url(afile.upstream_path), afile.url
    with pytest.raises(AssetError, match='unknown asset.*Set6.*Known ones are: Set5'):
        assets.select(manifest, ['Set5', 'Set6'])


def test_every_third_party_file_of_the_options_is_in_the_manifest():
    """Paths the option files read from datasets/<Name>/... and experiments/pretrained_models/ are made by the
    manifest (datasets: its HR images, via prepare_datasets.py), except the official RCAN / RDN weights, which
    have no public pinned source (the option files say so)."""
    manifest = load_manifest()
    provided = {p for a in manifest.values() for p in a.outputs()}
    datasets = {a.name for a in manifest.values() if a.kind == 'dataset'}
    user_supplied = re.compile(r'experiments/pretrained_models/(RCAN_BIX[234]|rdn_x[234])\.pth$')
    missing = []
    for path in sorted((REPO_ROOT / 'options').glob('*.yml')):
        text = path.read_text()
        for value in re.findall(r'(?:datasets|experiments/pretrained_models)/[^\s#),`]+', text):
            if value.startswith('datasets/'):
                # T91_BSD200 is the union of T91 and BSD200; BSD200_half is prepare_datasets.py --half BSD200
                names = value.split('/')[1].replace('_half', '').split('_')
                if not set(names) <= datasets:
                    missing.append((path.name, value))
            elif value not in provided and not user_supplied.search(value):
                missing.append((path.name, value))
    assert not missing, missing
    assert 'experiments/pretrained_models/srcnn_955_imagenet_x2.pth' in provided


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / 'datasets' / 'Set5').exists(), reason='needs ../shared beside the repository '
                    '(the local copy --from reads); absent here')
def test_from_shared_then_prepare_datasets(tmp_path):
    """--from ../shared copies and verifies for real; prepare_datasets.py works on what it made."""
    root = tmp_path / 'root'
    cmd = [sys.executable, 'scripts/fetch_assets.py', '--root', str(root), '--from', str(SHARED), 'Set5',
           'dncnn17_ryu']
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=repo_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert 'Set5: 5 fetched' in proc.stdout
    manifest = load_manifest()
    for name in ('Set5', 'dncnn17_ryu'):
        for afile in manifest[name].files:
            assert assets.is_verified(afile, root / afile.dest), afile.dest
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=repo_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and 'Set5: 0 fetched, 5 already present' in proc.stdout, proc.stdout

    # what fetch_assets made is what prepare_datasets reads by default (--src = --root)
    proc = subprocess.run([sys.executable, 'scripts/prepare_datasets.py', '--root', str(root / 'datasets'),
                           '--eval-sets', 'Set5', '--train-sets', '--scales', '3'], cwd=REPO_ROOT, env=repo_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    woman = Image.open(root / 'datasets' / 'Set5' / 'HR_mod3' / 'woman.png')
    assert woman.size == (228, 342)  # 228x344 mod-cropped to the scale
    assert len(list((root / 'datasets' / 'Set5' / 'LR_bicubic' / 'X3').glob('*.png'))) == 5


@pytest.mark.slow
def test_cli_errors(tmp_path):
    proc = subprocess.run([sys.executable, 'scripts/fetch_assets.py', '--root', str(tmp_path), 'Set6'],
                          cwd=REPO_ROOT, env=repo_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and 'unknown asset(s) Set6' in proc.stderr and 'Traceback' not in proc.stderr
    proc = subprocess.run([sys.executable, 'scripts/fetch_assets.py', '--root', str(tmp_path), '--from',
                           str(tmp_path / 'nowhere'), 'Set5'], cwd=REPO_ROOT, env=repo_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and 'not a folder' in proc.stderr
    (tmp_path / 'empty').mkdir()
    proc = subprocess.run([sys.executable, 'scripts/fetch_assets.py', '--root', str(tmp_path), '--from',
                           str(tmp_path / 'empty'), 'Set5'], cwd=REPO_ROOT, env=repo_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1 and 'datasets/Set5/HR/baby.png' in proc.stderr, proc.stderr
    assert not (tmp_path / 'datasets' / 'Set5' / 'HR' / 'baby.png').exists()


def test_nothing_in_the_product_reads_the_shared_folder():
    """Option files, the package, the scripts and the README name only the repository's own conventions
    (datasets/, experiments/pretrained_models/, mcnet_basicsr/weights/); ../shared exists on few machines. The lab's
    records are left out: they keep the commands that made them as they ran."""
    hits = []
    records = REPO_ROOT / 'benchmarks' / 'records'
    paths = [REPO_ROOT / 'README.md'] + [p for d in ('options', 'mcnet_basicsr', 'scripts', 'benchmarks')
                                         for p in sorted((REPO_ROOT / d).rglob('*'))
                                         if p.is_file() and records not in p.parents]
    for path in paths:
        if path.suffix in ('.pth', '.pyc'):
            continue
        for no, line in enumerate(path.read_text(encoding='utf-8').splitlines(), 1):
            if '../shared' in line:
                hits.append(f'{path.relative_to(REPO_ROOT)}:{no}')
    assert not hits, hits


@pytest.mark.skipif(not (SHARED / 'weights' / 'srcnn_official_mat').exists(),
                    reason='needs ../shared/weights beside the repository (the local copy --from reads); absent here')
def test_from_shared_converts_the_official_srcnn(tmp_path):
    """srcnn_955_imagenet: the .mat files are verified, then converted once into what the option files read."""
    import torch
    lines = []
    assert fetch(['srcnn_955_imagenet'], root=tmp_path, mirror=SHARED, log=lines.append) == []
    out = tmp_path / 'experiments' / 'pretrained_models'
    converted = [out / f'srcnn_955_imagenet_x{s}.pth' for s in (2, 3, 4)]
    state = torch.load(converted[0], map_location='cpu', weights_only=True)['params']
    assert state['conv1.weight'].shape == (64, 1, 9, 9) and state['conv3.weight'].shape == (1, 32, 5, 5)
    stamps = [p.stat().st_mtime_ns for p in converted]
    assert fetch(['srcnn_955_imagenet'], root=tmp_path, mirror=SHARED, log=lines.append) == []
    assert [p.stat().st_mtime_ns for p in converted] == stamps, 'a second run converted again'
    assert not any('converted' in line for line in lines[2:])


@pytest.mark.skipif(not (SHARED / 'weights' / 'usrnet_tiny').exists() or
                    not (SHARED / 'weights' / 'kair_denoisers').exists(),
                    reason='needs ../shared/weights beside the repository (the local copy --from reads); absent here')
def test_from_shared_converts_usrnet_tiny_and_ffdnet(tmp_path):
    """usrnet_tiny and ffdnet_color: the official files are verified, then written as BasicSR checkpoints where the
    option files read them, each loading strictly into its arch with the upstream tensors unchanged."""
    import torch

    from mcnet_basicsr.archs.ffdnet_arch import FFDNet
    from mcnet_basicsr.archs.usrnet_arch import USRNet
    assert fetch(['usrnet_tiny', 'ffdnet_color'], root=tmp_path, mirror=SHARED, log=lambda msg: None) == []
    out = tmp_path / 'experiments' / 'pretrained_models'
    for name, arch in (('usrnet_tiny', USRNet), ('ffdnet_color', FFDNet)):
        upstream = torch.load(out / 'source' / f'{name}.pth', map_location='cpu', weights_only=False)
        state = torch.load(out / f'{name}.pth', map_location='cpu', weights_only=True)['params']
        assert set(state) == set(upstream) and all(torch.equal(state[k], upstream[k]) for k in state), name
        arch().load_state_dict(state, strict=True)


def test_readme_says_where_data_and_weights_come_from():
    """The README's data section names the two commands, every asset of the manifest with its source repository,
    and a CPU-only torch install pinned like the main set-up command."""
    readme = (REPO_ROOT / 'README.md').read_text()
    section = readme.split('## Data and weights', 1)[1].split('\n## ', 1)[0]
    assert '    python scripts/fetch_assets.py ' in section and '    python scripts/prepare_datasets.py ' in section
    for asset in load_manifest().values():
        row = next((line for line in section.splitlines() if f'`{asset.name}`' in line), None)
        assert row is not None and asset.repo in row, asset.name
    main_pins = re.search(r'pip install (torch==\S+ torchvision==\S+) &&', readme).group(1)
    assert f'    pip install {main_pins} --index-url https://download.pytorch.org/whl/cpu' in readme


def test_offline_one_line_per_asset_a_summary_and_the_way_to_work_offline(tmp_path, monkeypatch, capsys):
    """Without a network every file fails alike: one error line per asset (not per file), then how many assets and
    files failed and how to work offline (--from DIR)."""
    def no_network(url, target, desc=None):
        raise AssetError(f'{url}: cannot connect (Temporary failure in name resolution)')

    monkeypatch.setattr(assets, 'download', no_network)
    manifest = load_manifest()
    names = ['Set5', 'Set14', 'dncnn17_ryu']
    assert load_script('fetch_assets').main(['--root', str(tmp_path), *names]) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == '' and len(lines) == len(names) + 2, lines
    for name, line in zip(names, lines):
        n = len(manifest[name].files)
        assert line.startswith(f'error: {name}: 0 fetched, 0 already present, {n} failed -> ')
        assert line.count('cannot connect') == 1 and line.endswith(f'(and {n - 1} more)'), line
    files = sum(len(manifest[name].files) for name in names)
    assert lines[-2] == f'3 of 3 asset(s) incomplete, {files} file(s) failed; running the command again retries ' \
        'what failed'
    assert lines[-1].startswith('offline: --from DIR copies the files from a folder of your own')
    assert not (tmp_path / 'datasets' / 'Set5' / 'HR' / 'baby.png').exists()


def test_prepare_datasets_without_hr_images_names_the_command_that_fetches_them(tmp_path, monkeypatch):
    """One error naming the empty HR folders and the fetch_assets.py command that fills exactly them, from the folder
    the user is in."""
    import shlex
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        load_script('prepare_datasets').main(['--eval-sets', 'Set5', '--train-sets', 'T91', '--scales', '2'])
    message = str(err.value)
    assert message.startswith('no HR images in datasets/Set5/HR, datasets/T91/HR; fetch them with: python ')
    argv = shlex.split(message.split('fetch them with: ')[1])
    assert Path(argv[1]).is_file()
    args = load_script('fetch_assets').parse_args(argv[2:])
    manifest = load_manifest()
    assert {(Path(args.root) / manifest[name].dest).resolve() for name in args.names} == \
        {(tmp_path / 'datasets' / name / 'HR').resolve() for name in ('Set5', 'T91')}
    assert not (tmp_path / 'datasets').exists()  # nothing made before the check
