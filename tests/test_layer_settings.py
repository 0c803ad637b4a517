"""MCNetArch's settings object (LayerSettings), its scoped and per-call use, the info a solve returns, the solver's
observer, and that results leave through return values, not module attributes."""
import re
from pathlib import Path

import pytest
import torch

from mcnet_basicsr.archs.layer_settings import LayerSettings
from mcnet_basicsr.archs.mcnet_arch import MCNetArch
from mcnet_basicsr.deq import SolverConfig, anderson_solve, fixed_point_solve
from mcnet_basicsr.utils.color import luma

ROOT = Path(__file__).resolve().parents[1]


def tiny_net(**settings):
    torch.manual_seed(0)
    return MCNetArch(backbone='srcnn', operator={'type': 'bicubic', 'scale': 2}, denoiser={'depth': 3, 'num_feat': 8},
                     settings=settings or None).double().eval()


@pytest.mark.parametrize('options, bad', [
    ({'tile': 0}, '0'), ({'tile': 2.5}, '2.5'), ({'allow_tf32': 'yes'}, "'yes'"),
    ({'backbone_dtype': 'int8'}, "'int8'"), ({'extrapolation': -1}, '-1'), ({'extrapolation': True}, 'True'),
    ({'observer': 3}, '3'), ({'colour': 'y'}, 'colour'),
    ({'solver': {'sideways': {}}}, 'sideways'), ({'solver': {'forward': {'tool': 1e-4}}}, 'tool'),
    ({'solver': {'backward': {'cuda_graph': True}}}, 'cuda_graph'),
])
def test_bad_settings_raise_one_line_naming_the_value(options, bad):
    with pytest.raises(ValueError) as err:
        LayerSettings.from_options(options)
    message = str(err.value)
    assert '\n' not in message and bad in message


def test_settings_options_round_trip_and_backward_follows_forward():
    s = LayerSettings.from_options({'tile': 32, 'extrapolation': 0.25,
                                    'solver': {'forward': {'preset': 'tables', 'cuda_graph': True}}})
    assert s.forward_solver == SolverConfig.preset('tables', cuda_graph=True)
    assert s.backward_solver == SolverConfig.preset('tables')  # forward less cuda_graph
    assert LayerSettings.from_options(s.to_options()) == s
    t = s.replace(forward_solver=SolverConfig(tol=1e-3))
    assert t.backward_solver == SolverConfig(tol=1e-3) and t.tile == 32
    with pytest.raises(Exception):
        s.tile = 8  # frozen


def test_scoped_settings_restore_on_exit_and_on_exception():
    net = tiny_net(tile=16)
    before = net.layer_settings
    with net.settings(tile=8, solver={'forward': {'tol': 1e-3}}) as s:
        assert net.layer_settings is s and s.tile == 8 and s.forward_solver.tol == 1e-3
        with net.settings(extrapolation=0.5):
            assert net.layer_settings.tile == 8 and net.layer_settings.extrapolation == 0.5
        assert net.layer_settings.extrapolation == 0.0
    assert net.layer_settings is before
    with pytest.raises(RuntimeError, match='inside'):
        with net.settings(tile=4):
            raise RuntimeError('inside')
    assert net.layer_settings is before
    with pytest.raises(ValueError):
        with net.settings(tile=-1):
            pass
    assert net.layer_settings is before
    with pytest.raises(AttributeError):
        net.backbone_dtype = torch.bfloat16  # settings change only through the settings mechanism
    # an attribute named as a setting would be ignored by every solve: refused, saying how settings change
    for name, value in (('tile', 8), ('extrapolation', 0.25), ('allow_tf32', True), ('solver', {}),
                        ('forward_solver', SolverConfig()), ('backward_solver', None), ('observer', print)):
        with pytest.raises(AttributeError, match=rf'{name} is a layer setting.*net\.settings\({name}='):
            setattr(net, name, value)
        assert not hasattr(net, name)
    assert net.layer_settings is before


def test_per_call_settings_do_not_leak_and_change_the_solve():
    net = tiny_net(solver={'forward': {'tol': 1e-8, 'max_iter': 60}})
    lr = torch.rand(1, 3, 10, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        x_loose, info_loose = net.run(lr, settings={'solver': {'forward': {'tol': 1e-2, 'max_iter': 60}}})
        assert net.layer_settings.forward_solver.tol == 1e-8
        x_tight, info_tight = net.run(lr)
        x_plain = net(lr)
    assert int(info_loose['forward'].iterations[0]) < int(info_tight['forward'].iterations[0])
    assert float(info_loose['forward'].residual[0]) <= 1e-2
    assert torch.equal(x_tight, x_plain)  # forward is run's output
    assert not torch.allclose(x_loose, x_tight)


def test_solve_info_is_what_the_solver_did():
    net = tiny_net(solver={'forward': {'tol': 1e-6, 'max_iter': 80}})
    lr = torch.rand(2, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        w, _ = net.backbone_estimate(lr)
        b = luma(lr)
        x, info = net.solve(w, b)
        f, z0, eps = net.fixed_point_problem(w, b)
        _, stats = anderson_solve(f, z0, tol=1e-6, max_iter=80)
    assert torch.equal(info['forward'].iterations, stats.iterations)
    assert torch.equal(info['forward'].residual, stats.residual)
    assert info['eps'] == eps == 0 and info['backward'].stats is None
    assert net.operator.residual_norm(x, b).max() < 1e-6  # eps = 0: consistent


@pytest.mark.parametrize('solver', ['anderson', 'fixed_point'])
def test_observer_sees_every_iteration_with_the_recorded_residuals(solver):
    torch.manual_seed(0)
    a = torch.randn(3, 20, dtype=torch.float64)
    q = torch.tensor([0.3, 0.6, 0.9], dtype=torch.float64)[:, None]

    def f(z):
        return a + q * torch.tanh(z - a)

    seen = []

    def observe(iteration, iterate, residual):
        seen.append((iteration, iterate.clone(), residual.clone()))

    run = anderson_solve if solver == 'anderson' else fixed_point_solve
    z, stats = run(f, torch.zeros_like(a), tol=1e-9, max_iter=200, observer=observe)
    assert [k for k, _, _ in seen] == list(range(1, stats.nfe + 1))
    assert torch.equal(torch.stack([r for _, _, r in seen]), torch.stack(stats.trace))
    # the iterate an observer sees is the one whose residual it is given (active samples)
    for k, iterate, residual in seen:
        fz = f(iterate)
        own = (fz - iterate).norm(dim=1) / (fz.norm(dim=1) + 1e-12)
        active = stats.iterations >= k
        assert torch.allclose(own[active], residual[active], rtol=1e-12, atol=0)
    unobserved_z, unobserved = run(f, torch.zeros_like(a), tol=1e-9, max_iter=200)
    assert torch.equal(unobserved_z, z) and torch.equal(unobserved.iterations, stats.iterations)


def test_layer_observer_matches_the_returned_stats():
    net = tiny_net(solver={'forward': {'tol': 1e-6, 'max_iter': 50}})
    lr = torch.rand(1, 1, 9, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    seen = []
    with torch.no_grad():
        _, info = net.run(lr, settings={'observer': lambda k, z, r: seen.append((k, float(r[0])))})
    stats = info['forward']
    assert [k for k, _ in seen] == list(range(1, stats.nfe + 1)) and stats.nfe == int(stats.iterations[0])
    assert [r for _, r in seen] == [float(t[0]) for t in stats.trace]
    assert net.layer_settings.observer is None


def test_no_results_left_on_modules():
    """Results are returned: no ``last_*`` attribute is assigned anywhere in the package, the lab or the scripts, and
    nothing outside the arch assigns its settings (``args``, the command line's parsed options, is not a layer)."""
    pattern = re.compile(r'\.last_(stats|fixed_point|iterates)\b|\b(?!self\b|args\b)\w+\.(tile|extrapolation|'
                         r'allow_tf32|backbone_dtype|forward_solver|backward_solver|fixed_point_map)\s*=[^=]')
    hits = []
    for folder in ('mcnet_basicsr', 'benchmarks', 'scripts'):
        for path in (ROOT / folder).rglob('*.py'):
            for n, line in enumerate(path.read_text(encoding='utf-8').splitlines(), 1):
                if pattern.search(line) and 'torch.backends' not in line:
                    hits.append(f'{path.relative_to(ROOT)}:{n}: {line.strip()}')
    assert not hits, hits


def test_constructor_takes_at_most_twelve_options():
    import inspect
    assert len(inspect.signature(MCNetArch.__init__).parameters) - 1 <= 12
