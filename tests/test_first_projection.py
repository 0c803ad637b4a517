"""benchmarks/first_projection.py at a small size: each cell comes from its own fresh processes, which time a first
projection and a second one on the same size, and the record lists them per operator and scale (and for a baseline
checkout, here this one)."""
import json
import sys
from pathlib import Path

import pytest

import first_projection


def test_child_times_a_first_and_a_second_projection():
    """In this process (no subprocess): two positive times, the first call paying the set-up of the size (with
    ``given``, all of it but the eigenpairs)."""
    for given in (False, True):
        first, second = first_projection.child('pil-bicubic', 2, 48, True, 1, given)
        assert first > 0 and second > 0


@pytest.mark.slow
def test_each_cell_runs_in_fresh_processes(tmp_path, monkeypatch):
    out = tmp_path / 'record.json'
    monkeypatch.setattr(sys, 'argv', ['first_projection.py', '--types', 'cv2-area', '--scales', '3', '--lr', '40',
                                      '--processes', '2', '--threads', '1', '--given', '--note', 'test',
                                      '--out', str(out), '--baseline', str(Path(__file__).resolve().parents[1])])
    first_projection.main()
    record = json.loads(out.read_text())
    assert record['note'] == 'test' and record['processes'] == 2 and record['threads'] == 1
    (row, ) = record['rows']
    assert (row['type'], row['scale'], row['lr']) == ('cv2-area', 3, 40)
    for key in ('first_eps0_ms', 'first_eps_ms', 'second_eps_ms'):
        for prefix in ('', 'baseline_'):
            assert len(row[prefix + key]) == 2 and all(ms > 0 for ms in row[prefix + key])
    assert len(row['given_first_eps_ms']) == 2 and 'baseline_given_first_eps_ms' not in row
    assert first_projection.table(record).splitlines()[0] == (
        '| type | scale | eps = 0 | eps > 0 | eps > 0, eigenpairs given | a later eps > 0 | eps = 0, baseline '
        '| eps > 0, baseline |')


def test_docs_table_is_the_record_rendered():
    """docs/benchmarks_operators.md's fresh-process table is benchmarks/records/first_projection_fresh_cpu.json
    rendered."""
    root = Path(__file__).resolve().parents[1]
    record = json.loads((root / 'benchmarks' / 'records' / 'first_projection_fresh_cpu.json').read_text())
    doc = (root / 'docs' / 'benchmarks_operators.md').read_text().splitlines()
    missing = [line for line in first_projection.table(record).splitlines() if line not in doc]
    assert not missing, missing
