"""The solver progress bar's length: the iteration at which the residual is expected to reach the tolerance."""
import io

import pytest
import torch
from tqdm import tqdm

import mcnet_basicsr.utils.progress as progress
from mcnet_basicsr.deq import fixed_point_solve


def contraction(q):
    """``f(z) = a + q (z - a)``: the relative residual falls by about ``q`` per iteration; and a start near the fixed
    point, as the backbone gives."""
    a = torch.linspace(1, 2, 64)[None]
    return (lambda z: a + q * (z - a)), 1.2 * a


def iterate(q, tol, max_iter, observer):
    """The iterations the solver needs on :func:`contraction` ``q`` (its rel. residual to ``tol``), observed by
    ``observer``; the same solve unobserved gives the same iterate."""
    f, z0 = contraction(q)
    z, stats = fixed_point_solve(f, z0, tol=tol, max_iter=max_iter, observer=observer)
    assert torch.equal(fixed_point_solve(f, z0, tol=tol, max_iter=max_iter)[0], z)  # observing changes nothing
    return int(stats.iterations[0])


@pytest.fixture
def bars(monkeypatch):
    made = []

    class RecordingBar(tqdm):

        def __init__(self, *args, **kwargs):
            kwargs.update(disable=False, file=io.StringIO())  # a disabled bar would not count
            self.totals = []  # what the bar showed as its length, at every refresh after the first iteration
            super().__init__(*args, **kwargs)
            self.totals.clear()
            made.append(self)

        def refresh(self, *args, **kwargs):
            self.totals.append(self.total)
            return super().refresh(*args, **kwargs)

    monkeypatch.setattr(progress, 'tqdm', RecordingBar)
    return made


def test_bar_length_predicts_the_iterations_to_tolerance(bars):
    for q, tol, max_iter in ((0.5, 1e-6, 100), (0.8, 1e-4, 100), (0.9, 1e-8, 60)):
        with progress.solver_progress(max_iter, 'solve', tol=tol) as observer:
            needed = iterate(q, tol, max_iter, observer)
        bar = bars[-1]
        assert bar.n == needed
        assert bar.totals[0] == max_iter and all(t <= max_iter for t in bar.totals)
        # from the third residual on (the first rate) within 15%, and within one iteration over the second half
        assert all(abs(t - needed) <= 0.15 * needed for t in bar.totals[2:]), (q, tol, bar.totals, needed)
        assert all(abs(t - needed) <= 1 for t in bar.totals[needed // 2:]), (q, tol, bar.totals, needed)
    assert bars[-1].totals[-1] == 60 and needed == 60  # capped at max_iter when the tolerance is out of reach


def test_without_tol_the_bar_length_is_max_iter(bars):
    with progress.solver_progress(40, 'solve') as observer:
        needed = iterate(0.5, 1e-6, 40, observer)
    assert bars[-1].n == needed < 40 and bars[-1].total == 40


def test_a_disabled_bar_is_no_observer(bars):
    with progress.solver_progress(40, 'solve', enabled=False, tol=1e-6) as observer:
        assert observer is None
    assert not bars


def test_iterations_left():
    assert progress._iterations_left([1.0, 0.5, 0.25], 0.25) == 0
    assert progress._iterations_left([1.0, 0.5, 0.25], 0.01) == 5  # 0.25 * 0.5^5 < 0.01 <= 0.25 * 0.5^4
    assert progress._iterations_left([1.0, 1.0, 1.0], 0.01) >= 1 << 20  # not falling: no estimate yet
