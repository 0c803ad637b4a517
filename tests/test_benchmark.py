"""benchmarks/benchmark.py: the quick CPU run (every section, JSON schema, markdown section) and its pieces
(imported by name: benchmarks/ is on the tests' sys.path, as on a command line's)."""
import importlib.util
import json
import subprocess
import sys

import pytest
import torch

from benchmarking import CONFIGS, configured
from conftest import REPO_ROOT, repo_env, shared_path

SCRIPT = REPO_ROOT / 'benchmarks' / 'benchmark.py'


@pytest.fixture(scope='module')
def bench():
    spec = importlib.util.spec_from_file_location('mcnet_benchmark_script', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_quick_run_writes_json_and_replaces_only_its_markdown_section(tmp_path):
    data = []
    if not (REPO_ROOT / 'datasets' / 'Set5' / 'HR_mod2').is_dir():  # not prepared (or not fetched) here
        data = ['--hr-root', str(shared_path('datasets'))]  # LR made from the HR images
    md = tmp_path / 'benchmarks.md'
    md.write_text('# Benchmarks\n\n## Operators\n\nkeep me\n\n<!-- benchmark:begin -->\nOLD\n<!-- benchmark:end -->\n'
                  '\n## Later section\n\nkeep me too\n')
    out = tmp_path / 'bench.json'
    cmd = [sys.executable, str(SCRIPT), '--quick', '--threads', '1', '--scales', '2', '--datasets', 'Set5',
           '--srcnn', 'ours', '--out-json', str(out), '--out-md', str(md), *data]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=repo_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    result = json.loads(out.read_text())
    meta, rows = result['meta'], result['rows']
    assert meta['schema_version'] == 1 and meta['quick'] is True and meta['reference'] == 'paper_200'
    assert meta['dncnn_flops_per_pixel'] == 2 * 9 * (1 * 64 + 4 * 64 * 64 + 64 * 1)  # DnCNN6, 64 ch, no bias
    assert all(r['status'] == 'ok' for r in rows), [r for r in rows if r['status'] != 'ok']
    sections = {r['section'] for r in rows}
    assert sections == {'periter', 'train', 'eval', 'big'}

    train = {r['name']: r for r in rows if r['section'] == 'train'}
    assert set(train) == {'implicit_2', 'implicit_4', 'implicit_paper', 'implicit_paper_graph'}
    # on the CPU the graph option is ignored: the same solves as the eager row
    assert train['implicit_paper_graph']['forward_iterations'] == train['implicit_paper']['forward_iterations']
    for r in train.values():
        assert {'seconds_per_step', 'peak_mem_mb', 'forward_iterations', 'loss', 'batch', 'lr_patch'} <= set(r)
        assert r['seconds_per_step'] > 0 and r['loss'] == r['loss']
    assert train['implicit_4']['forward_iterations'] == 4 and train['implicit_2']['backward_iterations'] >= 1

    evals = [r for r in rows if r['section'] == 'eval']
    assert {(r['backbone'], r['name']) for r in evals} == {
        (b, c) for b in ('srcnn', 'rcan') for c in ('paper_200', 'tol1e-4', 'fast_bf16_tf32', 'graph_tol1e-4')}
    # the CUDA-graph rows say when the graphs were not used (here: the CPU), and then equal their eager twin
    for b in ('srcnn', 'rcan'):
        g = next(r for r in evals if r['backbone'] == b and r['name'] == 'graph_tol1e-4')
        e = next(r for r in evals if r['backbone'] == b and r['name'] == 'tol1e-4')
        assert g['cuda_graph_used'] is False and 'CUDA graphs not used' in g['config_note']
        assert g['psnr'] == e['psnr'] and g['iterations'] == e['iterations']
    for r in evals:
        assert {'seconds_per_image', 'peak_mem_mb', 'iterations', 'psnr', 'fidelity_max', 'bound_seconds_per_image',
                'speedup_vs_reference', 'dpsnr_vs_reference'} <= set(r)
        assert r['fidelity_max'] <= r['eps_max'] + 1e-5  # consistency: eps = 0 (SRCNN), eps_rms > 0 (RCAN)
        assert 10 < r['psnr'] < 80
    ref = [r for r in evals if r['name'] == 'paper_200']
    assert all(r['iterations'] == 4 and r['dpsnr_vs_reference'] == 0 for r in ref)  # quick caps 200 at 4
    big = [r for r in rows if r['section'] == 'big']
    assert big and all(r['psnr'] is None and r['seconds_per_image'] > 0 for r in big)
    per = {r['name']: r for r in rows if r['section'] == 'periter'}
    assert set(per) == {'fp32', 'tf32'} and all('overhead_pct' in r for r in per.values())
    assert all(r['cuda_graph_used'] is False and r['anderson_graph_iter_ms'] > 0 for r in per.values())

    text = md.read_text()
    assert text.count('<!-- benchmark:begin -->') == 1 and text.count('<!-- benchmark:end -->') == 1
    assert 'OLD' not in text and 'keep me\n' in text and 'keep me too' in text
    assert text.index('## Operators') < text.index('<!-- benchmark:begin -->') < text.index('## Later section')
    assert 'implicit, 4 forward it.' in text


def test_flops_write_markdown_and_arguments(bench, tmp_path):
    from mcnet_basicsr.archs.dncnn_arch import DnCNN
    from timing import conv_flops_per_pixel
    assert conv_flops_per_pixel(DnCNN(num_feat=8, depth=3)) == 2 * 9 * (8 + 64 + 8)
    path = tmp_path / 'b.md'
    path.write_text('# Benchmarks\n\nother\n')
    bench.write_markdown(str(path), 'A\n')
    bench.write_markdown(str(path), 'B\n')
    text = path.read_text()
    assert text.startswith('# Benchmarks\n\nother\n') and '\nB\n' in text and '\nA\n' not in text
    args = bench.parse_args(['--configs', 'tol1e-4', 'paper_200'])
    assert args.configs == ['paper_200', 'tol1e-4']  # the reference first, always present
    assert bench.parse_args(['--quick']).device == 'cpu'


def test_configured_sets_and_restores_cudnn_autotuning():
    """A row's solver, backbone dtype, memory format, cuDNN autotuning, TF32 or extrapolation must not leak into the
    rows after it (the reference keeps cuDNN's heuristics and the plain output): the layer's settings are changed in a
    restoring block."""
    from mcnet_basicsr.archs.mcnet_arch import MCNetArch
    torch.manual_seed(0)
    net = MCNetArch(backbone='srcnn', operator={'type': 'bicubic', 'scale': 2}, denoiser={'depth': 3, 'num_feat': 8},
                    settings={'tile': 32})
    default = net.layer_settings
    conv = net.denoiser.sn_convs()[1].weight
    saved = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = False
        with configured(net, CONFIGS['graph_tol2e-5_autotune'], quick=False) as configured_net:
            assert configured_net is net and torch.backends.cudnn.benchmark is True
        assert torch.backends.cudnn.benchmark is False and net.layer_settings is default
        with configured(net, CONFIGS['graph_tf32_it50'], quick=False):
            assert net.layer_settings.allow_tf32 is True  # the arch applies it to its own forward only
            assert net.layer_settings.forward_solver.max_iter == 50
        assert net.layer_settings.allow_tf32 is False
        with configured(net, CONFIGS['graph_tol2e-5'], quick=False):
            assert torch.backends.cudnn.benchmark is False
            forward = net.layer_settings.forward_solver
            assert forward.tol == 2e-5 and forward.cuda_graph is True
            assert not net.layer_settings.backward_solver.cuda_graph and net.layer_settings.tile == 32
        assert net.layer_settings is default
        with configured(net, CONFIGS['graph_tol5e-5_extrap0.5'], quick=False):
            assert net.layer_settings.extrapolation == 0.5 and net.layer_settings.forward_solver.tol == 5e-5
        assert net.layer_settings.extrapolation == 0.0
        with configured(net, CONFIGS['graph5_bf16'], quick=True):
            assert net.layer_settings.backbone_dtype == 'bf16' and net.backbone_dtype is torch.bfloat16
            assert net.layer_settings.forward_solver.max_iter == 4  # quick: at most 4 iterations
            assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
        assert net.backbone_dtype is None and conv.is_contiguous()
        with configured(net, CONFIGS['graph_tol2e-5'], quick=False):
            assert net.layer_settings.extrapolation == 0.0
        with pytest.raises(RuntimeError, match='row failed'):
            with configured(net, CONFIGS['graph_tol2e-5_autotune'], quick=False):
                raise RuntimeError('row failed')
        assert torch.backends.cudnn.benchmark is False and net.layer_settings is default
    finally:
        torch.backends.cudnn.benchmark = saved
