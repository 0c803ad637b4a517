"""benchmarks/kernel_prior_study.py on one tiny image: the rows are the kernel layer as shipped and the same layer with
only its beta scaled, PAN alone and PnP, on the recipe's own validation draws. Needs the official PAN weights (converted
from ../shared by scripts/fetch_assets.py)."""
import subprocess
import sys

import cv2
import numpy as np
import pytest
import torch

from conftest import REPO_ROOT, SHARED, sample_photo, shared_path


@pytest.fixture(scope='module')
def study_root(tmp_path_factory):
    shared_path('weights')
    root = tmp_path_factory.mktemp('study')
    proc = subprocess.run([sys.executable, 'scripts/fetch_assets.py', '--root', str(root), '--from', str(SHARED),
                           'pan'], cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (root / 'Set5' / 'HR').mkdir(parents=True)
    cv2.imwrite(str(root / 'Set5' / 'HR' / 'coffee.png'), sample_photo('coffee', (48, 40))[:, :, ::-1])
    for name in ('options', 'mcnet_basicsr'):  # option files name their weights relative to the repository root
        (root / name).symlink_to(REPO_ROOT / name)
    return root


@pytest.mark.slow
def test_study_rows_differ_from_the_shipped_layer_by_beta_alone(study_root, monkeypatch):
    import kernel_prior_study as study  # the lab's (benchmarks/ is on the tests' sys.path)
    monkeypatch.chdir(study_root)
    results = study.measure(4, torch.device('cpu'), 1e-4, [1.0, 1e-6], str(study_root))
    assert list(results) == ['pan', 'layer', 'layer_beta*1', 'layer_beta*1e-06', 'pnp']
    assert results['layer_beta*1']['per_image'] == results['layer']['per_image']  # nothing else changed
    beta = results['layer']['beta_at_noise_0']
    assert results['layer_beta*1e-06']['beta_at_noise_0'] == pytest.approx(1e-6 * beta, rel=1e-5)
    assert all(np.isfinite(r['psnr']) for r in results.values()) and results['pnp']['iterations'] is None
    # every row sees the same draws: the validation set is seeded
    data, again = study.validation_set(4, str(study_root))[0], study.validation_set(4, str(study_root))[0]
    assert torch.equal(data['kernel'], again['kernel']) and float(data['noise_sigma']) == float(again['noise_sigma'])
