"""What the README promises a new user: the set-up commands in the order a CPU-only machine runs them, what the
layers guarantee about consistency, and how long the tests take."""
import re

from conftest import REPO_ROOT

CPU_TORCH = 'pip install torch==2.14.1 torchvision==0.29.1 --index-url https://download.pytorch.org/whl/cpu'


def readme():
    return (REPO_ROOT / 'README.md').read_text()


def code_lines(text):
    return [line.strip() for line in text.splitlines() if line.startswith('    ')]


def test_the_cpu_only_install_is_a_command_of_its_own_before_the_demo():
    lines = code_lines(readme())
    demo = next(i for i, line in enumerate(lines) if line.endswith('python -m mcnet_basicsr.demo'))
    assert CPU_TORCH in lines and lines.index(CPU_TORCH) < demo
    # the CPU build first, then the default command: pip keeps the torch that is there
    assert lines[demo].startswith('pip install torch==2.14.1 torchvision==0.29.1 && ')


def test_the_opening_says_which_layers_are_exact_and_which_keep_the_quantisation_ball():
    from mcnet_basicsr.cli import options as cli_options
    opening = readme().split('![')[0]
    assert 'exactly consistent with the LR input' not in opening
    backbones = cli_options.MODELS['backbones']
    exact = [c['name'] for c in backbones.values() if c['eps_rms'] is None]
    assert exact == ['SRCNN'] and "SRCNN's layers use eps = 0: their float output reproduces `b` to float precision" \
        in ' '.join(opening.split())
    assert all(c['eps_rms'] == 'quantization' for c in backbones.values() if c['eps_rms'] is not None)
    assert 'The other layers keep `||Ax-b||` within the uint8 quantisation ball' in ' '.join(opening.split())


def test_the_readme_says_how_long_the_tests_take():
    text = ' '.join(readme().split())
    assert re.search(r'test suite \(CPU; about 16 minutes on 2 cores, install included\)', text)
