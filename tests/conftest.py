"""Shared pytest setup and fixtures.

The torchvision alias basicsr 1.4.2 needs is installed by the same start-up hook the package
uses, so a test may import basicsr before (or without) importing mcnet_basicsr.
"""
import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
# pytest_cmdline_main below runs one pytest-xdist worker per core; the subprocesses tests start (training, the CLI)
# would otherwise each take every core (torch's default), several workers at once oversubscribing the machine.
if os.environ.get('PYTEST_XDIST_WORKER'):
    os.environ.setdefault('OMP_NUM_THREADS',
                          str(max(1, (os.cpu_count() or 1) // int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', 1)))))
SHARED = REPO_ROOT.parent / 'shared'
BENCHMARKS = REPO_ROOT / 'benchmarks'
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
# the lab's modules import each other by name, as when run as python benchmarks/<name>.py (its folder on sys.path)
if str(BENCHMARKS) not in sys.path:
    sys.path.append(str(BENCHMARKS))

from mcnet_basicsr.basicsr_import import install_torchvision_alias  # noqa: E402

install_torchvision_alias()

XDIST_DEFAULTS = {'numprocesses': 'auto', 'maxprocesses': 4, 'dist': 'worksteal'}


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """Where pytest-xdist is installed and the command line chose no workers (no ``-n`` / ``--tx``): one worker per
    core, at most 4 (each holds torch and its test images), with work stealing, so that a file of long tests does not
    leave the others idle at the end. Runs before xdist's own hook turns these options into workers; a worker
    (``config.workerinput``) is left alone. Without xdist pytest runs in one process."""
    if not config.pluginmanager.hasplugin('xdist') or hasattr(config, 'workerinput'):
        return
    if config.option.numprocesses is None and not config.option.tx:
        config.option.numprocesses = XDIST_DEFAULTS['numprocesses']
        config.option.maxprocesses = config.option.maxprocesses or XDIST_DEFAULTS['maxprocesses']
        if config.option.dist == 'no':
            config.option.dist = XDIST_DEFAULTS['dist']


def repo_env(**extra):
    """``os.environ`` for a subprocess that runs this checkout: the repository first on PYTHONPATH and whatever the
    caller's PYTHONPATH holds after it (basicsr may be installed only there), plus ``extra``."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get('PYTHONPATH')]))
    return dict(os.environ, PYTHONPATH=path, **extra)


def train_through_pipeline(opt, root, timeout=900):
    """Run BasicSR's ``train_pipeline`` on the option dict ``opt`` in a subprocess, as ``mcnet_basicsr/train.py`` runs
    it, with ``root`` as its root path (the option file is written there): ``(experiment folder, its training log
    text)``; a failed run fails the test with its output's tail."""
    import subprocess

    import yaml
    opt_path = Path(root) / f'{opt["name"]}.yml'
    with open(opt_path, 'w') as f:
        yaml.safe_dump(opt, f, sort_keys=False)
    code = (f'import sys; sys.argv = ["train", "-opt", {str(opt_path)!r}]; '
            f'from mcnet_basicsr.train import main; main(root_path={str(root)!r})')
    proc = subprocess.run([sys.executable, '-c', code], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    exp = Path(root) / 'experiments' / opt['name']
    return exp, sorted(exp.glob('train_*.log'))[-1].read_text()


def tiny_recipe(name, root):
    """``options/<name>.yml`` cut down to two train_pipeline iterations on the CPU, on tiny photos written under
    ``root`` (train: two 48-pixel crops, 32-pixel patches, batch 2; val: one 32-pixel crop), validating and saving a
    checkpoint at iteration 2: the option dict, for :func:`train_through_pipeline`."""
    import cv2
    import yaml
    for folder, names, size in (('train', ('astronaut', 'coffee'), 48), ('val', ('chelsea', ), 32)):
        (Path(root) / folder).mkdir()
        for photo in names:
            cv2.imwrite(str(Path(root) / folder / f'{photo}.png'), sample_photo(photo, size)[:, :, ::-1])
    with open(REPO_ROOT / 'options' / f'{name}.yml') as f:
        opt = yaml.safe_load(f)
    opt.update(num_gpu=0)
    opt['datasets']['train'].update(dataroot_gt=str(Path(root) / 'train'), gt_size=32, batch_size_per_gpu=2,
                                    num_worker_per_gpu=0, dataset_enlarge_ratio=1)
    opt['datasets']['val']['dataroot_gt'] = str(Path(root) / 'val')
    opt['train'].update(total_iter=2)
    opt['val']['val_freq'] = 2
    opt['logger'].update(print_freq=1, save_checkpoint_freq=2)
    return opt


def assert_layer_fine_tunes_the_shipped_prior(state):
    """A trained layer checkpoint's ``params`` (``state``) from a recipe of two iterations: its frozen backbone is not
    in it, its hyper-network's output layer has left zero (lr_beta), and its FFDNet has moved from the shipped colour
    FFDNet, but by less than 1e-3 (the prior's small rate)."""
    import torch

    from mcnet_basicsr.archs.ffdnet_arch import FFDNet
    assert not any(key.startswith('backbone.') for key in state)
    assert float(state['hyper.net.4.bias'].abs().max()) > 1e-3
    prior = FFDNet()
    shipped = REPO_ROOT / 'mcnet_basicsr' / 'weights' / 'ffdnet_rgb.pth'
    prior.load_state_dict(torch.load(shipped, map_location='cpu')['params'])
    moved = [float((state[f'denoiser.{k}'] - v).abs().max()) for k, v in prior.state_dict().items()]
    assert 0 < max(moved) < 1e-3, max(moved)


def load_script(name):
    """``scripts/<name>.py`` as a module, loaded from its file: scripts are command lines, not an importable
    package, and nothing but tests loads them this way (to call ``main(argv)`` without a subprocess)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f'mcnet_script_{name}', REPO_ROOT / 'scripts' / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_path(*parts):
    """Path inside ../shared, or skip the test with the reason when it is not there."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f'needs {path} (../shared beside the repository: datasets and reference weights); absent here')
    return path


def resizer_table_records():
    """Every Table R cell of the shipped weights in ``benchmarks/records/resizer_table_*.json`` as recorded,
    ``row|x<s>|resizer|set`` -> its dict (``psnr``, ``per_image``, ...). A record whose ``weights`` note ends in 'not
    shipped' holds cells of other weights under the shipped rows' names (a run in training) and is left out."""
    import json
    cells = {}
    for path in sorted((REPO_ROOT / 'benchmarks' / 'records').glob('resizer_table_*.json')):
        record = json.loads(path.read_text())
        if not record.get('weights', '').endswith('not shipped'):
            cells.update(record['cells'])
    return cells


def resizer_table_cells():
    """Every Table R cell, ``row|x<s>|resizer|set`` -> PSNR."""
    return {k: c['psnr'] for k, c in resizer_table_records().items()}


def same_operator_resizers(scale):
    """``name -> names`` of the resizers whose operator at ``scale`` is the same matrix (``test_ops_resizers``): a
    cell measured under one name stands for the others, the LR differing only in the libraries' rounding."""
    from mcnet_basicsr.ops import DEGRADATIONS, build_degradation
    matrices = {n: build_degradation(n, scale).axis_matrix(12 * scale) for n in DEGRADATIONS}
    return {n: {m for m in matrices if (matrices[m] == matrices[n]).all()} for n in matrices}


def sample_photo(name, size=None, top_left=None):
    """A real photo that scikit-image ships (no download): uint8 HxWx3 RGB, cropped to ``size`` at ``top_left`` (row,
    column; default: centred)."""
    from skimage import data
    img = getattr(data, name)()
    if img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    img = img[:, :, :3]
    if size is not None:
        h, w = (size, size) if isinstance(size, int) else size
        top, left = top_left or ((img.shape[0] - h) // 2, (img.shape[1] - w) // 2)
        img = img[top:top + h, left:left + w]
        assert img.shape[:2] == (h, w), (name, size, top_left)
    return np.ascontiguousarray(img)


def central_difference(evaluate, param, index, h, after_change=None):
    """``(evaluate() at param[index] + h - evaluate() at param[index] - h) / (2 h)``, ``param`` restored afterwards;
    ``after_change()`` runs after each change of ``param`` (e.g. to refresh state derived from it)."""
    import torch
    with torch.no_grad():
        p0 = float(param[index])
        values = []
        for p in (p0 + h, p0 - h):
            param[index] = p
            if after_change is not None:
                after_change()
            values.append(float(evaluate()))
        param[index] = p0
        if after_change is not None:
            after_change()
    return (values[0] - values[1]) / (2 * h)


def make_venv(path):
    """A real virtual environment at ``path`` that sees this interpreter's packages; returns its python.

    ``--system-site-packages`` exposes the base interpreter's site-packages; when the tests themselves run in a
    venv, its site-packages are added as plain path lines (not site directories, so none of their ``.pth``
    start-up hooks run in the new environment). User site-packages stay as Python sets them for a venv.
    """
    import subprocess
    import sysconfig
    subprocess.run([sys.executable, '-m', 'venv', '--system-site-packages', '--without-pip', str(path)], check=True,
                   capture_output=True, timeout=300)
    python = path / ('Scripts/python.exe' if sys.platform == 'win32' else 'bin/python')
    purelib = subprocess.run([str(python), '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                             check=True, capture_output=True, text=True).stdout.strip()
    outer = dict.fromkeys(sysconfig.get_paths()[k] for k in ('purelib', 'platlib'))
    Path(purelib, 'outer_site_packages.pth').write_text(''.join(f'{p}\n' for p in outer))
    return python


def dense_ball_projection(a, x, b, eps):
    """Projection of one sample ``x`` onto ``{z : ||a z - b|| <= eps}`` by a dense float64 reference: mu by bisection
    on ``||(I + mu a a^T)^{-1} r|| = eps``, then ``x - a^T mu (I + mu a a^T)^{-1} r``."""
    import torch
    k = a @ a.T
    r = a @ x - b
    if r.norm() <= eps:
        return x.clone()
    eye = torch.eye(k.shape[0], dtype=k.dtype)

    def res_norm(mu):
        return torch.linalg.solve(eye + mu * k, r).norm().item()

    lo, hi = 0.0, 1.0
    while res_norm(hi) > eps:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if res_norm(mid) > eps else (lo, mid)
    mu = 0.5 * (lo + hi)
    return x - a.T @ (mu * torch.linalg.solve(eye + mu * k, r))


@pytest.fixture
def shared():
    return shared_path()


TINY_SRCNN = {'type': 'SRCNN', 'num_feat': [8, 4]}


@pytest.fixture(scope='session')
def srcnn_ckpt(tmp_path_factory):
    """A random SRCNN with 8-4 features (seed 0), saved: the backbone of the tiny MCNet layers of the CPU tests."""
    import torch
    from basicsr.archs import build_network
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp('tiny_srcnn') / 'srcnn.pth'
    torch.save({'params': build_network(dict(TINY_SRCNN)).state_dict()}, path)
    return str(path)


def tiny_layer_options(ckpt, forward, backward, **kw):
    """``MCNetArch`` options of a tiny x2 layer on the SRCNN of ``ckpt`` (``srcnn_ckpt``): a 3-layer, 8-channel
    DnCNN, beta 0.08, the given forward / backward solver settings; ``kw`` overrides any key."""
    opt = {'type': 'MCNetArch',
           'backbone': {'net': dict(TINY_SRCNN), 'path': ckpt, 'input': 'upsampled', 'channels': 1},
           'operator': {'type': 'bicubic', 'scale': 2}, 'beta': 0.08,
           'denoiser': {'depth': 3, 'num_feat': 8, 'sn_grid': 8},
           'settings': {'solver': {'forward': forward, 'backward': backward}}}
    opt.update(kw)
    return opt


@pytest.fixture(autouse=True, scope='session')
def one_intra_op_thread():
    """Test tensors are small: one thread is as fast, and immune to the OpenMP spin-waits that make
    multi-threaded tiny ops 10-100x slower when other processes share the (2-core) machine."""
    from mcnet_basicsr.utils.precision import num_threads
    with num_threads(1):
        yield


@pytest.fixture
def keep_tf32_flags():
    """The process's TF32 flags for cuDNN convolutions and CUDA matmuls, saved before the test and written back after
    it, by plain assignment: a test may change them (or run code that does) without monkeypatching torch's modules."""
    import torch
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    try:
        yield saved
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.fixture
def set_tf32_flags():
    """``set_tf32_flags(value)`` sets the process's TF32 flags for cuDNN convolutions and CUDA matmuls; both are
    restored after the test (through ``mcnet_basicsr.utils.precision.tf32``, which saves and restores both). monkeypatch
    cannot restore ``torch.backends.cuda.matmul.allow_tf32``, which its module serves through ``__getattr__``: on a
    CUDA machine the undo ended in ``delattr`` and an AttributeError."""
    import contextlib

    from mcnet_basicsr.utils.precision import tf32
    with contextlib.ExitStack() as scopes:
        yield lambda value: scopes.enter_context(tf32(value))
