"""End-to-end: data preparation -> train_pipeline -> checkpoint -> auto-resume -> test_pipeline,
through our entry points and through BasicSR's own scripts (opt-in autoload hook)."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import pytest
import torch
import yaml

from conftest import REPO_ROOT, SHARED, make_venv, repo_env, sample_photo

pytestmark = pytest.mark.slow  # BasicSR training/testing runs, several in subprocesses

PHOTOS = {'astronaut': (96, 120), 'coffee': (96, 96), 'chelsea': (120, 96), 'rocket': (96, 108)}


def run(args, cwd=None, env=None, check=True, python=sys.executable):
    """``python args`` in a subprocess that imports this checkout's package (default ``env``: :func:`repo_env`)."""
    proc = subprocess.run([str(python), *args], cwd=cwd, env=repo_env() if env is None else env, capture_output=True,
                          text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f'{args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}')
    return proc


def load_option(name):
    with open(REPO_ROOT / 'options' / name) as f:
        return yaml.safe_load(f)


def dump_option(opt, path):
    with open(path, 'w') as f:
        yaml.safe_dump(opt, f, sort_keys=False)
    return str(path)


@pytest.fixture(scope='module')
def workspace(tmp_path_factory):
    """Tiny LMDB + eval folders made by scripts/prepare_datasets.py, a random SRCNN backbone."""
    root = tmp_path_factory.mktemp('e2e')
    hr_dir = root / 'src' / 'Photos' / 'HR'
    hr_dir.mkdir(parents=True)
    for name, size in PHOTOS.items():
        cv2.imwrite(str(hr_dir / f'{name}.png'), cv2.cvtColor(sample_photo(name, size), cv2.COLOR_RGB2BGR))
    run(['scripts/prepare_datasets.py', '--src', str(root / 'src'), '--root', str(root / 'datasets'), '--scales', '2',
         '--train-sets', 'Photos', '--eval-sets', 'Photos', '--patch-size', '48', '--step', '48'], cwd=REPO_ROOT)
    from basicsr.archs import build_network

    import mcnet_basicsr  # noqa: F401
    torch.manual_seed(0)
    srcnn = build_network({'type': 'SRCNN', 'padding_mode': 'replicate'})
    torch.save({'params': srcnn.state_dict()}, root / 'srcnn_x2.pth')
    return root


def stand_in_data(folder, eval_sets=(), train_sets=(), scale=2):
    """``folder``/datasets/<Name>/... as scripts/prepare_datasets.py makes them, from two or four scikit-image photos
    per set: stand-ins at the paths the option files name (datasets/Set5/HR_mod2, datasets/T91/T91_HR_sub_x2.lmdb)."""
    names = list(PHOTOS)
    for i, name in enumerate((*eval_sets, *train_sets)):
        hr_dir = Path(folder) / 'src' / name / 'HR'
        hr_dir.mkdir(parents=True)
        for photo in (names if name in train_sets else names[i % 2::2]):
            cv2.imwrite(str(hr_dir / f'{photo}.png'), cv2.cvtColor(sample_photo(photo, PHOTOS[photo]),
                                                                   cv2.COLOR_RGB2BGR))
    run(['scripts/prepare_datasets.py', '--src', str(Path(folder) / 'src'), '--root', str(Path(folder) / 'datasets'),
         '--scales', str(scale), '--eval-sets', *eval_sets, '--train-sets', *train_sets, '--patch-size', '48',
         '--step', '48'], cwd=REPO_ROOT)


def tiny_train_option(ws, total_iter, name='e2e_mcnet_srcnn_x2'):
    """options/train_mcnet_srcnn_x2.yml, shrunk to a CPU-sized run on the tiny data."""
    opt = load_option('train_mcnet_srcnn_x2.yml')
    opt['name'] = name
    opt['num_gpu'] = 0
    train = opt['datasets']['train']
    train.update(dataroot_gt=str(ws / 'datasets/Photos/Photos_HR_sub_x2.lmdb'),
                 dataroot_lq=str(ws / 'datasets/Photos/Photos_LR_sub_x2.lmdb'), gt_size=48, batch_size_per_gpu=2,
                 num_worker_per_gpu=0, dataset_enlarge_ratio=1)
    opt['datasets']['val'].update(dataroot_gt=str(ws / 'datasets/Photos/HR_mod2'),
                                  dataroot_lq=str(ws / 'datasets/Photos/LR_bicubic/X2'))
    net = opt['network_g']
    net['backbone']['path'] = str(ws / 'srcnn_x2.pth')
    net['denoiser']['path'] = None
    net['settings']['solver'] = {'forward': {'tol': 1e-3, 'max_iter': 8}, 'backward': {'tol': 1e-2, 'max_iter': 6}}
    opt['train'].update(total_iter=total_iter)
    opt['train']['scheduler']['milestones'] = [total_iter]
    opt['val']['val_freq'] = 2
    opt['logger'].update(print_freq=1, save_checkpoint_freq=2, use_tb_logger=False)
    return opt


def tiny_test_option(ws, weights, name):
    opt = load_option('test_mcnet_srcnn_x2.yml')
    opt['name'] = name
    opt['num_gpu'] = 0
    opt['datasets'] = {'test_1': dict(opt['datasets']['test_1'], name='Photos',
                                      dataroot_gt=str(ws / 'datasets/Photos/HR_mod2'),
                                      dataroot_lq=str(ws / 'datasets/Photos/LR_bicubic/X2'))}
    opt['network_g']['backbone']['path'] = str(ws / 'srcnn_x2.pth')
    opt['network_g']['settings']['solver'] = {'forward': {'tol': 1e-4, 'max_iter': 30}}
    opt['path']['pretrain_network_g'] = str(weights)
    return opt


def newest_log(folder, prefix):
    logs = sorted(Path(folder).glob(f'{prefix}_*.log'), key=os.path.getmtime)
    assert logs, f'no {prefix}_*.log in {folder}'
    return logs[-1].read_text()


def in_process(module, ws, opt_path, *extra):
    """Run our entry point with root_path = the workspace (not the repository)."""
    code = (f'import sys; sys.argv = ["{module}", "-opt", {str(opt_path)!r}, *{list(extra)!r}]; '
            f'from mcnet_basicsr.{module} import main; main(root_path={str(ws)!r})')
    return run(['-c', code], cwd=REPO_ROOT)


def test_train_checkpoint_resume_and_test(workspace):
    ws = workspace
    opt_path = dump_option(tiny_train_option(ws, total_iter=4), ws / 'train.yml')
    in_process('train', ws, opt_path)
    exp = ws / 'experiments' / 'e2e_mcnet_srcnn_x2'
    ckpt = exp / 'models' / 'net_g_4.pth'
    assert ckpt.is_file() and (exp / 'training_states' / '4.state').is_file()
    params = torch.load(ckpt, map_location='cpu')['params']
    assert 'log_beta' in params and any(k.startswith('denoiser.dncnn.') for k in params)
    assert not any('backbone' in k or k.startswith('conv') for k in params), 'frozen backbone leaked into checkpoint'
    log = newest_log(exp, 'train')
    assert '# psnr:' in log and 'fidelity_float' in log and 'beta:' in log and 'fwd_iter:' in log

    # --auto_resume on CPU: continues from iteration 4 instead of starting over (and logs the step's split)
    opt = tiny_train_option(ws, total_iter=6)
    opt['train']['log_step_times'] = True
    dump_option(opt, opt_path)
    in_process('train', ws, opt_path, '--auto_resume')
    log = newest_log(exp, 'train')
    assert 'Resuming training from epoch' in log and 'iter: 4.' in log
    assert (exp / 'models' / 'net_g_6.pth').is_file()
    step = next(ln for ln in log.splitlines() if re.search(r'iter: *6,', ln))
    times = {k: float(step.split(f'{k}: ')[1].split()[0]) for k in ('t_fwd', 't_bwd', 't_opt')}
    assert all(t > 0 for t in times.values()) and times['t_fwd'] + times['t_bwd'] < 60, step

    # test_pipeline on the produced checkpoint writes PSNR/SSIM (and fidelities) to its log
    test_path = dump_option(tiny_test_option(ws, exp / 'models' / 'net_g_latest.pth', 'e2e_test'), ws / 'test.yml')
    in_process('test', ws, test_path)
    log = newest_log(ws / 'results' / 'e2e_test', 'test')
    for key in ('# psnr:', '# ssim:', '# fidelity:'):
        assert key in log, key
    line = next(ln for ln in log.splitlines() if 'fidelity_float' in ln)
    worst = float(line.split('max ')[1].split()[0])
    assert worst <= 1e-5, f'eps = 0 output not consistent: {line}'

    # the tables (mcnet_basicsr.evaluation) run the same validation: the record is what test_pipeline logs, and
    # its RGB-uint8 PSNR is BasicSR's own metric ('# psnr'), computed apart by BasicSR's calculate_metric
    from mcnet_basicsr.evaluation.evaluate import evaluate_option
    with open(test_path) as f:
        record, = evaluate_option(yaml.safe_load(f), torch.device('cpu'))
    line = next(ln for ln in log.splitlines() if 'psnr_y_uint8' in ln)
    psnr_y, ssim_y = float(line.split('psnr_y_uint8 ')[1].split()[0]), float(line.split('ssim_y_uint8 ')[1].split()[0])
    assert abs(psnr_y - record['psnr']) < 1e-3 and abs(ssim_y - record['ssim']) < 1e-4, (line, record)
    assert abs(float(log.split('# psnr: ')[1].split()[0]) - record['psnr_rgb_uint8']) < 1e-3
    assert record['psnr'] != record['psnr_rgb_uint8']


@pytest.mark.skipif(not (SHARED / 'datasets' / 'Set5').exists(), reason='needs ../shared/datasets/Set5')
def test_test_pipeline_on_set5(workspace, tmp_path):
    """test_pipeline over the real Set5 x2 (prepared from ../shared) with an untrained layer."""
    ws = workspace
    run(['scripts/prepare_datasets.py', '--src', str(SHARED / 'datasets'), '--root', str(tmp_path / 'datasets'),
         '--scales', '2', '--eval-sets', 'Set5', '--train-sets'], cwd=REPO_ROOT)
    from basicsr.archs import build_network

    import mcnet_basicsr  # noqa: F401
    net = build_network(tiny_train_option(ws, 1)['network_g'])
    torch.save({'params': net.state_dict()}, tmp_path / 'layer.pth')
    opt = tiny_test_option(ws, tmp_path / 'layer.pth', 'e2e_set5')
    opt['datasets']['test_1'].update(name='Set5', dataroot_gt=str(tmp_path / 'datasets/Set5/HR_mod2'),
                                     dataroot_lq=str(tmp_path / 'datasets/Set5/LR_bicubic/X2'))
    in_process('test', ws, dump_option(opt, tmp_path / 'set5.yml'))
    log = newest_log(ws / 'results' / 'e2e_set5', 'test')
    psnr = float(log.split('# psnr: ')[1].split()[0])
    assert 25.0 < psnr < 40.0, log[-2000:]


def test_shipped_option_file_runs_from_another_folder(tmp_path):
    """options/test_mcnet_rcan_compact_x2.yml as it ships, run by mcnet_basicsr/test.py from a folder that is not the
    repository: its data is read there (stand-ins at datasets/Set5, datasets/Set14), its shipped weights (backbone and
    layer, mcnet_basicsr/weights/...) from the installed package."""
    stand_in_data(tmp_path, eval_sets=('Set5', 'Set14'))
    name = f'e2e_from_another_folder_{os.getpid()}'
    option = REPO_ROOT / 'options' / 'test_mcnet_rcan_compact_x2.yml'
    run([str(REPO_ROOT / 'mcnet_basicsr' / 'test.py'), '-opt', str(option), '--force_yml', f'name={name}',
         'num_gpu=0', 'network_g:settings:solver:forward:max_iter=20'], cwd=tmp_path)
    log = newest_log(tmp_path / 'results' / name, 'test')  # results/ in the current folder too
    assert log.count('# psnr:') == 2 and 'Validation Set14: fidelity_float' in log, log[-3000:]
    assert f'from {REPO_ROOT / "mcnet_basicsr" / "weights" / "mcnet_rcan_compact_x2.pth"}' in log
    assert not (REPO_ROOT / 'results' / name).exists()


def test_dash_m_test_keeps_results_in_the_current_folder(tmp_path):
    """``python -m mcnet_basicsr.test``, the documented stand-in for a pip-installed basicsr's ``basicsr/test.py``
    (which writes results/ into site-packages): BasicSR's test pipeline with its root at the current folder, here
    not the repository, beside the package is imported from."""
    stand_in_data(tmp_path, eval_sets=('Set5', 'Set14'))
    name = f'e2e_cwd_root_{os.getpid()}'
    run(['-m', 'mcnet_basicsr.test', '-opt', str(REPO_ROOT / 'options' / 'test_rcan_compact_x2.yml'), '--force_yml',
         f'name={name}', 'num_gpu=0'], cwd=tmp_path, env=repo_env())
    assert newest_log(tmp_path / 'results' / name, 'test').count('# psnr:') == 2
    assert not (REPO_ROOT / 'results' / name).exists()


def test_basicsr_own_scripts_with_autoload(workspace, tmp_path):
    """A BasicSR checkout's basicsr/train.py and test.py run our option files once the hook is installed, in a
    real virtual environment (where user site-packages are off, so the hook goes into the venv itself)."""
    import basicsr
    ws = workspace
    python = make_venv(tmp_path / 'venv')
    checkout = tmp_path / 'BasicSR'
    (checkout / 'basicsr').mkdir(parents=True)
    for script in ('train.py', 'test.py'):
        shutil.copy(Path(basicsr.__file__).parent / script, checkout / 'basicsr' / script)
    env = repo_env(PYTHONUSERBASE=str(tmp_path / 'userbase'))
    opt_path = dump_option(tiny_train_option(ws, total_iter=2, name='e2e_basicsr_script'), tmp_path / 'train.yml')

    # without the hook, BasicSR 1.4.2 does not even import on this torchvision (nor know our types)
    proc = run([str(checkout / 'basicsr' / 'train.py'), '-opt', opt_path], cwd=checkout, env=env, check=False,
               python=python)
    assert proc.returncode != 0

    run(['-m', 'mcnet_basicsr.autoload', 'install'], env=env, python=python)
    # costs nothing to programs that never import basicsr: neither torch nor our package is loaded
    probe = 'import sys; print(sorted(m for m in ("torch", "basicsr", "mcnet_basicsr") if m in sys.modules))'
    proc = run(['-c', probe], env=env, python=python)
    assert proc.stdout.strip() == '[]'

    # docs/Training.md's example: the repository's own option file, from the checkout (not the repository's folder).
    # Without the data: one line per missing input, relative to the checkout (the shipped DnCNN6 is found)
    readme_example = [str(checkout / 'basicsr' / 'train.py'), '-opt', str(REPO_ROOT / 'options' /
                                                                          'train_mcnet_srcnn_x2.yml')]
    proc = run(readme_example, cwd=checkout, env=env, check=False, python=python)
    lines = [line for line in proc.stderr.splitlines() if line.startswith('error: ')]
    assert proc.returncode == 2 and 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    assert sorted(line.split(' (')[1].split(',')[0] for line in lines) == [
        'datasets.train.dataroot_gt', 'datasets.train.dataroot_lq', 'datasets.val.dataroot_gt',
        'datasets.val.dataroot_lq', 'network_g.backbone.path'], lines
    assert all(f'relative to the current folder {checkout}) is missing; ' in line for line in lines), lines
    # with (stand-ins for) them there, it trains: a short run on the CPU, set with --force_yml
    stand_in_data(checkout, eval_sets=('Set5',), train_sets=('T91',))
    (checkout / 'experiments' / 'pretrained_models').mkdir(parents=True)
    shutil.copy(ws / 'srcnn_x2.pth', checkout / 'experiments' / 'pretrained_models' / 'srcnn_955_imagenet_x2.pth')
    short_run = ['--force_yml', 'train:total_iter=2', 'datasets:train:batch_size_per_gpu=2',
                 'datasets:train:gt_size=48', 'datasets:train:num_worker_per_gpu=0',
                 'datasets:train:dataset_enlarge_ratio=1', 'val:val_freq=2', 'logger:print_freq=1',
                 'logger:save_checkpoint_freq=2', 'logger:use_tb_logger=false',
                 'network_g:settings:solver:forward:max_iter=8', 'network_g:settings:solver:backward:max_iter=6']
    run(readme_example + short_run, cwd=checkout, env=env, python=python)
    exp = checkout / 'experiments' / 'train_MCNet_SRCNN_x2'
    assert (exp / 'models' / 'net_g_2.pth').is_file() and '# psnr:' in newest_log(exp, 'train')

    run([str(checkout / 'basicsr' / 'train.py'), '-opt', opt_path], cwd=checkout, env=env, python=python)
    models = checkout / 'experiments' / 'e2e_basicsr_script' / 'models'
    assert (models / 'net_g_2.pth').is_file()
    test_path = dump_option(tiny_test_option(ws, models / 'net_g_latest.pth', 'e2e_basicsr_test'), tmp_path / 't.yml')
    run([str(checkout / 'basicsr' / 'test.py'), '-opt', test_path], cwd=checkout, env=env, python=python)
    assert '# psnr:' in newest_log(checkout / 'results' / 'e2e_basicsr_test', 'test')

    run(['-m', 'mcnet_basicsr.autoload', 'uninstall'], env=env, python=python)
    proc = run([str(checkout / 'basicsr' / 'test.py'), '-opt', test_path], cwd=checkout, env=env, check=False,
               python=python)
    assert proc.returncode != 0


def test_prepare_datasets_union_of_training_sets(tmp_path):
    """'A+B' packs the patches of both folders into one LMDB pair; equal file names do not collide."""
    import lmdb
    for part, names in (('SetA', ('coffee', 'astronaut')), ('SetB', ('coffee',))):
        hr_dir = tmp_path / 'src' / part / 'HR'
        hr_dir.mkdir(parents=True)
        for name in names:
            cv2.imwrite(str(hr_dir / f'{name}.png'), cv2.cvtColor(sample_photo(name, 48), cv2.COLOR_RGB2BGR))
    run(['scripts/prepare_datasets.py', '--src', str(tmp_path / 'src'), '--root', str(tmp_path / 'datasets'),
         '--scales', '2', '--eval-sets', '--train-sets', 'SetA+SetB', '--patch-size', '48', '--step', '48'],
        cwd=REPO_ROOT)
    keys = {}
    for kind in ('HR', 'LR'):
        path = tmp_path / 'datasets' / 'SetA_SetB' / f'SetA_SetB_{kind}_sub_x2.lmdb'
        meta = (path / 'meta_info.txt').read_text().split('\n')
        keys[kind] = sorted(line.split('.png')[0] for line in meta if line)
        env = lmdb.open(str(path), readonly=True, lock=False)
        with env.begin() as txn:
            assert all(txn.get(k.encode()) is not None for k in keys[kind])
    # one 48x48 patch per 48x48 image: three images, the two 'coffee' ones told apart by their set
    assert keys['HR'] == keys['LR'] == ['SetA_astronaut_s001', 'SetA_coffee_s001', 'SetB_coffee_s001']


def _photos_test_option(ws, name, run_name):
    opt = load_option(name)
    opt.update(name=run_name, num_gpu=0)
    opt['datasets'] = {'test_1': dict(opt['datasets']['test_1'], name='Photos',
                                      dataroot_gt=str(ws / 'datasets/Photos/HR_mod2'),
                                      dataroot_lq=str(ws / 'datasets/Photos/LR_bicubic/X2'))}
    return opt


def test_shipped_compact_rcan_and_its_layer_through_test_pipeline(workspace):
    """options/test_rcan_compact_x2.yml and test_mcnet_rcan_compact_x2.yml with the shipped weights, run by
    test_pipeline on real photos: the layer keeps every output inside its eps ball and improves on the backbone."""
    ws = workspace
    psnr = {}
    for name in ('test_rcan_compact_x2.yml', 'test_mcnet_rcan_compact_x2.yml'):
        opt = _photos_test_option(ws, name, f'e2e_{name[:-4]}')
        opt['path']['pretrain_network_g'] = str(REPO_ROOT / opt['path']['pretrain_network_g'])
        if opt['network_g']['type'] == 'MCNetArch':
            backbone = opt['network_g']['backbone']
            backbone['path'] = str(REPO_ROOT / backbone['path'])
            opt['network_g']['settings']['solver'] = {'forward': {'tol': 1e-5, 'max_iter': 100}}
        in_process('test', ws, dump_option(opt, ws / f'{name}'))
        log = newest_log(ws / 'results' / opt['name'], 'test')
        psnr[name] = float(log.split('# psnr: ')[1].split()[0])
    mcnet_log = log
    line = next(ln for ln in mcnet_log.splitlines() if 'fidelity_float' in ln)
    worst = float(line.split('max ')[1].split()[0])
    # eps = eps_rms sqrt(#LR pixels): 0.0543 for the smallest LR photo (48x48), 0.0607 for the largest (48x60);
    # the backbone's outputs are outside their balls, so the layer's outputs sit on them
    assert 0.0543 < worst <= 0.0011320 * (48 * 60) ** 0.5 * (1 + 1e-5), line
    assert psnr['test_mcnet_rcan_compact_x2.yml'] > psnr['test_rcan_compact_x2.yml'], psnr


def test_train_with_ema_keeps_a_contractive_average(workspace):
    """train.ema_decay > 0 (BasicSR's EMA): checkpoints hold `params_ema` beside `params`, and the averaged
    denoiser is still within its spectral bound (each averaged kernel is scaled by its own operator norm)."""
    ws = workspace
    opt = tiny_train_option(ws, total_iter=4, name='e2e_mcnet_srcnn_x2_ema')
    opt['train']['ema_decay'] = 0.5
    opt['train']['optim_g']['lr'] = 1e-2  # big steps, so that the average differs visibly from the last weights
    in_process('train', ws, dump_option(opt, ws / 'train_ema.yml'))
    exp = ws / 'experiments' / 'e2e_mcnet_srcnn_x2_ema'
    ckpt = torch.load(exp / 'models' / 'net_g_4.pth', map_location='cpu')
    assert set(ckpt) == {'params', 'params_ema'}
    assert ckpt['params'].keys() == ckpt['params_ema'].keys()
    diff = max(float((ckpt['params'][k] - ckpt['params_ema'][k]).abs().max()) for k in ckpt['params'])
    assert diff > 1e-4, 'the EMA copy equals the trained weights'
    assert '# psnr:' in newest_log(exp, 'train')

    from basicsr.archs import build_network

    import mcnet_basicsr  # noqa: F401
    net = build_network(dict(opt['network_g']))
    net.load_state_dict(ckpt['params_ema'])
    net.eval()
    net.denoiser.update_spectral_norm()
    with torch.no_grad():
        for conv in net.denoiser.sn_convs():
            # operator norm of the kernel actually applied, on a 64 x 64 periodic grid: the largest singular value
            # of its transfer function (independent of the layer's own estimate, which ran on a 32 x 32 grid)
            k = conv.normalized_weight().double()
            spectrum = torch.fft.fft2(k, s=(64, 64)).permute(2, 3, 0, 1)
            norm = float(torch.linalg.matrix_norm(spectrum, ord=2).max())
            assert norm <= conv.bound * (1 + 1e-3), (norm, conv.bound)
