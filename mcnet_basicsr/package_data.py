"""The package's YAML data files, each read here and nowhere else, with PyYAML alone (no torch): ``mcnet-sr --help``
lists their names before anything heavy is imported."""
import os.path as osp

import yaml

_ROOT = osp.dirname(osp.abspath(__file__))


def _read(*parts):
    with open(osp.join(_ROOT, *parts), encoding='utf-8') as f:
        return yaml.load(f, Loader=getattr(yaml, 'CSafeLoader', yaml.SafeLoader))  # libyaml's parser where built


def read_model_cards():
    """The shipped models' cards (``zoo/models.yml``: files, defaults, scores per backbone and scale)."""
    return _read('zoo', 'models.yml')


def read_degradations():
    """User-facing degradation name -> operator options without the scale (``ops/degradations.yml``)."""
    return _read('ops', 'degradations.yml')
