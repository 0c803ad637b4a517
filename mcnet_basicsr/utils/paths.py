"""Where the paths of an option file point: the one resolver every reader of option-file paths uses.

BasicSR reads an option file's paths as they are written, relative to the current folder (its own scripts run from
the root of a BasicSR checkout, which holds its ``datasets/`` and ``experiments/``). The package reads them the same
way, with one addition: a path ``mcnet_basicsr/weights/<file>`` -- how the option files name the weights this
project ships -- that does not exist relative to the current folder is the installed package's own file. The option
files thus find the shipped weights wherever the command runs, and data and third-party weights where BasicSR
users keep them.
"""
import os
import os.path as osp

PACKAGE_DIR = osp.dirname(osp.dirname(osp.abspath(__file__)))
SHIPPED_WEIGHTS_DIR = osp.join(PACKAGE_DIR, 'weights')
SHIPPED_PREFIX = 'mcnet_basicsr/weights/'


def shipped_file(path):
    """The file of the installed package that ``path`` names as ``mcnet_basicsr/weights/<file>``, else None."""
    posix = os.fspath(path).replace(os.sep, '/')
    while posix.startswith('./'):
        posix = posix[2:]
    if not posix.startswith(SHIPPED_PREFIX) or len(posix) == len(SHIPPED_PREFIX):
        return None
    return osp.join(SHIPPED_WEIGHTS_DIR, *posix[len(SHIPPED_PREFIX):].split('/'))


def resolve_path(path):
    """An option file's ``path`` as the package reads it (a str; None stays None).

    The path as written where it exists (relative paths: relative to the current folder, as BasicSR reads them);
    else, for ``mcnet_basicsr/weights/<file>``, the installed package's file where that exists; else ``path``
    unchanged (its reader reports it missing).
    """
    if path is None:
        return None
    path = os.fspath(path)
    if osp.exists(path):
        return path
    shipped = shipped_file(path)
    return shipped if shipped is not None and osp.exists(shipped) else path


def relative_to(path):
    """What a relative ``path`` is relative to, for messages: 'relative to the current folder <cwd>' ('' if
    absolute)."""
    return '' if osp.isabs(os.fspath(path)) else f'relative to the current folder {os.getcwd()}'
