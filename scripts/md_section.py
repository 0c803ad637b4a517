"""Write a generated section into a hand-edited markdown file without touching the rest of it.

The section lives between ``<!-- {name}:begin -->`` and ``<!-- {name}:end -->``. An existing
section is replaced in place; without the markers the section is appended at the end of the file
(which is created if absent). Running twice gives the same file as running once.
"""
import os.path as osp

from atomic_io import write_text


def markers(name):
    return f'<!-- {name}:begin -->', f'<!-- {name}:end -->'


def replace_section(path, name, body):
    """Put ``body`` between the ``name`` markers in the markdown file ``path``; returns the new text."""
    begin, end = markers(name)
    old = open(path, encoding='utf-8').read() if osp.exists(path) else ''
    block = f'{begin}\n{body.strip()}\n{end}'
    i, j = old.find(begin), old.find(end)
    if (i < 0) != (j < 0) or (i >= 0 and j < i) or old.count(begin) > 1 or old.count(end) > 1:
        raise ValueError(f'{path}: markers {begin} / {end} must appear once each, in this order; fix the file by '
                         'hand (nothing was written).')
    if i >= 0:
        new = old[:i] + block + old[j + len(end):]
    else:
        new = (old.rstrip('\n') + '\n\n' if old.strip() else '') + block + '\n'
    write_text(path, new)
    return new
