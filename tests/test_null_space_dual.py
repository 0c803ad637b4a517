"""MCNetArch's ``dual: null_space``: the ADMM dual kept in the null space of A, ``lam+ = P_N(lam + x+ - u)``.

The dual stays where A does not see it, the fixed point is the null-space split it claims, and on the case that made
it (the shipped anchor and prior, told OpenCV's cubic resizer at x2, which does not antialias) the plain map's dual
keeps growing while the null-space map converges. Its implicit gradient is checked with the full dual's in
``test_mcnet_arch.py``.
"""
import json

import numpy as np
import pytest
import torch

import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
from conftest import REPO_ROOT, sample_photo
from mcnet_basicsr.archs.layer_core import ChannelBalls
from mcnet_basicsr.data.degradations import degraded_lr_uint8
from mcnet_basicsr.data.kernel_family import gaussian_kernel
from mcnet_basicsr.evaluation.evaluate import read_option
from mcnet_basicsr.evaluation.kernel_table import build_row
from mcnet_basicsr.ops import build_degradation, build_operator
from test_mcnet_arch import DT, backbone_ckpt  # noqa: F401  (fixture)
from test_mcnet_arch import make_net as make_arch_net


def make_net(ckpt, scale, **kw):
    """test_mcnet_arch's layer (a random SRCNN, an 8-channel DnCNN6) at ``scale``, the dual in the null space, in
    float64."""
    return make_arch_net(ckpt, operator={'type': 'bicubic', 'scale': scale}, dual='null_space', **kw).to(DT).eval()


def photo_y(size):
    return torch.from_numpy(sample_photo('astronaut', size)).to(DT).mean(2)[None, None] / 255


OPERATORS = {
    'bicubic x2': lambda: build_operator({'type': 'bicubic', 'scale': 2}),
    'cv2-cubic x2': lambda: build_degradation('cv2-cubic', 2),
    'pil-bicubic x3': lambda: build_degradation('pil-bicubic', 3),
    'Gaussian blur x3': lambda: build_operator({'type': 'blur', 'scale': 3,
                                                'kernel': gaussian_kernel(15, 2.0, 1.2, 0.4)}),
}


@pytest.mark.parametrize('name', OPERATORS)
@pytest.mark.parametrize('eps', [0.0, 0.02])
def test_the_dual_stays_in_the_null_space_and_x_in_the_ball(backbone_ckpt, name, eps):  # noqa: F811
    op = OPERATORS[name]()
    net = make_net(backbone_ckpt, op.scale, beta=1.0)
    hr = photo_y(48)
    b = op(hr)
    w = hr + 0.05 * torch.randn(hr.shape, generator=torch.Generator().manual_seed(0), dtype=DT)
    net.refresh_prior()
    f = net.fixed_point_map(w, b, eps, operator=op)
    z = torch.cat([op.project(w, b, eps), torch.zeros_like(w)], dim=1)
    for _ in range(5):
        with torch.no_grad():
            z = f(z)
        x, lam = z[:, :1], z[:, 1:]
        assert float(lam.norm()) > 1e-3  # a dual that is there
        assert float(op(lam).norm()) <= 1e-12 * float(lam.norm()), name  # A does not see it
        assert float(op.residual_norm(x, b)) <= eps + 1e-10, name


def test_the_dual_of_each_channel_stays_in_its_null_space(backbone_ckpt):  # noqa: F811
    """RGB solved as one problem (a colour prior; each channel on its own ball): every channel's dual is unseen."""
    op = build_degradation('cv2-cubic', 2)
    net = make_net(backbone_ckpt, 2, beta=1.0)
    hr = torch.from_numpy(sample_photo('coffee', 48)).to(DT).permute(2, 0, 1)[None] / 255
    balls = ChannelBalls(op, 3)
    b = balls(hr)
    net.denoiser = torch.nn.Conv2d(3, 3, 3, padding=1, bias=False).to(DT)  # mixes the channels, as a colour prior
    f = net.fixed_point_map(hr.flip(-1), b, 0.0, operator=balls)
    z = torch.cat([balls.project(hr.flip(-1), b, 0.0), torch.zeros_like(hr)], dim=1)
    with torch.no_grad():
        for _ in range(3):
            z = f(z)
    lam = z[:, 3:]
    assert float(lam.norm()) > 1e-3
    for c in range(3):
        assert float(op(lam[:, c:c + 1]).norm()) <= 1e-12 * float(lam.norm())


def test_the_fixed_point_is_the_null_space_split(backbone_ckpt):  # noqa: F811
    """With eps = 0: ``x = x_b + P_N R(x + (beta / rho) P_N (w - x))``, ``x_b = P_S(0)`` the least-norm solution."""
    beta, rho = 0.5, 2.0
    net = make_net(backbone_ckpt, 2, beta={'init': beta, 'learn': False}, rho=rho,
                   settings={'solver': {'forward': {'tol': 1e-13, 'max_iter': 500}}})
    lr = build_operator({'type': 'bicubic', 'scale': 2})(photo_y(32))
    with torch.no_grad():
        w, _ = net.run_backbone(lr)
        x, info = net.solve(w, lr)
    assert bool(info['forward'].converged.all())
    op = net.operator

    def p_n(v):
        return op.project(v, torch.zeros_like(lr), 0.0)

    x_b = op.project(torch.zeros_like(w), lr, 0.0)
    with torch.no_grad():
        rhs = x_b + p_n(net.denoiser(x + beta / rho * p_n(w - x)))
    assert float((x - rhs).norm()) <= 1e-9 * float(x.norm())
    assert float(op.residual_norm(x, lr)) <= 1e-10


@pytest.mark.parametrize('scale', [2, 3, 4])
def test_the_resizer_rows_are_the_kernel_rows_with_the_dual_in_the_null_space(scale):
    """options/test_mcnet_ffdnet_unfolded16_resizers_x*.yml: the layer of the kernel row (prior, beta, rho, radius,
    channels) with ``dual: null_space`` around the anchor trained for kernels and resizers (the Table R row
    ``ffdnet_unfolded16_mix``), solved to Table R's tolerance 1e-4, its default operator MATLAB bicubic."""
    kernel = read_option(REPO_ROOT / 'options' / f'test_mcnet_ffdnet_unfolded16_x{scale}.yml')['network_g']
    resizer = read_option(REPO_ROOT / 'options' / f'test_mcnet_ffdnet_unfolded16_resizers_x{scale}.yml')['network_g']
    anchor = read_option(REPO_ROOT / 'options' / f'test_ffdnet_unfolded16_mix_x{scale}.yml')
    assert resizer.pop('dual') == 'null_space' and 'dual' not in kernel
    assert resizer.pop('operator') == {'type': 'bicubic', 'scale': scale}
    assert resizer['backbone'].pop('path') == anchor['path']['pretrain_network_g']
    assert anchor['network_g'] == resizer['backbone']['net'] == kernel['backbone']['net']
    assert resizer['settings'].pop('solver') == {'forward': {'tol': 1.0e-4, 'max_iter': 60}}
    del kernel['operator'], kernel['backbone']['path'], kernel['settings']['solver']
    assert resizer == kernel


def test_on_an_unantialiased_resizer_the_full_dual_grows_and_the_null_space_one_converges(monkeypatch):
    """The shipped x2 anchor and colour FFDNet (the layer ``mcnet-sr --kernel`` runs, and its resizer row), told
    OpenCV's cubic resizer on a photo's uint8 LR: 60 plain iterations of each map from ``(P_S(w), 0)``."""
    monkeypatch.chdir(REPO_ROOT)
    op = build_degradation('cv2-cubic', 2)
    hr = sample_photo('astronaut', 96)
    lr = degraded_lr_uint8(op, hr[:, :, ::-1].copy())[:, :, ::-1].astype(np.float32) / 255
    lr = torch.from_numpy(np.ascontiguousarray(lr)).permute(2, 0, 1)[None]
    trace = {}
    for dual, row in (('full', 'mcnet_ffdnet_unfolded16'), ('null_space', 'mcnet_ffdnet_unfolded16_resizers')):
        net, _ = build_row(row, 2, torch.device('cpu'), 1e-4, 100)
        assert net.dual == dual
        with torch.no_grad():
            w, cbcr = net.backbone_estimate(lr, operator=op)
            w, b, balls, _ = net.measured_problem(w, cbcr, lr, op)
            f, z, _ = net.fixed_point_problem(w, b.float(), operator=balls)
            for k in range(1, 61):
                fz = f(z)
                trace[dual, k] = (float(fz[:, 3:].norm() / fz[:, :3].norm()), float((fz - z).norm() / fz.norm()))
                z = fz
    # the full dual: still growing at 60 iterations, the iterates still moving
    assert trace['full', 60][0] > 1.3 * trace['full', 20][0], trace['full', 60]
    assert trace['full', 60][1] > 1e-3, trace['full', 60]
    # the null-space dual: a fixed point to float32 rounding
    assert trace['null_space', 40][1] < 1e-5, trace['null_space', 40]
    assert abs(trace['null_space', 60][0] - trace['null_space', 40][0]) < 1e-4


@pytest.mark.parametrize('row, dual', [('mcnet_ffdnet_unfolded16', 'full'),
                                       ('mcnet_ffdnet_unfolded16_resizers', 'null_space')])
def test_the_drift_lab_traces_the_row_it_is_given(tmp_path, monkeypatch, row, dual):
    """benchmarks/admm_drift.py on one photo: the record names the row and its dual, and its trace is that map's (the
    null-space dual's step falls tenfold within 8 iterations, the full dual's does not)."""
    import cv2

    import admm_drift  # the lab's (benchmarks/ is on the tests' sys.path)
    monkeypatch.chdir(REPO_ROOT)
    (tmp_path / 'Set5' / 'HR').mkdir(parents=True)
    cv2.imwrite(str(tmp_path / 'Set5' / 'HR' / 'head.png'), sample_photo('astronaut', 96)[:, :, ::-1])
    out = tmp_path / 'drift.json'
    admm_drift.main(['--scale', '2', '--degradation', 'cv2-cubic', '--row', row, '--iters', '8', '--every', '8',
                     '--data', str(tmp_path), '--out', str(out)])
    assert torch.is_grad_enabled()  # the lab leaves the process as it found it
    record = json.loads(out.read_text())
    assert (record['row'], record['dual']) == (row, dual)
    anchor = 'ffdnet_unfolded16_mix_x2.pth' if dual == 'null_space' else 'ffdnet_unfolded16_x2.pth'
    assert record['anchor'] == f'shipped {anchor}'  # the row's own backbone file
    trace = record['results']['head.png']['admm']
    assert set(trace) == {'1', '8'}
    assert (trace['8']['step'] < 0.1 * trace['1']['step']) == (dual == 'null_space'), trace
