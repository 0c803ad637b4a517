"""A fresh clone without data or third-party weights: our entry points name each missing input of an option file
and the command that makes it (one line each, exit status 2), instead of a traceback from inside BasicSR."""
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, repo_env
from mcnet_basicsr.utils.checkpoint import load_state_dict
from mcnet_basicsr.utils.paths import SHIPPED_WEIGHTS_DIR, resolve_path
from mcnet_basicsr.zoo.assets import how_to_make, load_manifest, missing_option_inputs, option_inputs


@pytest.mark.slow
@pytest.mark.parametrize('entry', ['mcnet_basicsr/test.py', 'mcnet_basicsr/train.py', 'scripts/evaluate.py'])
def test_missing_inputs_are_named_with_their_command(entry, tmp_path):
    name = 'train_mcnet_srcnn_x3.yml' if entry.endswith('train.py') else 'test_mcnet_srcnn_x3.yml'
    # run from an empty folder: every relative path of the option file is missing there
    # this checkout's package (scripts/ import the installed one)
    proc = subprocess.run([sys.executable, str(REPO_ROOT / entry), '-opt', str(REPO_ROOT / 'options' / name)],
                          cwd=tmp_path, env=repo_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert all(line.startswith('error: ') and 'is missing; ' in line for line in lines), lines
    # data and third-party weights are read relative to the current folder, and the message says so
    assert all(f', relative to the current folder {tmp_path}) is missing' in line for line in lines), lines
    # the commands work from there: the repository's scripts by their absolute path, fetched into this folder
    scripts = REPO_ROOT / 'scripts'
    assert any('datasets/Set5/HR_mod3 (' in line and line.endswith(
        f'python {scripts}/fetch_assets.py Set5 --root . && python {scripts}/prepare_datasets.py --eval-sets Set5 '
        '--train-sets --scales 3') for line in lines), lines
    assert any('experiments/pretrained_models/srcnn_955_imagenet_x3.pth (network_g.backbone.path, ' in line and
               line.endswith(f'python {scripts}/fetch_assets.py srcnn_955_imagenet --root .') for line in lines), lines
    # the shipped weights the option file names (the layer, or the DnCNN6 training starts from) are the package's
    assert not any('mcnet_basicsr/weights/' in line for line in lines), lines
    if name.startswith('train'):
        assert any('datasets/T91/T91_HR_sub_x3.lmdb' in line and line.endswith(
            f'python {scripts}/prepare_datasets.py --eval-sets --train-sets T91 --scales 3') for line in lines), lines
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
    scripts = REPO_ROOT / 'scripts'
    monkeypatch.chdir(tmp_path)
    assert how_to_make('datasets/T91_BSD200/T91_BSD200_LR_sub_x4.lmdb') == \
        f'python {scripts}/fetch_assets.py T91 BSD200 --root . && python {scripts}/prepare_datasets.py --eval-sets ' \
        '--train-sets T91+BSD200 --scales 4'
    (tmp_path / 'datasets' / 'Set14' / 'HR').mkdir(parents=True)  # HR images there: only the preparation is left
    assert how_to_make('datasets/Set14/LR_bicubic/X2') == \
        f'python {scripts}/prepare_datasets.py --eval-sets Set14 --train-sets --scales 2'
    assert how_to_make('experiments/pretrained_models/DnCNN_noise15.pth') == \
        f'python {scripts}/fetch_assets.py dncnn17_ryu --root .'
    assert how_to_make('experiments/pretrained_models/RCAN_BIX2.pth').startswith('convert your copy')
    assert how_to_make('datasets/T91_BSD200_half/T91_BSD200_half_HR_sub_x2.lmdb') == \
        f'python {scripts}/fetch_assets.py T91 BSD200 --root . && python {scripts}/prepare_datasets.py --eval-sets ' \
        '--train-sets T91+BSD200_half --scales 2 --half BSD200'
    # in the repository root, the README's commands (fetch_assets.py writes there by default)
    monkeypatch.chdir(REPO_ROOT)
    assert how_to_make('experiments/pretrained_models/DnCNN_noise15.pth') == \
        'python scripts/fetch_assets.py dncnn17_ryu'


@pytest.mark.parametrize('target', [
    'datasets/Set5/HR_mod3', 'datasets/Set14/LR_bicubic/X2', 'datasets/T91/T91_LR_sub_x4.lmdb',
    'datasets/T91_BSD200_half/T91_BSD200_half_HR_sub_x2.lmdb', 'datasets/BSD200_half/HR',
    'experiments/pretrained_models/DnCNN_noise15.pth', 'experiments/pretrained_models/RCAN_BIX2.pth'])
def test_the_hints_commands_fill_what_the_option_file_reads_from_another_folder(target, tmp_path, monkeypatch):
    """Each command of a hint, read by its script's own argument parser in the folder where the hint is printed
    (not the repository), writes where the option file's relative path points from that folder; prepare_datasets.py
    reads its HR images where fetch_assets.py put them."""
    import re
    import shlex

    from conftest import load_script
    work = tmp_path / 'work'
    work.mkdir()
    monkeypatch.chdir(work)
    hint = how_to_make(target)
    hint = re.sub(r'^convert your copy .* with (.*) \(see .*$', r'\1', hint)  # the command of that sentence
    commands = [shlex.split(cmd) for cmd in hint.split(' && ')]
    written, hr_folders = set(), set()
    manifest = load_manifest()
    for argv in commands:
        assert argv[0] == 'python' and Path(argv[1]).is_file(), hint  # the script is found from this folder
        script = Path(argv[1]).stem
        if script == 'convert_weights':  # the hint names no input: the user's copy of the official weights
            written.add(str((Path(argv[argv.index('--out-dir') + 1]) / Path(target).name).resolve()))
            continue
        args = load_script(script).parse_args(argv[2:])
        if script == 'fetch_assets':
            for name in args.names:
                asset = manifest[name]
                written |= {str((Path(args.root) / out).resolve()) for out in asset.outputs()}
                hr_folders.add(str((Path(args.root) / asset.dest).resolve()))
        elif script == 'prepare_datasets':
            src = Path(args.src or args.root)
            made = set()
            for name in args.half:  # written under --root, read by the training sets there
                assert str((src / name / 'HR').resolve()) in hr_folders
                made.add(f'{name}_half')
                written.add(str((Path(args.root) / f'{name}_half' / 'HR').resolve()))
            for name in args.eval_sets:
                assert str((src / name / 'HR').resolve()) in hr_folders or (work / 'datasets' / name / 'HR').is_dir()
                for s in args.scales:
                    written |= {str((Path(args.root) / name / sub).resolve()) for sub in
                                (f'HR_mod{s}', f'LR_bicubic/X{s}')}
            for spec in args.train_sets:
                name = spec.replace('+', '_')
                for part in spec.split('+'):
                    assert part in made or str((src / part / 'HR').resolve()) in hr_folders
                for s in args.scales:
                    written |= {str((Path(args.root) / name / f'{name}_{kind}_sub_x{s}.lmdb').resolve())
                                for kind in ('HR', 'LR')}
    assert str((work / target).resolve()) in written, (hint, sorted(written))
    present = {'network_g': {'denoiser': {'depth': 6, 'path': str(tmp_path)}}, 'path': {'pretrain_network_g': None}}
    assert option_inputs(present) == [('network_g.denoiser.path', str(tmp_path))]
    assert missing_option_inputs(present) == []
    gone = str(tmp_path / 'start.pth')  # a learned start's weights are checked too, and a backbone's
    opt = {'network_g': {'start': {'depth': 8, 'path': gone}, 'backbone': {'net': 'srcnn', 'path': gone + '.b'}}}
    assert sorted(entry[:2] for entry in missing_option_inputs(opt)) == [
        ('network_g.backbone.path', gone + '.b'), ('network_g.start.path', gone)]


def test_shipped_weights_resolve_from_any_folder(tmp_path, monkeypatch):
    """``mcnet_basicsr/weights/<file>`` in an option file is the installed package's file wherever the command runs;
    a file at that path in the current folder wins; anything else is read as written, relative to the current
    folder (BasicSR's convention for data)."""
    import yaml
    monkeypatch.chdir(tmp_path)  # not the repository: no mcnet_basicsr/weights here
    with open(REPO_ROOT / 'options' / 'test_mcnet_rcan_compact_x2.yml') as f:
        opt = yaml.safe_load(f)
    keys = dict(option_inputs(opt))
    assert keys['network_g.backbone.path'] == 'mcnet_basicsr/weights/rcan_compact_x2.pth'
    assert resolve_path(keys['network_g.backbone.path']) == str(Path(SHIPPED_WEIGHTS_DIR) / 'rcan_compact_x2.pth')
    assert resolve_path('./mcnet_basicsr/weights/rcan_compact_x2.pth') == resolve_path(keys['network_g.backbone.path'])
    # only the data is missing here: its four folders, each relative to this folder
    assert sorted(key for key, _, _ in missing_option_inputs(opt)) == [
        'datasets.test_1.dataroot_gt', 'datasets.test_1.dataroot_lq', 'datasets.test_2.dataroot_gt',
        'datasets.test_2.dataroot_lq']
    # the one checkpoint loader reads the package's file through the same path
    state = load_state_dict(keys['path.pretrain_network_g'])
    assert state.keys() == load_state_dict(Path(SHIPPED_WEIGHTS_DIR) / 'mcnet_rcan_compact_x2.pth').keys()

    local = tmp_path / 'mcnet_basicsr' / 'weights' / 'rcan_compact_x2.pth'
    local.parent.mkdir(parents=True)
    local.write_bytes(b'')
    assert resolve_path('mcnet_basicsr/weights/rcan_compact_x2.pth') == 'mcnet_basicsr/weights/rcan_compact_x2.pth'
    for path in ('mcnet_basicsr/weights/no_such_layer.pth', 'datasets/Set5/HR_mod2', 'weights/rcan_compact_x2.pth'):
        assert resolve_path(path) == path
    assert how_to_make('mcnet_basicsr/weights/no_such_layer.pth').startswith(
        f'the installed package has no such file in {SHIPPED_WEIGHTS_DIR}')


def test_force_yml_values_are_read_as_basicsr_reads_them():
    """The check applies --force_yml as BasicSR does: a float in exponent form (``!!float1e-4``, which YAML itself
    refuses), a list, ~; a path set to ~ is not an input any more."""
    from mcnet_basicsr.zoo.assets import _apply_force_yml
    opt = {'train': {'optim_g': {'lr': 1e-3}, 'scheduler': {'milestones': [2000]}}, 'path': {'pretrain_network_g': 'x'}}
    _apply_force_yml(opt, ['train:optim_g:lr=!!float1e-4', 'train:scheduler:milestones=[20, 40]',
                           'path:pretrain_network_g=~'])
    assert opt['train'] == {'optim_g': {'lr': 1e-4}, 'scheduler': {'milestones': [20, 40]}}
    assert opt['path']['pretrain_network_g'] is None and option_inputs(opt) == []
