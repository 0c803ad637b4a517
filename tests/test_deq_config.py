"""mcnet_basicsr.deq.config: SolverConfig's defaults, validation and named presets."""
import pytest

from mcnet_basicsr.deq import PRESETS, SolverConfig


# --------------------------------------------------------------------------- config
def test_config_defaults_and_from_dict():
    c = SolverConfig()
    assert (c.solver, c.m, c.lam, c.mixing, c.tol, c.max_iter, c.stop) == ('anderson', 5, 1e-4, 1.0, 1e-5, 100, 'rel')
    assert SolverConfig.from_dict(None) == c
    c2 = SolverConfig.from_dict({'solver': 'fixed_point', 'tol': 1e-3, 'max_iter': 7})
    assert c2.solver == 'fixed_point' and c2.tol == 1e-3 and c2.max_iter == 7 and c2.m == 5
    assert SolverConfig.from_dict(c2.to_dict()) == c2


def test_config_rejects_unknown_keys():
    with pytest.raises(KeyError) as ei:
        SolverConfig.from_dict({'max_iters': 10})
    msg = str(ei.value)
    assert 'max_iters' in msg
    for k in ('solver', 'm', 'lam', 'mixing', 'tol', 'max_iter', 'stop'):
        assert repr(k) in msg


def test_config_accepts_yaml11_exponent_strings():
    # YAML 1.1 (BasicSR's loader) reads `tol: 1e-5` (no dot) as the string '1e-5'
    assert SolverConfig.from_dict({'tol': '1e-5', 'lam': '1e-4'}).tol == 1e-5


@pytest.mark.parametrize('bad,field', [
    ({'m': 0}, 'm'),
    ({'tol': 0.0}, 'tol'),
    ({'tol': -1e-3}, 'tol'),
    ({'max_iter': 0}, 'max_iter'),
    ({'solver': 'broyden'}, 'solver'),
    ({'stop': 'relative'}, 'stop'),
    ({'lam': -1.0}, 'lam'),
    ({'mixing': 0.0}, 'mixing'),
    ({'m': 2.5}, 'm'),
    ({'tol': 'small'}, 'tol'),
])
def test_config_rejects_bad_values(bad, field):
    with pytest.raises((ValueError, TypeError), match=field):
        SolverConfig.from_dict(bad)


def test_presets_are_the_documented_settings():
    """The numbers the option files and the CLI used before they named presets (behaviour unchanged)."""
    as_tuple = lambda c: (c.solver, c.m, c.lam, c.tol, c.max_iter)  # noqa: E731
    assert as_tuple(SolverConfig.preset('tables')) == ('anderson', 5, 1e-4, 1e-6, 300)
    assert as_tuple(SolverConfig.preset('train')) == ('anderson', 5, 1e-4, 1e-5, 100) == as_tuple(SolverConfig())
    assert as_tuple(SolverConfig.preset('train_backward')) == ('anderson', 5, 1e-4, 1e-4, 60)
    assert as_tuple(SolverConfig.preset('fast')) == ('anderson', 5, 1e-4, 1e-4, 100)
    assert as_tuple(SolverConfig.preset('paper')) == ('anderson', 5, 1e-4, 1e-5, 200)
    assert set(PRESETS) == {'tables', 'train', 'train_backward', 'fast', 'paper'}


def test_preset_keys_are_overridden_singly_and_unknown_presets_named():
    c = SolverConfig.from_dict({'preset': 'tables', 'cuda_graph': True, 'max_iter': 50})
    assert (c.tol, c.max_iter, c.cuda_graph) == (1e-6, 50, True)
    assert SolverConfig.preset('fast', tol=1e-3).tol == 1e-3
    with pytest.raises(KeyError, match="'fastest'.*presets are"):
        SolverConfig.from_dict({'preset': 'fastest'})
    with pytest.raises(KeyError, match='max_iters'):
        SolverConfig.from_dict({'preset': 'tables', 'max_iters': 3})
