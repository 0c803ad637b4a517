"""benchmarks/eigensolver_study.py at a small length: the halves (or the whole axis) it times are the matrices the
package decomposes, each solver's pairs agree with the other's, and the record lists every operator's band."""
import json
import sys

import eigensolver_study


def test_study_times_both_solvers_on_the_package_matrices(tmp_path, monkeypatch):
    out = tmp_path / 'record.json'
    monkeypatch.setattr(sys, 'argv', ['eigensolver_study.py', '--lr', '64', '--scales', '2', '--repeats', '1',
                                      '--out', str(out)])
    eigensolver_study.main()
    record = json.loads(out.read_text())
    rows = {row['name']: row for row in record['rows']}
    assert set(rows) == set(eigensolver_study.NAMES)
    assert {name: rows[name]['band'] for name in rows} == {
        'pil-bilinear': 1, 'torch-bilinear': 1, 'pil-bicubic': 3, 'torch-bicubic': 3, 'pil-lanczos': 5, 'gaussian': 5}
    assert rows['pil-bicubic']['matrices'] == [32, 32] and rows['gaussian']['matrices'] == [64]
    assert all(row['dense_ms'] > 0 and row['banded_ms'] > 0 for row in rows.values())
