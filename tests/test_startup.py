"""``mcnet-sr`` starts without basicsr, while ``import mcnet_basicsr`` still fills BasicSR's registries for everybody
else; the colour conversion that replaced basicsr's on that path gives the same bits."""
import subprocess
import sys

import pytest
import torch

from conftest import REPO_ROOT, repo_env

HEAVY = ('basicsr', 'torchvision', 'skimage', 'scipy.stats')


def _python(code, tmp_path=None):
    env = repo_env()
    proc = subprocess.run([sys.executable, '-c', code], cwd=tmp_path or REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout.strip().splitlines()[-1]


def _tiny_png(tmp_path):
    import cv2
    import numpy as np
    path = tmp_path / 'tiny.png'
    cv2.imwrite(str(path), (np.random.RandomState(0).rand(12, 12, 3) * 255).astype(np.uint8))
    return path


@pytest.mark.slow  # a fresh interpreter
def test_import_registers_for_basicsr_in_a_fresh_interpreter():
    out = _python("import mcnet_basicsr\n"
                  "from basicsr.archs import build_network\n"
                  "net = build_network({'type': 'MCNetArch', 'backbone': 'srcnn', 'operator': "
                  "{'type': 'bicubic', 'scale': 2}})\n"
                  "from basicsr.utils.registry import MODEL_REGISTRY, METRIC_REGISTRY\n"
                  "print(type(net).__name__, 'MCNetModel' in MODEL_REGISTRY, "
                  "'calculate_data_fidelity' in METRIC_REGISTRY)")
    assert out == 'MCNetArch True True'


@pytest.mark.slow  # a fresh interpreter
def test_cli_leaves_basicsr_out_then_registers_when_basicsr_comes(tmp_path):
    """The default srcnn run imports none of HEAVY; a later ``import mcnet_basicsr`` plus basicsr (a test, a
    script in the same process) still finds every type, the CLI's deferred registration notwithstanding."""
    photo = _tiny_png(tmp_path)
    out = _python(
        "import sys\nfrom mcnet_basicsr.cli import main as cli_main\n"
        f"status = cli_main.main([{str(photo)!r}, '-o', {str(tmp_path / 'out')!r}, '--scale', '2', "
        "'--device', 'cpu'])\n"
        f"heavy = sorted(m for m in sys.modules if m.startswith({HEAVY!r}))\n"
        "import mcnet_basicsr\n"
        "from basicsr.archs import build_network\n"
        "from basicsr.utils.registry import ARCH_REGISTRY, MODEL_REGISTRY\n"
        "net = build_network({'type': 'MCNetArch', 'backbone': 'srcnn', 'operator': {'type': 'bicubic', 'scale': 2}})\n"
        "print(status, heavy, 'SRCNN' in ARCH_REGISTRY, 'MCNetModel' in MODEL_REGISTRY)", tmp_path)
    assert out == '0 [] True True'
    assert (tmp_path / 'out' / 'tiny_x2.png').is_file()


@pytest.mark.slow  # a fresh interpreter
def test_cli_default_for_kernel_lr_leaves_basicsr_out(tmp_path):
    """The default run for blur-kernel LR at x2 (FFDNetHQS and its trained layer file, built from the card's settings)
    imports none of HEAVY either."""
    import numpy as np
    photo = _tiny_png(tmp_path)
    np.save(tmp_path / 'k.npy', np.full((3, 3), 1 / 9))
    out = _python(
        "import sys\nfrom mcnet_basicsr.cli import main as cli_main\n"
        f"status = cli_main.main([{str(photo)!r}, '-o', {str(tmp_path / 'out')!r}, '--scale', '2', "
        f"'--device', 'cpu', '--kernel', {str(tmp_path / 'k.npy')!r}, '--tol', '1e-3'])\n"
        f"print(status, sorted(m for m in sys.modules if m.startswith({HEAVY!r})))", tmp_path)
    assert out == '0 []'
    assert (tmp_path / 'out' / 'tiny_x2.png').is_file()


@pytest.mark.slow  # a fresh interpreter
def test_register_repairs_a_deferred_import():
    out = _python("import mcnet_basicsr, sys\n"
                  "from mcnet_basicsr import basicsr_import\n"
                  "basicsr_import.deactivate()  # not even the finder: register() alone must do it\n"
                  "before = 'basicsr' in sys.modules\n"
                  "mcnet_basicsr.register(); mcnet_basicsr.register()\n"
                  "from basicsr.utils.registry import ARCH_REGISTRY, DATASET_REGISTRY\n"
                  "print(before, 'MCNetArch' in ARCH_REGISTRY, 'BicubicPairDataset' in DATASET_REGISTRY)")
    assert out == 'False True True'


def test_cli_in_process_after_a_normal_import(tmp_path):
    """Both orders in one process: here the package is already imported (and registered) by other tests."""
    from basicsr.utils.registry import ARCH_REGISTRY

    import mcnet_basicsr  # noqa: F401
    from mcnet_basicsr.cli import main as cli_main
    photo = _tiny_png(tmp_path)
    assert cli_main.main([str(photo), '-o', str(tmp_path), '--scale', '2', '--device', 'cpu']) == 0
    assert 'MCNetArch' in ARCH_REGISTRY


@pytest.mark.slow  # a fresh interpreter
def test_console_main_exits_with_the_status(tmp_path):
    proc = subprocess.run([sys.executable, '-c', 'from mcnet_basicsr.cli.main import console_main; console_main()',
                           str(tmp_path / 'missing.png'), '-o', str(tmp_path / 'out'), '--scale', '2', '--device',
                           'cpu'], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
                          env=repo_env())
    assert proc.returncode == 1 and 'no such file or folder' in proc.stderr
    assert '0 of 1 image(s) done' in proc.stdout  # flushed before os._exit
    assert (tmp_path / 'out' / 'summary.csv').is_file()


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('y_only', [False, True])
def test_rgb_to_ycbcr_is_basicsrs_bit_for_bit(dtype, y_only):
    from basicsr.utils.color_util import rgb2ycbcr_pt

    import mcnet_basicsr  # noqa: F401  (the torchvision alias basicsr needs)
    from mcnet_basicsr.utils.color import rgb_to_ycbcr
    x = torch.rand(2, 3, 17, 23, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(dtype)
    assert torch.equal(rgb_to_ycbcr(x, y_only=y_only), rgb2ycbcr_pt(x, y_only=y_only))
