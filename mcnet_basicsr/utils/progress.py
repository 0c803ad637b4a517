"""Progress of an implicit layer's solve, for long CPU runs that would otherwise print nothing for minutes."""
import sys
from contextlib import contextmanager

from tqdm import tqdm


@contextmanager
def solver_progress(model, max_iter, desc, enabled=True):
    """A progress bar (stderr) that ticks once per evaluation of ``model``'s fixed-point map, i.e. once per solver
    iteration, while the block runs; ``model.fixed_point_map`` is restored afterwards.

    Args:
        model (MCNetArch): Anything whose ``fixed_point_map(...)`` returns the map the solver iterates.
        max_iter (int): The bar's length (the solver's iteration limit).
        desc (str): The bar's label.
        enabled (bool): False: the block runs untouched. Default: True.
    """
    if not enabled:
        yield
        return
    bar = tqdm(total=max_iter, desc=desc, unit='it', leave=False, disable=None, file=sys.stderr)
    inner = model.fixed_point_map

    def counting_map(*args, **kwargs):
        f = inner(*args, **kwargs)

        def counted(z):
            bar.update(1)
            return f(z)

        counted.capturable = False  # a Python side effect: never captured into a CUDA graph
        return counted

    model.fixed_point_map = counting_map
    try:
        yield
    finally:
        del model.fixed_point_map
        bar.close()
