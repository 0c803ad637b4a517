"""Output files written whole or not at all, generated sections inside hand-edited markdown files, and CSV
tables that keep the rows of earlier runs.

Writes go to a temporary file renamed into place, so an interrupted run never leaves a truncated JSON or
markdown file behind. A generated section lives between ``<!-- {name}:begin -->`` and ``<!-- {name}:end -->``;
an existing section is replaced in place, otherwise it is appended (the file is created if absent). Running
twice gives the same file as running once.
"""
import csv
import io
import json
import os
import os.path as osp


def write_text(path, text):
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    tmp = path + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path, obj):
    write_text(path, json.dumps(obj, indent=1) + '\n')


def read_json_list(path):
    """The JSON list stored in ``path``, or [] when the file does not exist (records are appended to it)."""
    if not osp.exists(path):
        return []
    with open(path, encoding='utf-8') as f:
        return json.load(f)


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


def append_csv(folder, stem, fields, rows):
    """Append ``rows`` (dicts; floats with 6 significant digits) to ``folder/<stem>.csv``, keeping the rows already
    there; returns the path written.

    The file is rewritten whole (earlier rows + new rows) through :func:`write_text`, so an interrupted write loses
    nothing. A ``<stem>.csv`` whose header is not ``fields`` is left alone: the rows go to the first
    ``<stem>_<n>.csv`` (n = 2, 3, ...) that is free or has this header.
    """
    header = ','.join(fields) + '\n'
    path, n, old = osp.join(folder, f'{stem}.csv'), 1, header
    while osp.exists(path):
        with open(path, encoding='utf-8', newline='') as f:
            text = f.read()
        if text.startswith(header):
            old = text
            break
        n += 1
        path = osp.join(folder, f'{stem}_{n}.csv')
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction='ignore', lineterminator='\n')
    for row in rows:
        writer.writerow({k: (f'{v:.6g}' if isinstance(v, float) else v) for k, v in row.items()})
    write_text(path, old + buf.getvalue())
    return path
