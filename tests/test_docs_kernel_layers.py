"""docs/kernel_layers.md's tables of what ``mcnet-sr --kernel --backbone ffdnet_hqs`` gives beside USRNet-tiny
(benchmarks/cli_defaults.py ``--rows``, smooth regions) and of why its anchor trails USRNet-tiny
(benchmarks/hqs_study.py), against the records they come from."""
import json

from test_docs_tables import RECORDS, _case_mean, _prior_pages_lines, _table_after


def test_kernel_layers_usrnet_and_smooth_tables_are_their_record():
    """docs/kernel_layers.md's tables of ffdnet_hqs's layers beside USRNet-tiny (benchmarks/cli_defaults.py --rows):
    every PSNR is its case's mean in the record to two decimals, and the smooth regions' counts below bicubic
    upsampling and largest shortfalls are the record's."""
    lines = _prior_pages_lines()
    results = json.loads((RECORDS / 'cli_defaults_usrnet_smooth_cpu.json').read_text())['results']
    keys = ('bicubic', 'usrnet_tiny', 'ffdnet', 'mcnet_ffdnet_hqs', 'srcnn')
    columns = (' | bicubic upsampling | USRNet-tiny | `--backbone ffdnet_hqs` | the untrained layer '
               '| `--backbone srcnn` |')
    photos = _table_after(lines, '| Set5, one family kernel' + columns)
    cases = {'x2': 'kernel x2', 'x2, noise 2.55': 'kernel x2_n2.55', 'x3, noise 7.65': 'kernel x3_n7.65',
             'x4': 'kernel x4'}
    assert [label for label, _ in photos] == list(cases)
    for label, values in photos:
        assert values == [_case_mean(results[cases[label]], k) for k in keys], label
    smooth = dict(_table_after(lines, '| x2, one family kernel' + columns))
    regions = results['smooth BSD200 x2']
    assert len(regions['regions']) == 20
    assert smooth['the evening sky'] == [_case_mean(results['smooth rocket x2'], k) for k in keys]
    assert smooth["BSD200's 20 smoothest regions, mean"] == [_case_mean(regions, k) for k in keys]
    below = [[psnr - bicubic for psnr, bicubic in zip(regions[k], regions['bicubic'])] for k in keys[1:]]
    assert smooth['of those, below bicubic upsampling'] == ['-'] + [str(sum(d < 0 for d in diffs)) for diffs in below]
    assert smooth['the largest shortfall'] == ['-'] + [f'{-min(diffs):.2f}' for diffs in below]


def test_kernel_layers_anchor_table_is_its_record():
    """docs/kernel_layers.md's table of FFDNetHQS's prior and scheme beside USRNet-tiny (benchmarks/hqs_study.py):
    every PSNR is its method's Set5 mean in the record to two decimals."""
    results = json.loads((RECORDS / 'hqs_study_set5_cpu.json').read_text())['results']
    rows = dict(_table_after(_prior_pages_lines(), '| Set5, 2 family kernels | x3, noise 7.65 | x4 |'))
    methods = {'USRNet-tiny (trained end to end)': 'usrnet_tiny',
               "FFDNetHQS, our FFDNet, DPIR's settings (lam 0.23, last level max(s, noise))": 'ours lam=0.23 n=24',
               "the same with KAIR's FFDNet": 'kair lam=0.23 n=24', 'our FFDNet, lam 0.1': 'ours lam=0.1 n=24',
               "KAIR's FFDNet, lam 0.1": 'kair lam=0.1 n=24',
               'our FFDNet, the last level doubled': 'ours lam=0.23 n=24 floor=2'}
    assert list(rows) == list(methods)
    for label, method in methods.items():
        entry = results[method if method == 'usrnet_tiny' else f'ffdnet_hqs {method}']
        assert rows[label] == [_case_mean(entry[f], 'psnr') for f in ('x3_n7.65', 'x4')], label
