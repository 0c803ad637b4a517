"""Output files of the scripts, written whole or not at all: a temporary file renamed into place, so an
interrupted run never leaves a truncated JSON or markdown file behind."""
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
