"""scripts/search_beta.py, benchmarks/calibrate_beta.py and scripts/robustness.py on a tiny Set5.

CPU only: a two-photo "Set5" (48x48 HR, scikit-image photos) is prepared in a temporary folder
exactly as scripts/prepare_datasets.py lays it out; solvers are loose. Backbone weights: the
converted official SRCNN when experiments/pretrained_models has it, else the shipped SRCNN (same
layout); denoiser: the authors' DnCNN6 from ../shared when present, else the trained DnCNN6 inside our
shipped MCNet+SRCNN x2 layer (a random DnCNN6 is nearly the identity, and with an identity denoiser the
layer's fixed point is P_S(w) whatever beta is, which would make the beta search meaningless).
"""
import json

import cv2
import numpy as np
import pytest
import torch
import yaml

import calibrate_beta  # the lab's (benchmarks/ is on the tests' sys.path)
import mcnet_basicsr  # noqa: F401  (first: torchvision alias, registries)
import tolerance_sweep as sweep
from conftest import REPO_ROOT, SHARED, load_script, sample_photo
from mcnet_basicsr.archs.dncnn_arch import DnCNN
from mcnet_basicsr.evaluation.evaluate import load_selection_option
from mcnet_basicsr.evaluation.perturbations import PERTURBATIONS, perturb
from mcnet_basicsr.ops import imresize
from mcnet_basicsr.utils.color import rgb_to_ycbcr
from mcnet_basicsr.utils.files import replace_section

robustness = load_script('robustness')
search_beta = load_script('search_beta')

SRCNN_X2 = REPO_ROOT / 'experiments' / 'pretrained_models' / 'srcnn_955_imagenet_x2.pth'
SRCNN_X2_SHIPPED = REPO_ROOT / 'mcnet_basicsr' / 'weights' / 'srcnn_x2.pth'
DNCNN6 = SHARED / 'weights' / 'sr_mcnet_official' / 'dncnn6_realsn_relu' / 'sigma_0.00625_0.01250.pth'
RECORD_KEYS = {'method', 'backbone', 'scale', 'dataset', 'psnr', 'ssim', 'fidelity', 'fidelity_mean', 'iterations',
               'seconds_per_image', 'images', 'option', 'device', 'overrides'}


@pytest.fixture(scope='module')
def data_root(tmp_path_factory):
    """<root>/Set5/HR_mod2 and <root>/Set5/LR_bicubic/X2 from two photos (LR: MATLAB bicubic, uint8)."""
    root = tmp_path_factory.mktemp('data')
    (root / 'Set5' / 'HR_mod2').mkdir(parents=True)
    (root / 'Set5' / 'LR_bicubic' / 'X2').mkdir(parents=True)
    for name in ('astronaut', 'coffee'):
        hr = sample_photo(name, 48)
        t = torch.from_numpy(hr.transpose(2, 0, 1).astype(np.float64) / 255)
        lr = np.clip(np.round(imresize(t, 1 / 2).numpy().transpose(1, 2, 0) * 255), 0, 255).astype(np.uint8)
        cv2.imwrite(str(root / 'Set5' / 'HR_mod2' / f'{name}.png'), hr[:, :, ::-1])
        cv2.imwrite(str(root / 'Set5' / 'LR_bicubic' / 'X2' / f'{name}.png'), lr[:, :, ::-1])
    return root


@pytest.fixture(scope='module')
def weights(tmp_path_factory):
    """(SRCNN x2 checkpoint, DnCNN6 checkpoint) that exist here."""
    srcnn = SRCNN_X2 if SRCNN_X2.exists() else SRCNN_X2_SHIPPED
    if DNCNN6.exists():
        return str(srcnn), str(DNCNN6)
    layer = torch.load(SRCNN_X2_SHIPPED.parent / 'mcnet_srcnn_x2.pth', map_location='cpu', weights_only=True)['params']
    state = {k[len('denoiser.'):]: v for k, v in layer.items() if k.startswith('denoiser.')}
    DnCNN().load_state_dict(state)  # the layout a DnCNN6 checkpoint has
    path = tmp_path_factory.mktemp('weights') / 'dncnn6_from_shipped_layer.pth'
    torch.save({'params': state}, path)
    return str(srcnn), str(path)


# ------------------------------------------------------------------------------------------ search_beta
def test_search_beta(data_root, weights, tmp_path):
    srcnn, dncnn = weights
    out, md = tmp_path / 'search.json', tmp_path / 'results.md'
    md.write_text('# Results\n\nHand-written text.\n')
    argv = ['--scales', '2', '--grid', '0.005', '0.05', '--limit', '1', '--tol', '1e-2', '--max-iter', '5',
            '--data-root', str(data_root), '--device', 'cpu', '--denoiser-path', dncnn,
            '--set', f'network_g.backbone.path={srcnn}', '--out', str(out), '--out-md', str(md)]
    search_beta.main(argv)
    res = json.loads(out.read_text())
    assert {'dataset', 'option', 'denoiser_path', 'tol', 'max_iter', 'limit', 'grid', 'scales', 'records',
            'best'} <= set(res)
    assert (res['dataset'], res['grid'], res['scales'], res['tol']) == ('Set5', [0.005, 0.05], [2], 0.01)
    recs = res['records']
    assert [r['beta_init'] for r in recs] == [0.005, 0.05]
    for r in recs:
        assert RECORD_KEYS <= set(r)
        assert (r['method'], r['backbone'], r['dataset'], r['scale'], r['images']) == ('mcnet', 'srcnn', 'Set5', 2, 1)
        assert 'path.pretrain_network_g=~' in r['overrides']
        assert f"network_g.beta.init={r['beta_init']!r}" in r['overrides']
        assert r['fidelity'] <= 1e-5 and 1 <= r['iterations'] <= 5 and 20 < r['psnr'] < 60
    best = max(recs, key=lambda r: r['psnr'])
    assert res['best'] == {'2': {k: best[k] for k in ('beta_init', 'psnr', 'ssim', 'iterations')}}
    # beta is used: the two cells differ
    assert recs[0]['psnr'] != recs[1]['psnr']
    text = md.read_text()
    assert text.startswith('# Results\n\nHand-written text.\n')
    assert text.count('<!-- search_beta:begin -->') == 1 and '| 0.005 |' in text and '| 0.05 |' in text


def test_search_beta_uses_set5_only(tmp_path):
    opt = yaml.safe_load((REPO_ROOT / 'options' / 'test_mcnet_srcnn_x2.yml').read_text())
    assert {ds['name'] for ds in opt['datasets'].values()} == {'Set5', 'Set14'}
    opt['datasets'] = {k: v for k, v in opt['datasets'].items() if v['name'] == 'Set14'}
    path = tmp_path / 'set14_only.yml'
    path.write_text(yaml.safe_dump(opt))
    with pytest.raises(ValueError, match='no Set5 block'):
        load_selection_option(str(path), [], str(tmp_path))


# ------------------------------------------------------------------------------------------ calibrate_beta
def test_calibrate_beta_of_a_trained_layer(data_root, weights, tmp_path):
    srcnn, _ = weights
    layer = REPO_ROOT / 'mcnet_basicsr' / 'weights' / 'mcnet_srcnn_x2.pth'
    out, best_path = tmp_path / 'calib.json', tmp_path / 'best.pth'
    argv = [str(layer), '--scale', '2', '--grid', '0.25', '1.0', '4.0', '--limit', '1', '--data-root', str(data_root),
            '--device', 'cpu', '--set', f'network_g.backbone.path={srcnn}', '--set', 'network_g.denoiser.path=~',
            '--set', 'network_g.settings.solver.forward.tol=1e-3',
            '--set', 'network_g.settings.solver.forward.max_iter=8',
            '--out', str(out), '--save-best', str(best_path)]
    calibrate_beta.main(argv)
    res = json.loads(out.read_text())
    state = torch.load(layer, map_location='cpu', weights_only=True)['params']
    learned = float(state['log_beta'].exp())
    assert res['dataset'] == 'Set5' and res['learned_beta'] == pytest.approx(learned)
    recs = res['records']
    assert [r['beta_factor'] for r in recs] == [0.25, 1.0, 4.0]
    for r in recs:
        assert RECORD_KEYS <= set(r) and (r['dataset'], r['images'], r['scale']) == ('Set5', 1, 2)
        assert r['beta'] == pytest.approx(learned * r['beta_factor'])
        assert r['fidelity'] <= 1e-5 and 1 <= r['iterations'] <= 8
    assert len({round(r['psnr'], 6) for r in recs}) == 3, 'beta must change the output'
    best = max(recs, key=lambda r: r['psnr'])
    assert res['best']['beta_factor'] == best['beta_factor'] and res['best']['psnr'] == best['psnr']
    # the written layer is the input with beta scaled by the best factor, nothing else changed
    written = torch.load(best_path, map_location='cpu', weights_only=True)['params']
    assert set(written) == set(state)
    assert float(written['log_beta'].exp()) == pytest.approx(learned * best['beta_factor'], rel=1e-6)
    assert all(torch.equal(written[k], state[k]) for k in state if k != 'log_beta')


def test_calibrate_beta_rejects_bad_grids_and_layers(tmp_path):
    layer = str(REPO_ROOT / 'mcnet_basicsr' / 'weights' / 'mcnet_srcnn_x2.pth')
    with pytest.raises(SystemExit):  # the layer as trained must be a candidate
        calibrate_beta.main([layer, '--scale', '2', '--grid', '0.9', '1.1'])
    with pytest.raises(SystemExit):
        calibrate_beta.main([layer, '--scale', '2', '--grid', '0', '1.0'])
    bare = tmp_path / 'dncnn.pth'
    torch.save({'params': {'dncnn.0.weight': torch.zeros(1)}}, bare)
    with pytest.raises(ValueError, match='log_beta'):
        calibrate_beta.read_layer(str(bare))


# ------------------------------------------------------------------------------------------ robustness
def test_perturbations_deterministic(data_root):
    hr = cv2.imread(str(data_root / 'Set5' / 'HR_mod2' / 'coffee.png'))[:, :, ::-1]
    lr = cv2.imread(str(data_root / 'Set5' / 'LR_bicubic' / 'X2' / 'coffee.png'))[:, :, ::-1]
    for name in PERTURBATIONS:
        a = perturb(name, lr, hr, 2, np.random.default_rng(3))
        b = perturb(name, lr, hr, 2, np.random.default_rng(3))
        assert a.dtype == np.uint8 and a.shape == lr.shape and np.array_equal(a, b), name
        assert np.array_equal(a, lr) == (name == 'none'), name
    # the noise has the std it claims (rounding adds 1/12 to the variance)
    d = perturb('noise5', lr, hr, 2, np.random.default_rng(0)).astype(float) - lr
    assert np.sqrt(25 + 1 / 12) == pytest.approx(d.std(), rel=0.1)
    with pytest.raises(ValueError, match='Supported ones are'):
        perturb('noise3', lr, hr, 2, np.random.default_rng(0))


@pytest.mark.slow
def test_robustness_quick(data_root, weights, tmp_path):
    srcnn, _ = weights
    out, md = tmp_path / 'rob.json', tmp_path / 'results.md'
    md.write_text('# Results\n\nBefore.\n\n<!-- robustness:begin -->\nold\n<!-- robustness:end -->\n\nAfter.\n')
    base = ['--quick', '--backbones', 'srcnn', '--data-root', str(data_root), '--set-backbone',
            f'path.pretrain_network_g={srcnn}', '--set-mcnet', f'network_g.backbone.path={srcnn}',
            '--out', str(out), '--out-md', str(md)]
    robustness.main(base)
    res = json.loads(out.read_text())
    assert {'dataset', 'scale', 'seed', 'quick', 'perturbations', 'records', 'skipped'} <= set(res)
    assert (res['dataset'], res['scale'], res['quick'], res['skipped']) == ('Set5', 2, True, [])
    recs = res['records']
    # 7 perturbations x (SRCNN, MCNet) + the eps_rms variant on the 3 Gaussian ones
    assert len(recs) == 17
    cell = {(r['perturbation'], r['variant']): r for r in recs}
    for r in recs:
        assert RECORD_KEYS | {'perturbation', 'variant', 'label', 'eps_rms', 'b_change'} <= set(r)
        assert (r['backbone'], r['images'], r['device']) == ('srcnn', 1, 'cpu')
        assert r['method'] == ('backbone' if r['variant'] == 'backbone' else 'mcnet')
        if r['variant'] == 'mcnet':  # eps = 0: exactly consistent with the b it saw, whatever b is
            assert r['fidelity'] <= 1e-5, r['perturbation']
    # the perturbed b differs from the prepared one, more with more noise; the backbone departs from it
    change = {p: cell[(p, 'backbone')]['b_change'] for p in PERTURBATIONS}
    assert change['none'] == 0 and 0 < change['noise1'] < change['noise2'] < change['noise5']
    assert all(c > 0 for p, c in change.items() if p != 'none')
    fid = {p: cell[(p, 'backbone')]['fidelity'] for p in PERTURBATIONS}
    assert fid['none'] < fid['noise2'] < fid['noise5']
    # noise-aware eps: the ball's radius is the noise std on Y, and the output lies in it
    lr_numel = 24 * 24
    for p, sigma in robustness.NOISE_SIGMA.items():
        r = cell[(p, 'mcnet_eps_rms')]
        assert r['eps_rms'] == pytest.approx(sigma * 0.5742 / 255, rel=1e-3)
        assert 'network_g.eps=~' in r['overrides']
        # float32 output of a float64 projection: on the sphere up to float32 rounding
        assert 1e-5 < r['fidelity'] <= r['eps_rms'] * np.sqrt(lr_numel) * (1 + 1e-5)
    text = md.read_text()
    assert text.startswith('# Results\n\nBefore.\n\n<!-- robustness:begin -->\n')
    assert text.endswith('<!-- robustness:end -->\n\nAfter.\n') and '\nold\n' not in text
    assert text.count('<!-- robustness:begin -->') == 1 and '| noise5 |' in text and 'QUICK SMOKE RUN' in text

    # a second run replaces the section (one section, the new content), the rest stays
    robustness.main(base + ['--perturbations', 'jpeg90', '--eps-rms', 'none'])
    text2 = md.read_text()
    assert text2.count('<!-- robustness:begin -->') == 1 and text2.count('<!-- robustness:end -->') == 1
    assert '| jpeg90 |' in text2 and '| noise5 |' not in text2
    assert text2.startswith('# Results\n\nBefore.\n') and text2.endswith('\n\nAfter.\n')
    assert len(json.loads(out.read_text())['records']) == 2


def test_robustness_fidelity_is_against_perturbed_b(data_root, tmp_path):
    """b_change is ||Y(b') - Y(b)||_2 of the files make_lr_set writes (the b' every method reads)."""
    gt, lq = data_root / 'Set5' / 'HR_mod2', data_root / 'Set5' / 'LR_bicubic' / 'X2'
    change = robustness.make_lr_set('noise2', str(gt), str(lq), str(tmp_path / 'n2'), 2, seed=0)
    changes = []
    for name in ('astronaut.png', 'coffee.png'):
        new = cv2.imread(str(tmp_path / 'n2' / name))[:, :, ::-1].copy()
        old = cv2.imread(str(lq / name))[:, :, ::-1].copy()
        y = [rgb_to_ycbcr(torch.from_numpy(a.transpose(2, 0, 1) / 255.0)[None])[:, :1] for a in (new, old)]
        changes.append(float((y[0] - y[1]).norm()))
        # the noise on Y has about the std the eps_rms variant assumes
        assert float((y[0] - y[1]).std()) == pytest.approx(2 * robustness.Y_NOISE_GAIN / 255, rel=0.25)
    assert change == pytest.approx(np.mean(changes), rel=1e-12)


def test_robustness_skips_missing_pairs(data_root):
    pairs = [('nope', 'Nope', 'options/test_nope_x{s}.yml', 'options/test_mcnet_nope_x{s}.yml')]
    records, skipped = robustness.run(perturbations=['none'], pairs=pairs, data_root=str(data_root), quick=True,
                                      log=lambda *a: None)
    assert records == []
    assert skipped == [{'backbone': 'nope', 'label': 'Nope', 'reason': 'no option file options/test_nope_x2.yml; '
                        'no option file options/test_mcnet_nope_x2.yml'}]


def test_md_section_rejects_broken_markers(tmp_path):
    path = tmp_path / 'r.md'
    path.write_text('text\n<!-- x:end -->\n<!-- x:begin -->\n')
    with pytest.raises(ValueError, match='must appear once each'):
        replace_section(str(path), 'x', 'body')
    assert path.read_text() == 'text\n<!-- x:end -->\n<!-- x:begin -->\n'
    new = tmp_path / 'new.md'
    replace_section(str(new), 'x', 'one')
    replace_section(str(new), 'x', 'two')
    assert new.read_text() == '<!-- x:begin -->\ntwo\n<!-- x:end -->\n'


# ------------------------------------------------------------------------------------------ tolerance_sweep
def test_tolerance_sweep_matches_real_solves(data_root, tmp_path):
    """One recorded solve stands for a solve at every looser tolerance: each row's iterations and PSNR are those of
    the layer solved at that tolerance (mcnet-sr's model), and the tables' row is the tables' own output."""
    from mcnet_basicsr.metrics.y_uint8 import y_uint8_metrics
    from mcnet_basicsr.utils.color import luma
    from mcnet_basicsr.zoo.pretrained import build_pretrained_mcnet
    out = tmp_path / 'sweep.json'
    record = sweep.main(['--scale', '2', '--datasets', 'Set5', '--data-root', str(data_root), '--tols', '1e-3', '1e-4',
                         '1e-6', '--out', str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(record))
    rows = record['sets']['Set5']['images']
    assert sorted(rows) == ['astronaut', 'coffee']
    pairs = sweep.prepared_pairs(str(data_root), 'Set5', 2)
    assert all(np.array_equal(hr, cv2.imread(str(data_root / 'Set5' / 'HR_mod2' / f))) for f, hr, _ in pairs)
    for name, row in rows.items():
        its = [row[t][0] for t in ('0.001', '0.0001', '1e-06')]
        assert its == sorted(its) and its[-1] == row['tables_iterations'] and its[0] < its[-1]
        assert row['1e-06'][1] == row['tables_psnr']
        hr = cv2.imread(str(data_root / 'Set5' / 'HR_mod2' / f'{name}.png'))
        lr = next(lr for f, _, lr in pairs if f == f'{name}.png')  # the sweep's input (BasicSR's float32 LR)
        for tol, key in ((1e-3, '0.001'), (1e-6, 'tables')):
            net = build_pretrained_mcnet(2, solver={'preset': 'tables', 'tol': tol})
            with torch.no_grad():
                sr, info = net.run(lr)
            psnr = y_uint8_metrics(luma(sr.double()), hr, 2)[0]
            iterations = int(info['forward'].iterations[0])
            expected = row[key] if key != 'tables' else [row['tables_iterations'], row['tables_psnr']]
            assert iterations == expected[0]
            assert psnr == pytest.approx(expected[1], abs=2e-3)  # the RGB round trip may move a Y level
        # mcnet-sr's model begins at its learned start; rows are scored against the tables' setting (standard start)
        net = build_pretrained_mcnet(2, solver={'preset': 'tables'}, start=False)
        with torch.no_grad():
            assert y_uint8_metrics(luma(net(lr).double()), hr, 2)[0] == pytest.approx(row['reference_psnr'], abs=2e-3)
    summary = record['sets']['Set5']['summary']
    assert summary['1e-06']['dpsnr'] == pytest.approx(
        np.mean([r['tables_psnr'] - r['reference_psnr'] for r in rows.values()]), abs=1e-12)
    assert abs(summary['1e-06']['dpsnr']) < 0.01 and summary['0.001']['iterations'] < summary['tables_iterations']


def test_tolerance_sweep_scores_the_extrapolated_output(data_root):
    """With --extrapolation a row is what the layer returns with that extrapolation when solved at the tolerance;
    the tables' row stays the plain tables' solve."""
    from mcnet_basicsr.metrics.y_uint8 import y_uint8_metrics
    from mcnet_basicsr.utils.color import luma
    from mcnet_basicsr.zoo.pretrained import build_pretrained_mcnet
    args = ['--scale', '2', '--datasets', 'Set5', '--data-root', str(data_root), '--tols', '1e-3', '--limit', '1']
    plain, extrapolated = sweep.main(args), sweep.main(args + ['--extrapolation', '0.25'])
    assert extrapolated['extrapolation'] == 0.25
    (name, row), = extrapolated['sets']['Set5']['images'].items()
    plain_row = plain['sets']['Set5']['images'][name]
    assert row['tables_psnr'] == plain_row['tables_psnr'] and row['0.001'][0] == plain_row['0.001'][0]
    assert row['0.001'][1] != plain_row['0.001'][1]
    file, _, lr = sweep.prepared_pairs(str(data_root), 'Set5', 2, 1)[0]
    net = build_pretrained_mcnet(2, solver={'preset': 'tables', 'tol': 1e-3})
    with torch.no_grad(), net.settings(extrapolation=0.25):
        sr, info = net.run(lr)
    psnr = y_uint8_metrics(luma(sr.double()), cv2.imread(str(data_root / 'Set5' / 'HR_mod2' / file)), 2)[0]
    assert int(info['forward'].iterations[0]) == row['0.001'][0]
    assert psnr == pytest.approx(row['0.001'][1], abs=2e-3)  # the RGB round trip may move a Y level


def test_tolerance_sweep_explains_missing_data(tmp_path):
    with pytest.raises(SystemExit, match='prepare_datasets'):
        sweep.main(['--scale', '2', '--datasets', 'Set5', '--data-root', str(tmp_path), '--limit', '1'])


def test_cli_defaults_smoothest_window_and_its_selection_set():
    """benchmarks/cli_defaults.py's smooth regions: the window of least mean absolute neighbour difference (a flat
    patch among noise, on the stride's grid; a ramp's flatness is the mean of its two slopes), never taken from
    CBSD68."""
    import argparse

    import cli_defaults
    img = np.random.default_rng(0).integers(0, 256, (80, 112, 3)).astype(np.uint8)
    img[32:64, 48:80] = 128
    assert cli_defaults.smoothest_window(img, 32) == (0.0, 32, 48)
    y, x = np.mgrid[0:40, 0:40]
    ramp = np.repeat((2 * x + y)[:, :, None], 3, axis=2).astype(np.uint8)
    assert cli_defaults.smoothest_window(ramp, 40) == (1.5, 0, 0)
    with pytest.raises(SystemExit, match='CBSD68'):
        cli_defaults.smooth_regions(argparse.Namespace(smooth_set='CBSD68', data='datasets', smooth_images=0,
                                                       smooth_count=1))
