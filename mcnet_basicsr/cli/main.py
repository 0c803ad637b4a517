"""The ``mcnet-sr`` command (console script; also ``python -m mcnet_basicsr.cli``): options checked by
:mod:`.options` before anything heavy is imported, then the work of :mod:`.inference`."""
import sys

from .options import parse_command


def main(argv=None, models=None, keep_memory=False):
    """Console entry point; returns the exit status (0 ok, 1 some images failed, 2 usage error).

    ``models``: a dict in which a caller running several commands in one process keeps the built models
    (see :func:`mcnet_basicsr.cli.inference.get_model`); None builds the model afresh. ``keep_memory``: the process
    keeps the memory it frees (:func:`keep_freed_memory`), unless ``--tile`` asks for bounded memory.
    """
    args, status = parse_command(sys.argv[1:] if argv is None else argv)
    if args is None:
        return status
    if keep_memory and args.tile is None:
        keep_freed_memory()
    return load_inference().execute(args, models)


def load_inference():
    """Import :mod:`mcnet_basicsr.cli.inference`, the heavy part (torch, OpenCV, the models), and return it.

    The default models need none of basicsr (nor the torchvision and scipy.stats it imports), seconds saved; BasicSR's
    registries still get our types as soon as anything imports basicsr (:mod:`mcnet_basicsr.basicsr_import`).
    """
    from . import inference
    return inference


def keep_freed_memory(min_ram=16 << 30):
    """Have the C library (glibc) keep freed memory for reuse in this process; returns whether it did.

    glibc maps every allocation above 32 MB afresh and unmaps it when it is freed, so the feature maps each iteration
    allocates (1 GB per DnCNN6 layer at 2048 x 2048) fault all their pages in again, every time, a large part of the
    command's time on a few CPU cores (docs/benchmarks.md, "Quality of mcnet-sr's default"). Served from the heap,
    which is never trimmed, they reuse the pages of the last iteration. The heap's holes raise the peak memory and
    the process holds it until it exits: right for a command that does one job
    and leaves (:func:`console_main`), not for a library, and only on a machine with at least ``min_ram`` bytes of
    memory (default 16 GiB), where the larger peak fits more easily. Elsewhere (less memory, not Linux, or a C library
    without ``mallopt``) nothing changes.
    """
    if not sys.platform.startswith('linux'):
        return False
    import os
    try:
        if os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') < min_ram:
            return False
    except (ValueError, OSError):  # the machine's memory is unknown
        return False
    import ctypes
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # glibc's <malloc.h>
    # no mapped blocks at all; a trim threshold of -1 never gives the heap's top back (mallopt(3))
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, -1))


def console_main():
    """The ``mcnet-sr`` command: :func:`main`, then the process ends at once.

    Once every output file and summary.csv is written and closed, tearing the interpreter down (CUDA context,
    torch's thread pools, freeing every module) takes a second or more and changes nothing on disk, so the
    command flushes its streams and leaves with ``os._exit``. Callers of :func:`main` in a process of their
    own (tests, scripts) get its status back as usual. The process keeps the memory it frees
    (:func:`keep_freed_memory`) unless ``--tile`` is given.
    """
    status = main(keep_memory=True)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    import os
    os._exit(status)
