"""benchmarks/eigensolver_study.py at a small length: the halves (or the whole axis) it times are the matrices the
package decomposes, each solver's eigenvalues agree with the others', and the record lists every operator's band and the
rank of the corners its structured route updates."""
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
    assert all(row['dense_ms'] > 0 and row['banded_ms'] > 0 and row['structured_ms'] > 0 for row in rows.values())
    # the corners that a DCT-diagonalised Toeplitz matrix misses: of rank 2, 4 and 6 for each half of the bilinear,
    # bicubic and Lanczos resizers, more for the Gaussian's two ends
    assert {name: rows[name]['corner_ranks'] for name in rows if name != 'gaussian'} == {
        'pil-bilinear': [2, 2], 'torch-bilinear': [2, 2], 'pil-bicubic': [4, 4], 'torch-bicubic': [4, 4],
        'pil-lanczos': [6, 6]}
    assert rows['gaussian']['corner_ranks'][0] > 6
    assert all(row['dense_orthogonality'] <= 1e-13 and row['dense_residual'] <= 1e-13 for row in rows.values())
