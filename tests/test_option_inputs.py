"""A fresh clone without data or third-party weights: our entry points name each missing input of an option file
and the command that makes it (one line each, exit status 2), instead of a traceback from inside BasicSR."""
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, repo_env
from mcnet_basicsr.zoo.assets import how_to_make, missing_option_inputs


@pytest.mark.slow
@pytest.mark.parametrize('entry', ['mcnet_basicsr/test.py', 'mcnet_basicsr/train.py', 'scripts/evaluate.py'])
def test_missing_inputs_are_named_with_their_command(entry, tmp_path):
    name = 'train_mcnet_srcnn_x3.yml' if entry.endswith('train.py') else 'test_mcnet_srcnn_x3.yml'
    # run from an empty folder: every relative path of the option file is missing there
    proc = subprocess.run([sys.executable, str(REPO_ROOT / entry), '-opt', str(REPO_ROOT / 'options' / name)],
                          cwd=tmp_path, env=repo_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert all(line.startswith('error: ') and 'is missing; ' in line for line in lines), lines
    assert any('datasets/Set5/HR_mod3 (' in line and line.endswith(
        'python scripts/fetch_assets.py Set5 && python scripts/prepare_datasets.py --eval-sets Set5 --train-sets '
        '--scales 3') for line in lines), lines
    assert any('experiments/pretrained_models/srcnn_955_imagenet_x3.pth (network_g.backbone_path)' in line and
               line.endswith('python scripts/fetch_assets.py srcnn_955_imagenet') for line in lines), lines
    if name.startswith('train'):
        assert any('datasets/T91/T91_HR_sub_x3.lmdb' in line and line.endswith(
            'python scripts/prepare_datasets.py --eval-sets --train-sets T91 --scales 3') for line in lines), lines
    assert not (tmp_path / 'results').exists() and not (tmp_path / 'experiments').exists()


@pytest.mark.slow
def test_force_yml_paths_are_the_ones_checked(tmp_path):
    opt = tmp_path / 'opt.yml'
    hr = tmp_path / 'hr'
    hr.mkdir()
    opt.write_text(f'name: t\ndatasets:\n  test_1: {{name: x, dataroot_gt: {tmp_path / "gone"}, dataroot_lq: {hr}}}\n')
    code = ('import sys; from mcnet_basicsr.zoo.assets import check_option_file_inputs; '
            'check_option_file_inputs(sys.argv[1:]); print("checked")')
    run = [sys.executable, '-c', code, '-opt', str(opt)]
    proc = subprocess.run(run, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and f'{tmp_path / "gone"} (datasets.test_1.dataroot_gt)' in proc.stderr
    proc = subprocess.run(run + ['--force_yml', f'datasets:test_1:dataroot_gt={hr}'], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == 'checked', proc.stderr


def test_how_to_make(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert how_to_make('datasets/T91_BSD200/T91_BSD200_LR_sub_x4.lmdb') == \
        'python scripts/fetch_assets.py T91 BSD200 && python scripts/prepare_datasets.py --eval-sets ' \
        '--train-sets T91+BSD200 --scales 4'
    (tmp_path / 'datasets' / 'Set14' / 'HR').mkdir(parents=True)  # HR images there: only the preparation is left
    assert how_to_make('datasets/Set14/LR_bicubic/X2') == \
        'python scripts/prepare_datasets.py --eval-sets Set14 --train-sets --scales 2'
    assert how_to_make('experiments/pretrained_models/DnCNN_noise15.pth') == \
        'python scripts/fetch_assets.py dncnn17_ryu'
    assert how_to_make('experiments/pretrained_models/RCAN_BIX2.pth').startswith('convert your copy')
    present = {'network_g': {'denoiser_path': str(tmp_path)}, 'path': {'pretrain_network_g': None}}
    assert missing_option_inputs(present) == []
    gone = str(tmp_path / 'start.pth')  # a learned start's weights are checked too
    assert [entry[:2] for entry in missing_option_inputs({'network_g': {'start_path': gone}})] == [
        ('network_g.start_path', gone)]
