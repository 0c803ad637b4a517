"""Watching an implicit layer's solve: a hook on every evaluation of its fixed-point map, and the progress bar built
on it for long CPU runs that would otherwise print nothing for minutes."""
import math
import sys
from contextlib import contextmanager

from tqdm import tqdm

from mcnet_basicsr.deq import fixed_point_residual


@contextmanager
def solver_progress(model, max_iter, desc, enabled=True, tol=None):
    """A progress bar (stderr) that ticks once per evaluation of ``model``'s fixed-point map, i.e. once per solver
    iteration, while the block runs; ``model.fixed_point_map`` is restored afterwards.

    With ``tol``, the bar's length (hence tqdm's estimate of the time left) is the iteration at which the relative
    residual ``||f(z) - z|| / ||f(z)||`` reaches ``tol`` if it keeps falling at its rate over the last two
    iterations (at most ``max_iter``), instead of ``max_iter``.

    Args:
        model (MCNetArch): Anything whose ``fixed_point_map(...)`` returns the map the solver iterates.
        max_iter (int): The bar's length (the solver's iteration limit).
        desc (str): The bar's label.
        enabled (bool): False: the block runs untouched. Default: True.
        tol (float | None): The solver's relative tolerance. Default: None (the bar's length stays ``max_iter``).
    """
    if not enabled:
        yield
        return
    bar = tqdm(total=max_iter, desc=desc, unit='it', leave=False, disable=None, file=sys.stderr)
    residuals = []

    def tick(z, fz):
        bar.update(1)
        if tol is not None:
            residuals.append(float(fixed_point_residual(fz.reshape(1, -1), z.reshape(1, -1), 'rel')))
            bar.total = min(max_iter, bar.n + _iterations_left(residuals, tol))
            bar.refresh()

    try:
        with observed_fixed_point_map(model, tick):
            yield
    finally:
        bar.close()


@contextmanager
def observed_fixed_point_map(model, observe):
    """While the block runs, ``observe(z, fz)`` is called after every evaluation ``fz = F(z)`` of each fixed-point map
    that ``model.fixed_point_map(...)`` builds; ``model.fixed_point_map`` is restored afterwards. The observed map is
    never captured into a CUDA graph: a replay would skip ``observe``.
    """
    inner = model.fixed_point_map

    def observed_map(*args, **kwargs):
        f = inner(*args, **kwargs)

        def observed(z):
            fz = f(z)
            observe(z, fz)
            return fz

        observed.capturable = False
        return observed

    model.fixed_point_map = observed_map
    try:
        yield
    finally:
        del model.fixed_point_map


def _iterations_left(residuals, tol):
    """Iterations until the residual reaches ``tol`` at its geometric rate over the last two steps (>= 1 while above
    ``tol``; 0 once there); a rate that does not fall yet gives a large number, which the caller caps."""
    last = residuals[-1]
    if last <= tol:
        return 0
    if len(residuals) < 3 or not 0 < last < residuals[-3]:
        return 1 << 30
    rate = math.sqrt(last / residuals[-3])
    return max(1, math.ceil(math.log(tol / last) / math.log(rate)))
