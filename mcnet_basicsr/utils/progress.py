"""A progress bar for an implicit layer's solve (an observer of its iterations), for long CPU runs that would otherwise
print nothing for minutes."""
import math
import sys
from contextlib import contextmanager

from tqdm import tqdm


@contextmanager
def solver_progress(max_iter, desc, enabled=True, tol=None):
    """A progress bar (stderr) while the block runs; yields the observer that ticks it once per solver iteration, to
    give a solve as its observer (``with net.settings(observer=observer):``; :data:`mcnet_basicsr.deq.Observer`).

    With ``tol``, the bar's length (hence tqdm's estimate of the time left) is the iteration at which the residual
    (the solver's, largest over the batch) reaches ``tol`` if it keeps falling at its rate over the last two
    iterations (at most ``max_iter``), instead of ``max_iter``.

    Args:
        max_iter (int): The bar's length (the solver's iteration limit).
        desc (str): The bar's label.
        enabled (bool): False: no bar, the observer is None. Default: True.
        tol (float | None): The solver's tolerance. Default: None (the bar's length stays ``max_iter``).
    """
    if not enabled:
        yield None
        return
    bar = tqdm(total=max_iter, desc=desc, unit='it', leave=False, disable=None, file=sys.stderr)
    residuals = []

    def tick(iteration, iterate, residual):
        bar.update(1)
        if tol is not None:
            residuals.append(float(residual.max()))
            bar.total = min(max_iter, bar.n + _iterations_left(residuals, tol))
            bar.refresh()

    try:
        yield tick
    finally:
        bar.close()


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
