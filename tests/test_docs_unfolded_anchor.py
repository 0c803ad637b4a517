"""docs/unfolded_anchor.md's tables of FFDNetUnfolded trained end to end in two stages (the training logs, the
hqs_study.py --unfolded records, the Table K records) against the records they come from."""
import json
import re

import pytest

from conftest import REPO_ROOT
from test_docs_tables import RECORDS, _case_mean, _table_after, _validations


def _lines():
    return (REPO_ROOT / 'docs' / 'unfolded_anchor.md').read_text().splitlines()


def _curves(lines, header_start, log):
    """The validation table under the header line starting with ``header_start``: each value is its run's logged Set5
    validation at the header's iteration, to two decimals."""
    header = next(line for line in lines if line.startswith(header_start))
    iterations = [int(v.replace(',', '')) for v in header.strip('|').split('|')[1:]]
    curves = dict(_table_after(lines, header))
    for label, values in curves.items():
        logged = _validations(log.format(label))
        assert values == [f'{logged[i]:.2f}' for i in iterations], label
    return list(curves)


def test_stage_validation_tables_are_their_logs():
    lines = _lines()
    stage1 = _curves(lines, "| the recipe's Set5 validation, Y PSNR (dB) | 500 |",
                     'train_ffdnet_unfolded_{}_t91_h100.log')
    assert stage1 == ['x3', 'x4']
    stage2 = _curves(lines, "| stage 2's Set5 validation, Y PSNR (dB) | 500 |",
                     'train_ffdnet_unfolded16_{}_t91_bsd200_h100.log')
    assert stage2 == ['x2', 'x3', 'x4']
    shipped = _curves(lines, "| the shipped anchor's Set5 validation, Y PSNR (dB) | 500 |",
                      'train_ffdnet_unfolded16_{}_shipped_h100.log')
    assert shipped == ['x2', 'x3', 'x4']


def test_stage1_anchor_table_is_its_records():
    """Each PSNR beside FFDNetHQS and USRNet-tiny is its method's Set5 mean in the hqs_study.py --unfolded record of its
    scale, to two decimals; the stage 2 record holds the same stage 1 scores."""
    rows = dict(_table_after(_lines(), '| Set5, 2 family kernels | x3 | x3, noise 7.65 | x4 |'))
    methods = {'USRNet-tiny': 'usrnet_tiny',
               "FFDNetHQS, 24 iterations (DPIR's settings)": 'ffdnet_hqs ours lam=0.23 n=24',
               'FFDNetHQS, 8 iterations (FFDNetUnfolded untrained)': 'ffdnet_hqs ours lam=0.23 n=8',
               'FFDNetUnfolded, trained': 'ffdnet_unfolded net_g_14000.pth'}
    assert list(rows) == list(methods)
    records = {s: json.loads((RECORDS / f'hqs_study_unfolded_x{s}_set5_cpu.json').read_text())['results']
               for s in (3, 4)}
    stage2 = {s: json.loads((RECORDS / f'hqs_study_unfolded16_x{s}_set5_cpu.json').read_text())['results']
              for s in (3, 4)}
    for label, method in methods.items():
        expected = [_case_mean(records[int(f[1])][method][f], 'psnr') for f in ('x3', 'x3_n7.65', 'x4')]
        assert rows[label] == expected, label
        if method != 'ffdnet_hqs ours lam=0.23 n=24':
            again = [_case_mean(stage2[int(f[1])][method][f], 'psnr') for f in ('x3', 'x3_n7.65', 'x4')]
            assert again == expected, label
    text = '\n'.join(_lines())
    stage2_scores = ' / '.join(_case_mean(stage2[int(f[1])]['ffdnet_unfolded net_g_5500.pth'][f], 'psnr')
                               for f in ('x3', 'x3_n7.65', 'x4'))
    assert f'stage 2 gives {stage2_scores} at x3' in ' '.join(text.split())


# docs/unfolded_anchor.md's Table K rows: label -> (row, its records)
TABLE_K_ROWS = {
    '`usrnet_tiny`': ('usrnet_tiny', ['kernel_table_usrnet_tiny_h100.json']),
    "`ffdnet_hqs` (DPIR's 24 iterations, untrained)": ('ffdnet_hqs', ['kernel_table_ffdnet_hqs_h100.json']),
    '`mcnet_ffdnet_hqs_kernels` (the trained HQS layers)':
    ('mcnet_ffdnet_hqs_kernels', [f'kernel_table_mcnet_ffdnet_hqs_kernels_x{s}_h100.json' for s in (3, 4)]),
    '`ffdnet_unfolded` (stage 1, iteration 14,000)': ('ffdnet_unfolded', ['kernel_table_ffdnet_unfolded_h100.json']),
    '`ffdnet_unfolded16` (stage 2, iteration 5,500)':
    ('ffdnet_unfolded16', ['kernel_table_ffdnet_unfolded16_h100.json']),
}


# its table of the shipped anchor, on every family
SHIPPED_TABLE_K_ROWS = {
    '`usrnet_tiny`': TABLE_K_ROWS['`usrnet_tiny`'],
    '`mcnet_ffdnet_hqs_kernels` (the trained HQS layers)':
    ('mcnet_ffdnet_hqs_kernels', [f'kernel_table_mcnet_ffdnet_hqs_kernels_x{s}_h100.json' for s in (2, 3, 4)]),
    '`ffdnet_unfolded16` (the shipped anchor)':
    ('ffdnet_unfolded16', ['kernel_table_ffdnet_unfolded16_shipped_h100.json']),
    '`mcnet_ffdnet_unfolded16` (the layer around it)':
    ('mcnet_ffdnet_unfolded16', ['kernel_table_mcnet_ffdnet_unfolded16_h100.json']),
}


@pytest.mark.parametrize('families, table', [(('x3', 'x3_n2.55', 'x3_n7.65', 'x4'), TABLE_K_ROWS),
                                             (('x2', 'x3', 'x3_n2.55', 'x3_n7.65', 'x4'), SHIPPED_TABLE_K_ROWS)])
def test_table_k_rows_are_their_records(families, table):
    """Each mean is the row's mean over the family's 12 cells in its records, to two decimals; the time per image the
    smallest and largest over the families of the cells' seconds per image, in ms ('-' where the card was shared: the
    record's note says so)."""
    lines = _lines()
    names = {'x2': 'x2', 'x3': 'x3', 'x3_n2.55': 'x3, noise 2.55', 'x3_n7.65': 'x3, noise 7.65', 'x4': 'x4'}
    header = f'| row | {" | ".join(names[f] for f in families)} | ms per image | record |'
    rows = dict(_table_after(lines, header))
    assert list(rows) == list(table)
    n = len(families)
    for label, (row, records) in table.items():
        cells, shared = {}, False
        for name in records:
            record = json.loads((RECORDS / name).read_text())
            shared |= 'shared the card' in record.get('note', '')
            cells.update({k: v for k, v in record['cells'].items() if k.split('|')[0] == row})
        means, times = [], []
        for family in families:
            family_cells = [cells[f'{row}|{family}|k{k}'] for k in range(1, 13)]
            means.append(f'{sum(c["psnr"] for c in family_cells) / 12:.2f}')
            times.append(1000 * sum(c['seconds'] for c in family_cells) / sum(c['images'] for c in family_cells))
        assert rows[label][:n] == means, label
        assert rows[label][n] == ('-' if shared else f'{min(times):.0f}-{max(times):.0f}'), label
        named, braces = rows[label][n + 1].strip('`'), re.search(r'\{([\d,]+)\}', rows[label][n + 1])
        expanded = {named.replace(braces.group(0), s) for s in braces.group(1).split(',')} if braces else {named}
        assert expanded == set(records), label


def test_layer_around_stage_two_table_is_its_records():
    """Each PSNR of the layer-around-stage-2 table is its row's Set5 mean in the prior_study.py --rows record of its
    family, to two decimals, and each count of solves that reached the tolerance is the record's."""
    results = {}
    for name in ('prior_study_set5_rows_unfolded16_cpu.json', 'prior_study_set5_rows_unfolded16_x34_cpu.json'):
        for row, families in json.loads((RECORDS / name).read_text())['results'].items():
            for family, entry in families.items():
                assert (row, family) not in results
                results[row, family] = entry
    families = ('x2', 'x3', 'x3_n2.55', 'x3_n7.65', 'x4')
    rows = dict(_table_after(_lines(), '| Set5, 2 family kernels | x2 | x3 | x3, noise 2.55 | x3, noise 7.65 | x4 |'))
    labels = {'USRNet-tiny': 'usrnet_tiny', '`ffdnet_unfolded16` (stage 2 alone)': 'ffdnet_unfolded16',
              '`mcnet_ffdnet_unfolded16` (the layer around it)': 'mcnet_ffdnet_unfolded16'}
    assert list(rows) == list(labels) + ['its solves that reached 1e-4, of 10']
    for label, row in labels.items():
        assert rows[label] == [_case_mean(results[row, f], 'psnr') for f in families], label
    layer = [results['mcnet_ffdnet_unfolded16', f] for f in families]
    assert all(len(entry['converged']) == 10 for entry in layer)
    assert rows['its solves that reached 1e-4, of 10'] == [str(sum(entry['converged'])) for entry in layer]


def test_mcnet_sr_kernel_table_is_its_records():
    """The table of what ``mcnet-sr --kernel`` gives (benchmarks/cli_defaults.py, variant ``unfolded``) beside
    USRNet-tiny and ``--backbone ffdnet_hqs`` (the record of docs/kernel_layers.md's table): the same problems (the
    bicubic values of the records agree), every PSNR its case's mean to two decimals, and on the smooth regions the
    counts below bicubic upsampling and the largest shortfalls."""
    new = json.loads((RECORDS / 'cli_defaults_unfolded_set5_cpu.json').read_text())['results']
    new.update(json.loads((RECORDS / 'cli_defaults_unfolded_smooth_cpu.json').read_text())['results'])
    old = json.loads((RECORDS / 'cli_defaults_usrnet_smooth_cpu.json').read_text())['results']
    keys = ('bicubic', 'usrnet_tiny', 'ffdnet')
    header = ('| Set5, one family kernel | bicubic upsampling | USRNet-tiny | `--backbone ffdnet_hqs` '
              '| `mcnet-sr --kernel` |')
    rows = dict(_table_after(_lines(), header))
    cases = {'x2': 'kernel x2', 'x2, noise 2.55': 'kernel x2_n2.55', 'x3, noise 7.65': 'kernel x3_n7.65',
             'x4': 'kernel x4', 'the evening sky, x2': 'smooth rocket x2',
             "BSD200's 20 smoothest regions, x2, mean": 'smooth BSD200 x2'}
    smooth = ['of those, below bicubic upsampling', 'the largest shortfall']
    assert list(rows) == list(cases) + smooth
    for label, case in cases.items():
        assert new[case]['bicubic'] == pytest.approx(old[case]['bicubic'], abs=1e-9), case
        expected = [_case_mean(old[case], k) for k in keys]
        assert rows[label] == expected + [_case_mean(new[case], 'unfolded')], label
    regions, theirs = new['smooth BSD200 x2'], old['smooth BSD200 x2']
    assert regions['regions'] == theirs['regions'] and len(regions['regions']) == 20
    below = [[psnr - bicubic for psnr, bicubic in zip(values, regions['bicubic'])]
             for values in [theirs[k] for k in keys[1:]] + [regions['unfolded']]]
    assert rows[smooth[0]] == ['-'] + [str(sum(d < 0 for d in diffs)) for diffs in below]
    assert rows[smooth[1]] == ['-'] + [f'{-min(diffs):.2f}' for diffs in below]


def test_layer_around_the_shipped_anchor_table_is_its_record():
    """The Set5 table of the shipped anchor and the layer around it: each PSNR its row's mean in the prior_study.py
    record on the shipped files, to two decimals, and each count of solves that reached the tolerance the record's."""
    results = json.loads((RECORDS / 'prior_study_set5_rows_unfolded16_shipped_cpu.json').read_text())['results']
    families = ('x2', 'x3', 'x3_n2.55', 'x3_n7.65', 'x4')
    header = '| Set5, 2 family kernels, the shipped anchor | x2 | x3 | x3, noise 2.55 | x3, noise 7.65 | x4 |'
    rows = dict(_table_after(_lines(), header))
    labels = {'`ffdnet_unfolded16` (the shipped anchor)': 'ffdnet_unfolded16',
              '`mcnet_ffdnet_unfolded16` (the layer around it)': 'mcnet_ffdnet_unfolded16'}
    assert list(rows) == list(labels) + ['its solves that reached 1e-4, of 10']
    for label, row in labels.items():
        assert rows[label] == [_case_mean(results[row][f], 'psnr') for f in families], label
    layer = [results['mcnet_ffdnet_unfolded16'][f] for f in families]
    assert rows['its solves that reached 1e-4, of 10'] == [str(sum(entry['converged'])) for entry in layer]
