"""docs/kernel_tolerance.md's tables (benchmarks/prior_study.py --rows --tol; scripts/kernel_table.py --tol 1e-3)
against the records they come from."""
import json

from test_docs_tables import PRIOR_FAMILIES, RECORDS, _prior_pages_lines, _table_after

# docs/kernel_tolerance.md's Set5 table: row label -> (record, row of the record)
TOLERANCE_ROWS = {'USRNet-tiny alone': ('prior_study_set5_rows_usrnet_tol1e-4_cpu.json', 'usrnet_tiny')}
TOLERANCE_ROWS.update({f'`mcnet_usrnet_tiny`, tol {t}': (f'prior_study_set5_rows_usrnet_tol{t}_cpu.json',
                                                         'mcnet_usrnet_tiny') for t in ('1e-4', '3e-4', '1e-3')})
TOLERANCE_ROWS.update({'`mcnet_ffdnet_unfolded16`, tol 1e-4': ('prior_study_set5_rows_unfolded16_shipped_cpu.json',
                                                               'mcnet_ffdnet_unfolded16'),
                       '`mcnet_ffdnet_unfolded16`, tol 1e-3': ('prior_study_set5_rows_unfolded16_tol1e-3_cpu.json',
                                                               'mcnet_ffdnet_unfolded16')})


def _cell_text(cell):
    """A prior_study.py cell as the tolerance tables print it: the mean PSNR to three decimals and, for a layer, its
    mean iterations in brackets."""
    text = f'{sum(cell["psnr"]) / len(cell["psnr"]):.3f}'
    if 'iterations' in cell:
        text += f' ({sum(cell["iterations"]) / len(cell["iterations"]):.1f})'
    return text


def test_tolerance_table_is_its_records():
    """Each cell of docs/kernel_tolerance.md's Set5 table is its row's Set5 mean to three decimals and, for a layer,
    its mean iterations in brackets; each record's solver tolerance is the one its label names."""
    rows = _table_after(_prior_pages_lines(),
                        '| Set5, 2 family kernels, by tolerance | x2 | x3 | x3, 2.55 | x3, 7.65 | x4 |')
    assert [label for label, _ in rows] == list(TOLERANCE_ROWS)
    for label, values in rows:
        name, row = TOLERANCE_ROWS[label]
        record = json.loads((RECORDS / name).read_text())
        if 'tol' in label:
            assert record.get('solver', {'tol': 1e-4})['tol'] == float(label.rsplit(' ', 1)[1]), label
        assert values == [_cell_text(record['results'][row][f]) for f in PRIOR_FAMILIES], label


def test_set14_tolerance_table_is_its_records():
    """docs/kernel_tolerance.md's Set14 table: each cell is the record's Set14 mean to three decimals with its
    mean iterations, at the tolerance its label names."""
    rows = _table_after(_prior_pages_lines(), '| Set14, 1 family kernel, by tolerance | x2 | x3, 7.65 | x4 |')
    assert [label for label, _ in rows] == [f'`mcnet_ffdnet_unfolded16`, tol {t}' for t in ('1e-4', '1e-3')]
    for label, values in rows:
        tol = label.rsplit(' ', 1)[1]
        record = json.loads((RECORDS / f'prior_study_set14_rows_unfolded16_tol{tol}_cpu.json').read_text())
        assert record['solver']['tol'] == float(tol)
        cells = [record['results']['mcnet_ffdnet_unfolded16'][f] for f in ('x2', 'x3_n7.65', 'x4')]
        assert all('iterations' in c for c in cells) and values == [_cell_text(c) for c in cells], label


def test_table_k_tolerance_table_is_its_records():
    """docs/kernel_tolerance.md's Table K at 1e-3: the means of each family's 12 cells in the 1e-3 record (both rows),
    the layer's lowest / highest cell over USRNet-tiny, the mean iterations at 1e-3 and in the 1e-4 records, and the
    milliseconds per image."""
    fast = json.loads((RECORDS / 'kernel_table_mcnet_usrnet_tiny_tol1e-3_h100.json').read_text())
    assert fast['mcnet_solver']['tol'] == 1e-3
    slow = {}
    for name in ('kernel_table_mcnet_usrnet_tiny_h100.json', 'kernel_table_mcnet_usrnet_tiny_noisy_h100.json'):
        slow.update(json.loads((RECORDS / name).read_text())['cells'])
    rows = dict(_table_after(_prior_pages_lines(),
                             '| Table K at 1e-3, row means (CBSD68) | x2 | x3 | x3, 2.55 | x3, 7.65 | x4 |'))
    expected = {key: [] for key in rows}

    def mean(cs, key='psnr'):
        return sum(c[key] for c in cs) / len(cs)

    for family in ('x2', 'x3', 'x3_n2.55', 'x3_n7.65', 'x4'):
        kernels = [k for k in range(1, 13) if f'mcnet_usrnet_tiny|{family}|k{k}' in fast['cells']]
        assert kernels == list(range(1, 13)), family
        cells = {row: [fast['cells'][f'{row}|{family}|k{k}'] for k in kernels] for row in ('usrnet_tiny',
                                                                                           'mcnet_usrnet_tiny')}
        before = [slow[f'mcnet_usrnet_tiny|{family}|k{k}'] for k in kernels]
        diffs = [m['psnr'] - u['psnr'] for u, m in zip(cells['usrnet_tiny'], cells['mcnet_usrnet_tiny'])]
        expected['USRNet-tiny alone'].append(f"{mean(cells['usrnet_tiny']):.3f}")
        expected['`mcnet_usrnet_tiny`, tol 1e-3'].append(f"{mean(cells['mcnet_usrnet_tiny']):.3f}")
        expected["the layer's lowest / highest cell difference"].append(f'{min(diffs):+.3f} / {max(diffs):+.3f}')
        expected['mean iterations, tol 1e-3 / 1e-4'].append(
            f"{mean(cells['mcnet_usrnet_tiny'], 'iterations'):.1f} / {mean(before, 'iterations'):.1f}")
        expected['ms per image, USRNet-tiny / the layer'].append(' / '.join(
            f'{1000 * sum(c["seconds"] / c["images"] for c in cells[row]) / len(kernels):.1f}'
            for row in ('usrnet_tiny', 'mcnet_usrnet_tiny')))
    assert rows == expected
