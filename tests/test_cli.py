"""``mcnet-sr``'s command line (``mcnet_basicsr.cli.options``): options are parsed and checked before anything heavy
is imported.

Each check runs a fresh interpreter, so what is in ``sys.modules`` is what the command line itself imported.
"""
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, repo_env

# the package itself is light to import (its registration waits for basicsr); its subpackages of torch code are not
HEAVY = ('torch', 'basicsr', 'cv2', 'skimage', 'mcnet_basicsr.ops', 'mcnet_basicsr.cli.inference')

# parse as the console script does, then report the exit status and which heavy modules got imported
PROBE = f"""
import sys
from mcnet_basicsr.cli import main as cli_main
try:
    code = cli_main.main(sys.argv[1:])
finally:
    print('heavy:', ','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)
sys.exit(code)
"""


def run_cli(*argv):
    env = repo_env()
    proc = subprocess.run([sys.executable, '-c', PROBE, *argv], env=env, capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[-1].startswith('heavy:'), proc.stderr
    return proc.returncode, proc.stdout, lines[:-1], lines[-1][len('heavy:'):].strip()


@pytest.mark.slow  # a fresh interpreter
def test_help_imports_nothing_heavy():
    code, out, err, heavy = run_cli('--help')
    assert code == 0 and err == []
    assert out.startswith('usage: mcnet-sr') and '--backbone' in out and '--tile' in out
    assert '--degradation' in out and 'cv2-area' in out and '--kernel' in out and '--noise' in out
    assert heavy == ''
    # the options in groups, as a person looks for them; formulas and explanations are in docs/Inference.md
    groups = ['input and output:', 'model:', 'degradation (what made the input):', 'solver:', 'device:']
    assert all(f'\n{group}\n' in out for group in groups), out
    assert [out.index(f'\n{group}\n') for group in groups] == sorted(out.index(f'\n{group}\n') for group in groups)
    assert 'docs/Inference.md' in out and '(beta + rho)' not in out and 'sqrt(eps^2' not in out


def test_every_option_has_a_one_line_help_in_its_group():
    """Each option's help fits the help column of an 80-column terminal (one line); each option is in one of the five
    groups."""
    from mcnet_basicsr.cli.options import build_parser
    parser = build_parser()
    titles = {'input and output', 'model', 'degradation (what made the input)', 'solver', 'device'}
    grouped = {id(a) for g in parser._action_groups if g.title in titles for a in g._group_actions}
    for action in parser._actions:
        if action.dest == 'help':
            continue
        assert id(action) in grouped, action.dest
        text = action.help % {'default': action.default} if '%' in action.help else action.help
        assert len(text) <= 54, (action.dest, text)


def unwrap(text):
    return ' '.join(text.split())


def marked_block(path, name):
    """The text between ``<!-- name: ... -->`` and ``<!-- /name -->`` in a Markdown file."""
    text = (REPO_ROOT / path).read_text()
    start = text.index(f'<!-- {name}: ')
    return text[text.index('-->', start) + 3:text.index(f'<!-- /{name} -->')]


def test_help_readme_and_docs_name_the_layers_the_cards_list():
    """The shipped layers per kind of LR, backbone and scale, and which backbones' layers are exact (eps = 0) or keep
    the uint8 quantisation ball: one text, read from the model cards, in --help, the README and docs/Inference.md; it
    names every card, and every layer file in mcnet_basicsr/weights has a card."""
    import re

    from mcnet_basicsr.cli import options as cli_options
    text = cli_options.shipped_layers_text()
    cards = cli_options.MODELS
    for family, section in cards['families'].items():
        sentence = text.split(f'For {cli_options.FAMILY_LR[family]}: ')[1].split('.')[0]
        listed = {}
        for group in sentence.split('; '):
            names, scales = re.fullmatch(r'([a-z0-9_, ]+?) (x\d(?:, x\d)*)', group).groups()
            for name in names.split(', '):
                listed[name] = {int(s[1:]) for s in scales.split(', ')}
        assert listed == {b: set(c[section]) for b, c in cards['backbones'].items() if c.get(section)}, family
    exact = [b for b, c in cards['backbones'].items() if c['eps_rms'] is None]
    assert f'(eps = 0): the layers of {", ".join(exact)};' in text
    layer_files = {c['layer'] for b in cards['backbones'].values() for section in cards['families'].values()
                   for c in b.get(section, {}).values() if 'layer' in c}  # an untrained layer has no file
    shipped = {p.name for p in (REPO_ROOT / 'mcnet_basicsr' / 'weights').glob('mcnet_*.pth') if '_start' not in p.name}
    assert layer_files == shipped
    help_text = cli_options.build_parser().format_help()
    assert unwrap(text) in unwrap(help_text)
    for path in ('README.md', 'docs/Inference.md'):
        assert unwrap(marked_block(path, 'shipped-layers')) == unwrap(text), path


@pytest.mark.slow  # a fresh interpreter
def test_bad_arguments_answer_with_one_line_and_import_nothing_heavy(tmp_path):
    cases = [
        (['a.png', '-o', str(tmp_path), '--scale', '5'], 'unsupported scale 5'),
        (['a.png', '-o', str(tmp_path), '--scale', '2', '--frobnicate'], 'unrecognized arguments: --frobnicate'),
        (['a.png', '--scale', '2'], 'the following arguments are required: -o/--output'),
        (['a.png', '-o', str(tmp_path), '--scale', '2', '--backbone', 'vgg'], "invalid choice: 'vgg'"),
        (['a.png', '-o', str(tmp_path), '--scale', '2', '--tile', '2'], '--tile must be >= 8'),
        (['a.png', '-o', str(tmp_path), '--scale', '2', '--force', '--skip-existing'], 'give one of them'),
        (['a.png', '-o', str(tmp_path), '--scale', '2', '--degradation', 'cv2-area', '--kernel', __file__],
         'give one of them'),
        (['a.png', '-o', str(tmp_path), '--scale', '2', '--degradation', 'gimp'], "invalid choice: 'gimp'"),
    ]
    for argv, what in cases:
        code, out, err, heavy = run_cli(*argv)
        assert code == 2 and out == '', (argv, out)
        assert len(err) == 1 and err[0].startswith('error: ') and what in err[0], (argv, err)
        assert heavy == '', (argv, heavy)


def test_the_heavy_part_raises_the_usage_error_of_the_command_line():
    from mcnet_basicsr.cli import inference
    from mcnet_basicsr.cli import options as cli_options
    assert inference.UsageError is cli_options.UsageError  # raised in the heavy part, caught the same way


def test_defaults_are_the_model_cards(tmp_path):
    """Without --backbone the command runs the card's default model of the family of its LR and the scale: MATLAB
    bicubic (also named), a --kernel, another --degradation; each model's --tol, --extrapolation and --iters defaults
    are its card's; --tol and --extrapolation always win."""
    from mcnet_basicsr.cli import options as cli_options
    from mcnet_basicsr.zoo.pretrained import MODELS, model_card
    parse = lambda *extra: cli_options.parse_args(['photo.png', '-o', 'out', *extra])  # noqa: E731
    assert cli_options.MODELS == MODELS  # the command line found the package's cards
    shipped = [(b, s) for b in MODELS['backbones'] for s in MODELS['backbones'][b].get('models', {})]
    assert len(shipped) == 13
    kernel = tmp_path / 'k.npy'
    kernel.write_bytes(b'')  # the parser checks that it exists
    lr_options = {'bicubic': [[], ['--degradation', 'matlab-bicubic']], 'kernels': [['--kernel', str(kernel)]],
                  'resizers': [['--degradation', 'pil-bicubic'], ['--degradation', 'cv2-area'],
                               ['--degradation', 'cv2-cubic'], ['--degradation', 'pil-bilinear'],
                               ['--degradation', 'pil-lanczos']]}
    for s in cli_options.SCALES:
        for family, cases in lr_options.items():
            for extra in cases:
                args = parse('--scale', str(s), *extra)
                default = MODELS['default'][family][s]
                layers = family
                if family == 'resizers':  # the stage-3 anchor's layer where its card routes the resizer (OpenCV's
                    # cubic at x2 and x3, area at x3 and x4, Pillow's bilinear and Lanczos), else the RCAN layer
                    # trained for resizers on OpenCV's LR (at x2 on Pillow's bicubic too), else its bicubic layer
                    pillow = ('pil-bilinear', 'pil-lanczos')
                    unfolded = {2: ('cv2-cubic', *pillow), 3: ('cv2-area', 'cv2-cubic', *pillow),
                                4: ('cv2-area', *pillow)}[s]
                    default = 'ffdnet_unfolded16' if extra[-1] in unfolded else 'rcan_compact'
                    routed = default == 'ffdnet_unfolded16' or s == 2 or extra[-1] in ('cv2-area', 'cv2-cubic')
                    layers = 'resizers' if routed else 'bicubic'
                card = model_card(default, s, layers)
                assert (args.backbone, args.layer_family) == (default, layers), (s, extra)
                assert (args.tol, args.extrapolation) == (card['tol'], card['extrapolation'])
    for b, s in shipped:
        args = parse('--scale', str(s), '--backbone', b)
        card = model_card(b, s)
        assert (args.tol, args.extrapolation, args.iters) == (card['tol'], card['extrapolation'], MODELS['max_iter'])
    assert parse('--scale', '2', '--tol', '1e-3').tol == 1e-3
    assert parse('--scale', '2', '--extrapolation', '0').extrapolation == 0
    with pytest.raises(cli_options.UsageError, match='--tol'):
        parse('--scale', '2', '--tol', '0')
    for bad in ('-0.5', 'nan', 'inf'):
        with pytest.raises(cli_options.UsageError, match='--extrapolation'):
            parse('--scale', '2', '--extrapolation', bad)


@pytest.mark.slow  # three fresh processes that import torch
def test_latency_benchmark_times_each_stage(tmp_path):
    """benchmarks/benchmark_cli.py runs the real command and a breakdown whose stages add up to the process's life."""
    import json
    out = tmp_path / 'cli.json'
    proc = subprocess.run([sys.executable, 'benchmarks/benchmark_cli.py', '--device', 'cpu', '--scale', '2', '--size',
                           '24', '--repeats', '1', '--json', str(out)], cwd=REPO_ROOT, env=repo_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(out.read_text())
    m = rec['median']
    # orders within one process only: a separate `import torch` process can take longer than the whole command
    # on a loaded 2-core machine (page cache, scheduling), so it is not compared with the command's times
    assert m['import_torch_s'] > 0 and 0 < m['cli_to_file_written_s'] <= m['cli_to_exit_s']
    assert m['torch'] > 0 and m['model'] > 0 and m['image'] > 0  # the breakdown process did each of them
    stages = ('interpreter', 'torch', 'package', 'model', 'setup', 'image', 'image_again', 'exit')
    assert all(m[k] >= 0 for k in stages) and m['iterations'] >= 1
    assert 'breakdown' in proc.stdout


# allocate and free one large block, then time the page faults of allocating and filling it again
REUSE_PROBE = """
import ctypes, resource, sys
from mcnet_basicsr.cli import main as cli_main
applied = cli_main.keep_freed_memory(min_ram=0) if sys.argv[1] == 'keep' else None
n = 256 << 20
block = ctypes.create_string_buffer(n)  # allocated and zero-filled: every page touched
del block
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = ctypes.create_string_buffer(n)
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.slow  # a fresh interpreter
@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='glibc (Linux) keeps memory through mallopt')
def test_the_command_reuses_freed_memory():
    """``mcnet-sr`` keeps what it frees (``keep_freed_memory``, in ``console_main``): a large block allocated again
    reuses its pages instead of faulting all of them in anew, as glibc's default does."""
    def faults(mode):
        proc = subprocess.run([sys.executable, '-c', REUSE_PROBE, mode], env=repo_env(), capture_output=True,
                              text=True, timeout=60, check=True)
        applied, count = proc.stdout.split()
        return applied, int(count)

    applied, kept = faults('keep')
    if applied != 'True':
        pytest.skip('this C library has no glibc mallopt')
    pages = (256 << 20) // 4096
    assert faults('default')[1] > pages // 2  # the default maps the block afresh: its pages fault in again
    assert kept < pages // 50


def test_freed_memory_is_kept_only_with_enough_memory():
    """Keeping freed memory raises the peak (6.5 against 4.3 GB for a 2048 x 2048 output on the CPU): below
    ``min_ram`` of physical memory nothing changes."""
    from mcnet_basicsr.cli import main as cli_main
    assert cli_main.keep_freed_memory(min_ram=1 << 60) is False


def test_the_command_keeps_memory_unless_tiled(monkeypatch, tmp_path):
    """``console_main`` runs ``main(keep_memory=True)``: memory is kept once the options are valid, not with ``--tile``
    (bounded memory asked for), and never for callers of ``main`` in their own process."""
    import types

    from mcnet_basicsr.cli import main as cli_main
    calls = []
    monkeypatch.setattr(cli_main, 'keep_freed_memory', lambda: calls.append('kept'))
    monkeypatch.setattr(cli_main, 'load_inference', lambda: types.SimpleNamespace(execute=lambda args, models: 0))
    argv = ['a.png', '-o', str(tmp_path), '--scale', '2']
    assert cli_main.main(argv) == 0 and calls == []
    assert cli_main.main(argv, keep_memory=True) == 0 and calls == ['kept']
    assert cli_main.main(argv + ['--tile', '64'], keep_memory=True) == 0 and calls == ['kept']
    assert cli_main.main(argv + ['--scale', '5'], keep_memory=True) == 2 and calls == ['kept']


def test_degradation_names_are_the_operators():
    """The command line lists the degradations without importing torch: the same names as the package's."""
    from mcnet_basicsr.cli import options as cli_options
    from mcnet_basicsr.ops import DEGRADATIONS, MatlabBicubicDownsample, build_degradation
    assert cli_options.DEGRADATIONS == tuple(DEGRADATIONS)
    assert type(build_degradation(cli_options.DEFAULT_DEGRADATION, 2)) is MatlabBicubicDownsample


def test_measurement_options_and_their_defaults(tmp_path):
    """--degradation (default MATLAB bicubic), --kernel (a file), --noise (>= 0), --channels (y with MATLAB bicubic,
    rgb with another operator unless given); each bad value is a UsageError naming it."""
    from mcnet_basicsr.cli import options as cli_options
    kernel = tmp_path / 'k.npy'
    kernel.write_bytes(b'')  # the parser checks that it exists; reading it is the heavy part's
    parse = lambda *extra: cli_options.parse_args(['photo.png', '-o', str(tmp_path / 'out'), '--scale', '2',  # noqa
                                                   *extra])
    args = parse()
    assert (args.degradation, args.kernel, args.kernel_index, args.noise, args.channels) == \
        ('matlab-bicubic', None, None, 0.0, 'y')
    assert parse('--degradation', 'matlab-bicubic').channels == 'y'
    assert (parse('--degradation', 'cv2-area').channels, parse('--kernel', str(kernel)).channels) == ('rgb', 'rgb')
    srcnn = ['--backbone', 'srcnn']  # a layer that runs on Y too
    args = parse('--kernel', str(kernel), '--kernel-index', '3', '--channels', 'y', '--noise', '2.5', *srcnn)
    assert (args.degradation, args.kernel_index, args.channels, args.noise) == (None, 3, 'y', 2.5)
    assert parse('--degradation', 'pil-bicubic', '--channels', 'y', *srcnn).channels == 'y'
    # the default for such LR, FFDNetPnP's layer, denoises R, G and B together: rgb, on MATLAB bicubic too
    assert parse('--backbone', 'ffdnet_pnp').channels == 'rgb'
    cases = [
        (['--degradation', 'cv2-area', '--kernel', str(kernel)], 'give one of them'),
        (['--kernel-index', '1'], '--kernel-index picks a kernel of a --kernel .mat file'),
        (['--boundary', 'reflect'], '--boundary reflect says how a --kernel blur met the borders; give --kernel'),
        (['--kernel', str(kernel), '--kernel-index', '-1'], '--kernel-index is 0-based and must be >= 0, got -1'),
        (['--kernel', str(tmp_path / 'nope.npy')], 'nope.npy: --kernel file not found'),
        (['--noise', '-1'], '--noise must be a finite number >= 0'),
        (['--noise', 'nan'], '--noise must be a finite number >= 0'),
        (['--degradation', 'gimp'], "invalid choice: 'gimp' (choose from 'matlab-bicubic', "),
        (['--channels', 'ycbcr'], "invalid choice: 'ycbcr' (choose from 'y', 'rgb')"),
        (['--kernel-index', 'two', '--kernel', str(kernel)], "invalid int value: 'two'"),
        (['--kernel', str(kernel), '--channels', 'y'],
         '--channels y: the ffdnet_unfolded16 layer runs with --channels rgb'),
        (['--backbone', 'ffdnet_pnp', '--channels', 'y'], 'runs with --channels rgb only'),
    ]
    for extra, what in cases:
        with pytest.raises(cli_options.UsageError) as err:
            parse(*extra)
        assert what in str(err.value) and '\n' not in str(err.value), (extra, str(err.value))


def test_the_console_script_names_the_entry_point():
    """setup.py's ``mcnet-sr`` console script is :func:`mcnet_basicsr.cli.main.console_main`, and nothing of the
    command is a top-level module any more."""
    import importlib
    import re
    text = (REPO_ROOT / 'setup.py').read_text(encoding='utf-8')
    module, func = re.search(r"'mcnet-sr=([\w.]+):(\w+)'", text).groups()
    assert (module, func) == ('mcnet_basicsr.cli.main', 'console_main')
    assert callable(getattr(importlib.import_module(module), func))
    assert re.search(r"py_modules=\['mcnet_basicsr_hook'\]", text) and not (REPO_ROOT / 'mcnet_sr_cli.py').exists()
