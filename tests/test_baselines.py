"""Baselines (Bicubic, PnPADMM, TVTV) and scripts/reproduce_tables.py.

CPU only, small real photos. Set5 numbers use datasets/ when prepared, else build Set5 into a
temporary folder from ../shared (skipped when neither exists); PnP needs Ryu et al.'s DnCNN17 from
../shared; the SRCNN comparisons need experiments/pretrained_models (skipped otherwise).
"""
import json
import os
import subprocess
import sys

import cv2
import numpy as np
import pytest
import torch
import yaml
from basicsr.archs import build_network
from basicsr.metrics import calculate_psnr
from basicsr.utils import tensor2img
from basicsr.utils.matlab_functions import imresize as imresize_basicsr

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import REPO_ROOT, SHARED, load_script, repo_env, sample_photo, shared_path
from mcnet_basicsr.archs.baselines_arch import TVTV, Bicubic, PnPADMM, _grad, _grad_adjoint
from mcnet_basicsr.evaluation import tables
from mcnet_basicsr.evaluation.evaluate import evaluate_option
from mcnet_basicsr.ops import build_operator, imresize
from mcnet_basicsr.utils.color import rgb_to_ycbcr

reproduce_tables = load_script('reproduce_tables')

SRCNN_X2 = REPO_ROOT / 'experiments' / 'pretrained_models' / 'srcnn_955_imagenet_x2.pth'
RYU = ('weights', 'dncnn_provable_pnp', 'DnCNN_noise15.pth')
# Set5 bicubic, mean Y-PSNR. The project's protocol rounds the output's Y to uint8 and gives the often-quoted
# 33.66 / 30.39 / 28.42; BasicSR's validation rounds RGB first and gives 0.005-0.03 dB more. The test checks both
# on the same outputs.
SET5_BICUBIC = {2: 33.68, 3: 30.40, 4: 28.43}  # DESIGN.md's figures
SET5_BICUBIC_Y_UINT8 = {2: 33.66, 3: 30.39, 4: 28.42}  # the literature's figures


def lr_of(hr, scale):
    """LR exactly as the evaluation data: MATLAB bicubic of the RGB HR, rounded to uint8 (RGB uint8 in, out)."""
    return np.clip(np.round(imresize_basicsr(hr / 255.0, 1 / scale) * 255), 0, 255).astype(np.uint8)


def to_tensor(img):
    return torch.from_numpy(img.transpose(2, 0, 1).astype(np.float32) / 255)[None]


def psnr_y(out, hr_rgb, scale):
    """Project protocol: output rounded to uint8 (BasicSR's tensor2img), Y-PSNR, crop = scale."""
    return calculate_psnr(tensor2img([out.detach().clone()]), hr_rgb[:, :, ::-1], scale, test_y_channel=True)


def y_fidelity(out, lq, scale):
    op = build_operator({'type': 'bicubic', 'scale': scale})
    return float(op.residual_norm(rgb_to_ycbcr(out.double())[:, :1], rgb_to_ycbcr(lq.double())[:, :1]).max())


@pytest.fixture(scope='module')
def photo():
    hr = sample_photo('astronaut', 96)
    return hr, to_tensor(lr_of(hr, 2))


# ------------------------------------------------------------------------------------------ Bicubic
@pytest.mark.parametrize('scale', [2, 3, 4])
def test_bicubic_equals_basicsr_imresize(scale):
    for name, size in (('astronaut', (60, 48)), ('coffee', (36, 84))):
        lr = sample_photo(name, size).astype(np.float64) / 255
        ref = imresize_basicsr(lr, scale)  # HWC float
        out = build_network({'type': 'Bicubic', 'scale': scale})(to_tensor((lr * 255).astype(np.uint8)))
        assert out.shape == (1, 3, size[0] * scale, size[1] * scale)
        assert np.abs(out[0].permute(1, 2, 0).numpy() - ref).max() < 1e-5


def test_bicubic_runs_in_basicsr_srmodel(photo):
    """No learned parameters, no checkpoint: BasicSR's SRModel builds and tests it as it is."""
    from basicsr.models import build_model
    opt = {'model_type': 'SRModel', 'num_gpu': 0, 'is_train': False, 'dist': False, 'scale': 2,
           'network_g': {'type': 'Bicubic', 'scale': 2}, 'path': {'pretrain_network_g': None}, 'val': {}}
    model = build_model(opt)
    model.feed_data({'lq': photo[1]})
    model.test()
    assert torch.equal(model.get_current_visuals()['result'], imresize(photo[1], 2))


@pytest.fixture(scope='module')
def set5_root(tmp_path_factory):
    """Prepared Set5 (x2, x3, x4): datasets/ when there, else made from ../shared into a temporary folder."""
    local = REPO_ROOT / 'datasets'
    if all((local / 'Set5' / f'HR_mod{s}').is_dir() and (local / 'Set5' / 'LR_bicubic' / f'X{s}').is_dir()
           for s in (2, 3, 4)):
        return local
    src = SHARED / 'datasets'
    if not (src / 'Set5' / 'HR').is_dir():
        pytest.skip(f'needs datasets/Set5 (scripts/prepare_datasets.py) or {src}/Set5/HR')
    root = tmp_path_factory.mktemp('prepared')
    subprocess.run([sys.executable, str(REPO_ROOT / 'scripts' / 'prepare_datasets.py'), '--src', str(src), '--root',
                    str(root), '--scales', '2', '3', '4', '--eval-sets', 'Set5', '--train-sets'], check=True,
                   env=repo_env(), capture_output=True)
    return root


def _option(path, root):
    with open(REPO_ROOT / path) as f:
        opt = yaml.safe_load(f)
    opt['datasets'] = {k: v for k, v in opt['datasets'].items() if v['name'] == 'Set5'}
    for ds in opt['datasets'].values():
        for key in ('dataroot_gt', 'dataroot_lq'):
            ds[key] = str(root / ds[key][len('datasets/'):])
    return opt


@pytest.mark.slow
@pytest.mark.parametrize('scale', [2, 3, 4])
def test_bicubic_set5_psnr(set5_root, scale):
    opt = _option(f'options/test_bicubic_x{scale}.yml', set5_root)
    (rec, ) = evaluate_option(opt, torch.device('cpu'))
    assert (rec['method'], rec['backbone'], rec['images'], rec['iterations']) == ('bicubic', 'none', 5, None)
    # evaluate's protocol (the output's Y rounded to uint8, BasicSR's float Y of the uint8 HR): within
    # +-0.02 dB of the literature (33.670 / 30.398 / 28.426) and within 0.015 of DESIGN.md's figures
    assert rec['psnr'] == pytest.approx(SET5_BICUBIC_Y_UINT8[scale], abs=0.02)
    assert rec['psnr'] == pytest.approx(SET5_BICUBIC[scale], abs=0.015)
    # BasicSR's own validation rounds RGB instead: a little less noise in Y, a little higher
    assert rec['psnr_rgb_uint8'] == pytest.approx(SET5_BICUBIC[scale], abs=0.02)
    assert 0.0 < rec['psnr_rgb_uint8'] - rec['psnr'] < 0.02
    # the same outputs, Y computed from the float output and rounded to uint8, ground-truth Y rounded too:
    ds = opt['datasets']['test_1']
    psnrs = []
    for name in sorted(f for f in os.listdir(ds['dataroot_gt']) if f.endswith('.png')):
        gt = cv2.imread(os.path.join(ds['dataroot_gt'], name))[:, :, ::-1]
        lq = to_tensor(cv2.imread(os.path.join(ds['dataroot_lq'], name))[:, :, ::-1].copy())
        y_out = np.round(rgb_to_ycbcr(Bicubic(scale)(lq).double().clamp(0, 1))[0, 0].numpy() * 255)
        y_gt = np.round(rgb_to_ycbcr(to_tensor(gt.copy()).double())[0, 0].numpy() * 255)
        psnrs.append(calculate_psnr(y_out, y_gt, scale))
    assert np.mean(psnrs) == pytest.approx(SET5_BICUBIC_Y_UINT8[scale], abs=0.01)
    assert 0.005 < rec['psnr_rgb_uint8'] - np.mean(psnrs) < 0.04


# ------------------------------------------------------------------------------------------ PnP-ADMM
def test_pnp_is_mcnet_iteration_with_beta_zero(photo):
    """Two iterations against the textbook PnP-ADMM written out here (small random denoiser, float64)."""
    torch.manual_seed(0)
    net = PnPADMM({'type': 'bicubic', 'scale': 2}, denoiser={'depth': 4, 'num_feat': 8}, iterations=2).double()
    b = rgb_to_ycbcr(photo[1].double())[:, :1]
    op = build_operator({'type': 'bicubic', 'scale': 2})
    x = op.project(imresize(b, 2), b)
    lam = torch.zeros_like(x)
    with torch.no_grad():
        for _ in range(2):
            u = net.denoiser(x + lam)
            x_new = op.project(u - lam, b)
            lam, x = lam + x_new - u, x_new
        out, info = net.solve(b)
    assert (out - x).abs().max() < 1e-10
    assert info['forward'].iterations.tolist() == [2]


def test_pnp_consistent_and_better_than_bicubic(photo):
    hr, lq = photo
    net = build_network({'type': 'PnPADMM', 'operator': {'type': 'bicubic', 'scale': 2},
                         'denoiser': {'path': str(shared_path(*RYU))}, 'iterations': 3}).eval()
    with torch.no_grad():
        out, info = net.run(lq)
    assert y_fidelity(out, lq, 2) <= 1e-5
    assert psnr_y(out, hr, 2) > psnr_y(imresize(lq, 2), hr, 2) + 1.0  # astronaut 96x96: 28.5 -> 31.6 dB
    assert info['forward'].iterations.tolist() == [3]
    net.train()
    assert not net.denoiser.training  # BatchNorm keeps its running statistics


@pytest.mark.slow
def test_pnp_with_the_shipped_realsn_dncnn17(photo):
    """options/test_pnp_x2.yml as shipped (our RealSN-DnCNN17, no ../shared): consistent, far better than
    bicubic, and every convolution of the denoiser within its bound of 1."""
    hr, lq = photo
    with open(REPO_ROOT / 'options' / 'test_pnp_x2.yml') as f:
        opt = yaml.safe_load(f)['network_g']
    opt['denoiser']['path'] = str(REPO_ROOT / opt['denoiser']['path'])
    net = build_network(opt).eval()
    assert net.denoiser.spectral_norm and not net.denoiser.lipschitz_bounded  # SN convolutions + BatchNorm
    with torch.no_grad():
        out = net(lq)
        sigmas = [float(m.sn_sigma) for m in net.denoiser.sn_convs()]
    assert y_fidelity(out, lq, 2) <= 1e-5
    gain = psnr_y(out, hr, 2) - psnr_y(imresize(lq, 2), hr, 2)
    assert gain > 1.0, gain
    assert len(sigmas) == 17 and all(m.estimate_is_exact() for m in net.denoiser.sn_convs())
    for m in net.denoiser.sn_convs():  # the clipped kernels are within the bound as an operator
        spectrum = torch.fft.fft2(m.normalized_weight().double(), s=(32, 32)).permute(2, 3, 0, 1)
        assert float(torch.linalg.svdvals(spectrum).max()) <= 1 + 1e-6


def test_pnp_eps_ball():
    torch.manual_seed(0)
    b = torch.rand(2, 1, 12, 16, dtype=torch.float64)
    net = PnPADMM({'type': 'bicubic', 'scale': 2}, denoiser={'depth': 3, 'num_feat': 4}, iterations=2, eps=0.05)
    op = build_operator({'type': 'bicubic', 'scale': 2})
    with torch.no_grad():
        res = op.residual_norm(net.solve(b)[0].double(), b)
    assert (res <= 0.05 * (1 + 1e-6)).all()
    with pytest.raises(ValueError, match='either eps or eps_rms'):
        PnPADMM({'type': 'bicubic', 'scale': 2}, eps=0.1, eps_rms=0.1)


# ------------------------------------------------------------------------------------------ TV-TV
def test_gradient_adjoint():
    torch.manual_seed(0)
    x, d = torch.randn(2, 1, 7, 9, dtype=torch.float64), torch.randn(2, 2, 7, 9, dtype=torch.float64)
    assert float((_grad(x) * d).sum() - (x * _grad_adjoint(d)).sum()) == pytest.approx(0, abs=1e-12)


def test_tvtv_reaches_the_lp_optimum():
    """Anisotropic TV-TV with A x = b is a linear program: the ADMM result must reach its optimum."""
    scipy_optimize = pytest.importorskip('scipy.optimize')
    from scipy import sparse
    torch.manual_seed(0)
    s, h, w_ = 2, 12, 10
    hr = torch.rand(1, 1, h, w_, dtype=torch.float64)
    op = build_operator({'type': 'bicubic', 'scale': s})
    b = op(hr)
    w = hr + 0.1 * torch.randn_like(hr)
    net = TVTV({'type': 'Bicubic', 'scale': s}, {'type': 'bicubic', 'scale': s}, beta=0.5, rho=3.0, iterations=3000)
    x, _ = net.solve(w, b)
    n = h * w_
    eye = torch.eye(n, dtype=torch.float64).reshape(n, 1, h, w_)
    D = _grad(eye).reshape(n, -1).T.numpy()  # (2n, n)
    A = op(eye).reshape(n, -1).T.numpy()
    m = D.shape[0]
    # variables [x, t1, t2]: min 1't1 + beta 1't2, -t1 <= Dx <= t1, -t2 <= D(x - w) <= t2, A x = b
    c = np.concatenate([np.zeros(n), np.ones(m), 0.5 * np.ones(m)])
    Dw = D @ w.reshape(-1).numpy()
    I, Z = sparse.identity(m), sparse.csr_matrix((m, m))
    A_ub = sparse.vstack([sparse.hstack([D, -I, Z]), sparse.hstack([-D, -I, Z]), sparse.hstack([D, Z, -I]),
                          sparse.hstack([-D, Z, -I])])
    b_ub = np.concatenate([np.zeros(2 * m), Dw, -Dw])
    A_eq = sparse.hstack([sparse.csr_matrix(A), sparse.csr_matrix((A.shape[0], 2 * m))])
    lp = scipy_optimize.linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b.reshape(-1).numpy(), bounds=(None, None))
    assert lp.status == 0
    assert float(op.residual_norm(x, b)) < 1e-10
    assert float(net.objective(x, w)) == pytest.approx(lp.fun, rel=1e-4)


def test_tvtv_consistent_and_better(photo):
    hr, lq = photo
    net = TVTV({'type': 'Bicubic', 'scale': 2}, {'type': 'bicubic', 'scale': 2}, iterations=100)
    out = net(lq)
    assert y_fidelity(out, lq, 2) <= 1e-5
    assert psnr_y(out, hr, 2) > psnr_y(imresize(lq, 2), hr, 2) + 0.5  # 28.5 -> 29.5 dB
    w, _ = net.run_backbone(lq)
    b = rgb_to_ycbcr(lq.double())[:, :1]
    x, info = net.solve(w, b)
    start = net.operator.project(w.double(), b)
    assert float(net.objective(x.double(), w.double())) < 0.97 * float(net.objective(start, w.double()))  # 693 -> 661
    assert info['forward'].iterations.tolist() == [100]
    net.eps = 0.05  # the ball instead of the affine set
    x, info = net.solve(w, b)
    assert float(net.operator.residual_norm(x.double(), b)) <= 0.05 + 1e-6  # float32 output
    assert info['eps'] == 0.05


def test_tvtv_improves_srcnn(photo):
    if not SRCNN_X2.is_file():
        pytest.skip(f'needs {SRCNN_X2} (python scripts/convert_weights.py --type srcnn_mat)')
    hr, lq = photo
    net = TVTV({'net': {'type': 'SRCNN', 'padding_mode': 'replicate'}, 'path': str(SRCNN_X2), 'input': 'upsampled',
                'channels': 1}, {'type': 'bicubic', 'scale': 2}, iterations=100)
    srcnn = build_network({'type': 'SRCNN', 'scale': 2, 'padding_mode': 'replicate'})
    srcnn.load_state_dict(torch.load(SRCNN_X2, weights_only=False)['params'])
    with torch.no_grad():
        out, ref = net(lq), srcnn(lq)
    assert y_fidelity(out, lq, 2) <= 1e-5
    assert psnr_y(out, hr, 2) > psnr_y(ref, hr, 2)  # 31.42 -> 31.52 dB


@pytest.mark.slow
# ------------------------------------------------------------------------------------ reproduce_tables
def test_reproduce_tables_quick(tmp_path, monkeypatch):
    """--quick on one small image: the JSON has exactly the schema's keys and types."""
    hr = sample_photo('coffee', 48)
    for sub, img in (('HR_mod2', hr), ('LR_bicubic/X2', lr_of(hr, 2))):
        os.makedirs(tmp_path / 'data' / 'Set5' / sub)
        cv2.imwrite(str(tmp_path / 'data' / 'Set5' / sub / 'coffee.png'), img[:, :, ::-1])
    out_json, out_md = tmp_path / 'r.json', tmp_path / 'r.md'
    monkeypatch.chdir(tmp_path)  # the script runs its rows from the repository root itself
    records, skipped = reproduce_tables.main(
        ['--quick', '--data-root', str(tmp_path / 'data'), '--out-json', str(out_json), '--out-md', str(out_md)])
    data = json.loads(out_json.read_text())
    assert data == records and len(data) >= 1
    keys = set(tables.REQUIRED_KEYS) | set(tables.EXTRA_KEYS)
    for r in data:
        assert set(r) == keys
        assert r['method'] in {'bicubic', 'pnp', 'backbone', 'tvtv', 'mcnet'}
        assert r['backbone'] in {'none', 'srcnn', 'rdn', 'rcan', 'imdn', 'pan'}
        assert (r['scale'], r['dataset'], r['images'], r['device']) == (2, 'Set5', 1, 'cpu')
        for k in ('psnr', 'ssim', 'fidelity', 'seconds_per_image'):
            assert isinstance(r[k], float) and np.isfinite(r[k])
        assert r['iterations'] is None or isinstance(r['iterations'], float)
    by_method = {(r['method'], r['backbone'], r['backbone_weights']): r for r in data}
    for r in data:  # the float-Y protocol differs from the uint8 one by rounding only: a small difference
        assert abs(r['psnr_float_y'] - r['psnr']) < 0.3, (r['method'], r['psnr'], r['psnr_float_y'])
    assert by_method[('bicubic', 'none', '-')]['iterations'] is None
    for key, r in by_method.items():
        if key[0] in ('pnp', 'tvtv', 'mcnet'):
            assert r['iterations'] >= 1 and r['iterations_max'] >= r['iterations']
            if r['fidelity_over_eps'] is None:  # eps = 0
                assert r['fidelity'] < 1e-4
            else:
                assert r['fidelity_over_eps'] <= 1 + 1e-4
        if key[0] == 'mcnet':  # tolerance-stopped: whether the solves got there, and how close the worst came
            assert 0 <= r['converged'] <= 1 and isinstance(r['residual_max'], float) and r['residual_max'] >= 0
            assert (r['converged'] == 1) == (r['residual_max'] <= 1e-3)  # the --quick tolerance, one image
        else:  # fixed iteration counts or none: nothing to converge
            assert r['converged'] is None and r['residual_max'] is None
    skipped_labels = {label for label, _, _ in skipped}
    for method, backbone, weights, _ in tables.ROWS:  # every row ran or says why not
        label = tables.row_label(method, backbone, weights)
        assert ((method, backbone, weights) in by_method) != (label in skipped_labels), label
    md = out_md.read_text()
    assert 'QUICK SMOKE RUN' in md and 'Table 2' in md and 'Table 1' in md
    # --from-json from the same foreign directory: the records back unchanged, and every row without records listed
    # with the reason a fresh run gives (the option files are found: they resolve against the repository root)
    again, skipped_again = reproduce_tables.main(
        ['--from-json', out_json.name, '--data-root', str(tmp_path / 'data'), '--out-json', str(tmp_path / 'r2.json'),
         '--out-md', str(tmp_path / 'r2.md')])
    assert again == records
    assert {label for label, _, _ in skipped_again} == skipped_labels
    assert not [reason for _, _, reason in skipped_again if reason.startswith('no option file')]


def test_tables_render_from_the_shipped_records(tmp_path):
    """``reproduce_tables.py --from-json benchmarks/records/results.json`` renders the numbers of docs/results_tables.md
    (every table row; the skip list depends on which weights are here and is not compared)."""
    out_md = tmp_path / 'tables.md'
    reproduce_tables.main(['--from-json', str(REPO_ROOT / 'benchmarks' / 'records' / 'results.json'),
                           '--out-json', str(tmp_path / 'r.json'), '--out-md', str(out_md)])

    def table_rows(text):
        return [line for line in text.split('## Skipped')[0].splitlines() if line.startswith('|')]

    rendered = table_rows(out_md.read_text())
    shipped = table_rows((REPO_ROOT / 'docs' / 'results_tables.md').read_text())
    assert len(rendered) > 50 and rendered == shipped
