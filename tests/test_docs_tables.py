"""The tables of ``docs/degradations*.md`` against the records they come from: Table K is the rendering of the
``benchmarks/records/kernel_table_*.json`` records, and every number of a Table R table is a recorded cell of its
column."""
import functools
import json
import re
from collections import defaultdict

import pytest

from conftest import REPO_ROOT, same_operator_resizers
from mcnet_basicsr.evaluation.kernel_table import read_published, render

# docs/degradations.md and the pages of its tables (Table K, Table R, the layers for resizers, the kernel priors)
DOCS = [REPO_ROOT / 'docs' / f'degradations{page}.md'
        for page in ('', '_kernels', '_kernels_findings', '_resizers', '_resizer_layers')]
DOCS += [REPO_ROOT / 'docs' / 'kernel_priors.md', REPO_ROOT / 'docs' / 'shipped_prior.md']
RECORDS = REPO_ROOT / 'benchmarks' / 'records'


def doc_text():
    return '\n'.join(page.read_text() for page in DOCS)


# a Table R table: its header names the scale and (unless each row does) the sets, then the resizers
HEADER = re.compile(r'^\| x(\d)(?:, ([A-Za-z0-9 /]+))? \| (.*) \|$')
BACKBONES = {'IMDN': 'imdn', 'PAN': 'pan', 'FFDNetPnP': 'ffdnet_pnp', 'compact RCAN': 'rcan_compact'}


def test_table_k_in_the_docs_is_the_records_rendered():
    """``scripts/kernel_table.py --render benchmarks/records/kernel_table_*.json`` (the shell's sorted order: a later
    record's cell replaces an earlier one's) is in the docs as it is."""
    # a CPU record checks one cell against the GPU's (kernel_table_usrnet_tiny_x4_k1_cpu.json); the table is the GPU's,
    # its MCNet solves stopping at 1e-4 or tighter (a record at mcnet-sr's 1e-3 measures the time a looser solve saves)
    paths = [p for p in sorted(RECORDS.glob('kernel_table_*.json'))
             if not p.name.endswith('_cpu.json') and json.loads(p.read_text())['mcnet_solver']['tol'] <= 1e-4]
    table = render([str(p) for p in paths],
                   str(RECORDS / 'usrnet_table1_published.tsv'))
    doc = doc_text()
    missing = [line for line in table.splitlines() if line.startswith('| ') and line not in doc.splitlines()]
    assert not missing, missing


def _table_r_numbers(lines):
    """``(line number, row label, scale, resizer, set, text)`` of every cell of the Table R tables of ``lines``."""
    i = 0
    while i < len(lines):
        match = HEADER.match(lines[i])
        if not (match and i + 1 < len(lines) and lines[i + 1].startswith('|---')):
            i += 1
            continue
        scale, header_sets = int(match.group(1)), match.group(2)
        resizers = [r.strip() for r in match.group(3).split('|')]
        i += 2
        while i < len(lines) and lines[i].startswith('| '):
            label, *values = [p.strip() for p in lines[i].strip('|').split('|')]
            sets = header_sets
            if sets is None:  # the row names its sets: "PAN alone, Set5 / Set14"
                label, sets = label.rsplit(', ', 1)
            assert len(values) == len(resizers), (i + 1, lines[i])
            for resizer, value in zip(resizers, values):
                texts = value.replace('*', '').split('/')
                assert len(texts) == len(sets.split('/')), (i + 1, lines[i])
                for dataset, text in zip(sets.split('/'), texts):
                    yield i + 1, label, scale, resizer, dataset.strip(), text.strip()
            i += 1


def test_table_r_numbers_in_the_docs_are_recorded_cells():
    """Each PSNR of a Table R table is, to its two decimals, a cell of ``benchmarks/records/resizer_table_*.json`` of
    the same scale, set and resizer (or a resizer with the same operator at that scale) and a row of the same
    backbone."""
    recorded = defaultdict(set)  # (scale, resizer, set) -> {(row, 'psnr to 2 decimals')}, over every record
    for path in RECORDS.glob('resizer_table_*.json'):
        for key, cell in json.loads(path.read_text())['cells'].items():
            row, scale, resizer, dataset = key.split('|')
            recorded[int(scale[1:]), resizer, dataset].add((row, f'{cell["psnr"]:.2f}'))
    same = {s: same_operator_resizers(s) for s in (2, 3, 4)}
    cells = list(_table_r_numbers(doc_text().splitlines()))
    assert len(cells) > 500  # the tables were found
    wrong = []
    for line, label, scale, resizer, dataset, text in cells:
        if text == '-':
            continue  # not measured
        backbone = next((v for k, v in BACKBONES.items() if k in label), '')
        assert re.fullmatch(r'\d+\.\d\d', text), (line, label, text)
        found = any(value == text and backbone in row for name in same[scale][resizer]
                    for row, value in recorded[scale, name, dataset])
        if not found:
            wrong.append((line, label, resizer, dataset, text))
    assert not wrong, wrong


LAYOUTS = [('| x4, Set5 / Set14 | cv2-area |\n|---|---|\n| IMDN alone | 30.10 / 26.60 |',
            [(3, 'IMDN alone', 4, 'cv2-area', 'Set5', '30.10'), (3, 'IMDN alone', 4, 'cv2-area', 'Set14', '26.60')]),
           ('| x2 | cv2-area |\n|---|---|\n| PAN alone, CBSD68 | 30.43 |',
            [(3, 'PAN alone', 2, 'cv2-area', 'CBSD68', '30.43')])]


@pytest.mark.parametrize('text, expected', LAYOUTS)
def test_table_r_parser_reads_both_layouts(text, expected):
    assert list(_table_r_numbers(text.splitlines())) == expected


def test_beta_or_prior_table_is_its_record():
    """The "Beta or the prior?" table of the docs: each PSNR is its row's mean in
    ``benchmarks/records/kernel_prior_study_set5_h200.json`` to two decimals, and the learned betas it quotes are the
    record's."""
    record = json.loads((RECORDS / 'kernel_prior_study_set5_h200.json').read_text())['scales']
    labels = {'PAN alone': 'pan', 'the same, beta x 10': 'layer_beta*10', 'the same, beta x 0.1': 'layer_beta*0.1',
              'the same, beta x 1e-6 (PnP-ADMM with the layer\'s DnCNN6)': 'layer_beta*1e-06',
              'PnP-ADMM, RealSN-DnCNN17': 'pnp'}
    lines = doc_text().splitlines()
    start = lines.index('| Set5, the recipes\' kernels and noise | x2 | x3 | x4 |')
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith('| '):
            break
        label, *values = [p.strip() for p in line.strip('|').split('|')]
        betas = re.fullmatch(r'MCNet \+ PAN, kernel layer \(learned beta ([\d.]+) / ([\d.]+) / ([\d.]+) at noise 0\)',
                             label)
        if betas:
            for scale, text in zip(('x2', 'x3', 'x4'), betas.groups()):
                assert float(text) == pytest.approx(record[scale]['layer']['beta_at_noise_0'], rel=0.05), (scale, text)
            name = 'layer'
        else:
            name = labels[label]
        assert values == [f'{record[s][name]["psnr"]:.2f}' for s in ('x2', 'x3', 'x4')], line
        rows.append(name)
    assert sorted(rows) == sorted(record['x2'])


# the prior study's tables (docs/kernel_priors.md, docs/shipped_prior.md): row label -> (record, method of the record)
PRIOR_ROWS = {
    'USRNet-tiny alone': ('prior_study_set5_h100.json', 'usrnet_tiny'),
    'USRNet-tiny, projected exactly onto the ball': ('prior_study_set5_h100.json', 'proj(usrnet_tiny)'),
    'PnP, 24 steps of the colour FFDNet from bicubic upsampling, untrained': ('prior_study_set5_h100.json',
                                                                              'pnp_ffdnet_bicubic'),
    'MCNet + USRNet-tiny, colour FFDNet, beta 3, sp 5 / 255, untrained': ('prior_study_set5_h100.json',
                                                                          'layer_ffdnet_usrnet beta=3 sp=5'),
    'the same, trained 3 minutes (302 steps) from there': ('prior_study_set5_probe_beta3_h100.json', 'layer_trained'),
}
PRIOR_FAMILIES = ('x2', 'x3', 'x3_n2.55', 'x3_n7.65', 'x4')


def _prior_pages_lines():
    """The lines of the prior pages: docs/kernel_priors.md, docs/kernel_tolerance.md, docs/shipped_prior.md, then
    docs/kernel_layers.md."""
    return [line for page in ('kernel_priors.md', 'kernel_tolerance.md', 'shipped_prior.md', 'kernel_layers.md')
            for line in (REPO_ROOT / 'docs' / page).read_text().splitlines()]


def _table_after(lines, header):
    start = lines.index(header)
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith('| '):
            break
        label, *values = [p.strip() for p in line.strip('|').split('|')]
        rows.append((label, values))
    return rows


def _mean(record, method, family):
    results = json.loads((RECORDS / record).read_text())['results']
    return f'{sum(results[method][family]["psnr"]) / len(results[method][family]["psnr"]):.2f}'


def test_kernel_priors_tables_are_their_records():
    """Every PSNR of the prior study's tables in docs/kernel_priors.md and docs/shipped_prior.md is its record's mean
    to two decimals: the Set5 table, the beta x level grid and the Table K means."""
    lines = _prior_pages_lines()
    rows = _table_after(lines, '| Set5, family kernels | x2 | x3 | x3, 2.55 | x3, 7.65 | x4 |')
    assert [label for label, _ in rows] == list(PRIOR_ROWS)
    for label, values in rows:
        record, method = PRIOR_ROWS[label]
        assert values == [_mean(record, method, f) for f in PRIOR_FAMILIES], label
    grid = _table_after(lines, '| beta, sp (/ 255) | x2 | x3 | x3, 2.55 | x3, 7.65 | x4 |')
    assert len(grid) >= 6
    for label, values in grid:
        beta, sp = (v.strip() for v in label.split(','))
        method = f'layer_ffdnet_usrnet beta={float(beta):g} sp={float(sp):g}'
        assert values == [_mean('prior_study_set5_h100.json', method, f) for f in PRIOR_FAMILIES], label
    own = _table_after(lines, '| Set5, family kernels, which FFDNet | x2 | x3 | x3, 2.55 | x3, 7.65 | x4 |')
    kair, ours, layer = 'prior_study_set5_h100.json', 'prior_study_set5_own_ffdnet_h100.json', 'layer_ffdnet_usrnet'
    own_rows = {"PnP from bicubic, KAIR's FFDNet": (kair, 'pnp_ffdnet_bicubic'),
                'PnP from bicubic, our FFDNet': (ours, 'pnp_ffdnet_bicubic'),
                "MCNet + USRNet-tiny, beta 3, sp 5, KAIR's FFDNet": (kair, f'{layer} beta=3 sp=5'),
                'MCNet + USRNet-tiny, beta 3, sp 5, our FFDNet': (ours, f'{layer} beta=3 sp=5'),
                'the layer anchored at bicubic upsampling, beta 0.1, our FFDNet': (
                    ours, 'layer_ffdnet_bicubic beta=0.1 sp=5')}
    assert [label for label, _ in own] == list(own_rows)[:4] + ['its solves that reached the tolerance'] + \
        list(own_rows)[4:]
    for label, values in own:
        if label in own_rows:
            assert values == [_mean(*own_rows[label], f) for f in PRIOR_FAMILIES], label
        else:  # the row above's convergence
            results = json.loads((RECORDS / 'prior_study_set5_own_ffdnet_h100.json').read_text())['results']
            conv = results['layer_ffdnet_usrnet beta=3 sp=5']
            assert values == [f'{100 * sum(conv[f]["converged"]) / len(conv[f]["converged"]):.0f}%'
                              for f in PRIOR_FAMILIES], label


def test_noise_level_study_table_is_its_record():
    """docs/kernel_priors.md's table of the level's noise gain and the growing beta: every cell is its record's mean
    over USRNet-tiny (four decimals), its images below USRNet-tiny and its mean iterations."""
    rows = _table_after(_prior_pages_lines(), '| beta, level (sp 5 / 255) | x3, 2.55 | x3, 7.65 |')
    results = json.loads((RECORDS / 'prior_study_bsd200_noisy_cpu.json').read_text())['results']
    gains = {'k = 1': '', 'k = 0.5': ' gain=0.5', 'k = 0': ' gain=0'}
    assert len(rows) == 6
    for label, values in rows:
        beta, gain = (p.strip() for p in label.split(','))
        slope = '' if beta == '3' else ' slope=0.30099'
        entry = results[f'layer_ffdnet_usrnet beta=3 sp=5{slope}{gains[gain]}']
        cells = []
        for fam in ('x3_n2.55', 'x3_n7.65'):
            alone = results['usrnet_tiny'][fam]['psnr']
            diff = [a - u for a, u in zip(entry[fam]['psnr'], alone)]
            mean_it = sum(entry[fam]['iterations']) / len(diff)
            cells.append(f'{sum(diff) / len(diff):+.4f} dB, {sum(d < 0 for d in diff)} below, {mean_it:.1f} it.')
        assert values == cells, label


@functools.lru_cache(maxsize=None)
def _record_cells(record):
    """A Table K record's cells, read once per test session."""
    return json.loads((RECORDS / record).read_text())['cells']


def _kernel_cells(record, row, family):
    cells = _record_cells(record)
    return [cells[f'{row}|{family}|k{k}'] for k in range(1, 13)]


def _reached(cells):
    """The share of a family's solves that reached the tolerance, as the docs write it (its 12 cells' mean: '99.1%',
    '100%')."""
    return f'{100 * sum(c["converged"] for c in cells) / 12:.1f}%'.replace('100.0%', '100%')


def test_kernel_priors_table_k_tables_are_their_records():
    """The Table K tables of docs/kernel_priors.md and docs/shipped_prior.md: the layer anchored on USRNet-tiny beside
    it (means to three decimals, the cell differences, the convergence and the times of the same run), and the
    shipped-weights rows' means beside USRNet-tiny, PAN's kernel layers and IRCNN."""
    lines = _prior_pages_lines()
    rows = dict(_table_after(lines, '| Table K, row means (CBSD68, 12 kernels) | x2 | x3 | x3, 2.55 | x3, 7.65 | x4 |'))
    record = 'kernel_table_mcnet_usrnet_tiny_h100.json'
    for f, family in enumerate(PRIOR_FAMILIES):
        # the noisy cells of the beta that grows with the noise: their own run
        run = 'kernel_table_mcnet_usrnet_tiny_noisy_h100.json' if '_n' in family else record
        alone, layer = (_kernel_cells(run, row, family) for row in ('usrnet_tiny', 'mcnet_usrnet_tiny'))
        assert rows['USRNet-tiny alone'][f] == f'{sum(c["psnr"] for c in alone) / 12:.3f}'
        assert rows['MCNet + USRNet-tiny, colour FFDNet, untrained'][f] == f'{sum(c["psnr"] for c in layer) / 12:.3f}'
        diffs = [b['psnr'] - a['psnr'] for a, b in zip(alone, layer)]
        assert rows["the layer's lowest / highest cell difference"][f] == f'{min(diffs):+.3f} / {max(diffs):+.3f}'
        assert rows['solves that reached the tolerance'][f] == _reached(layer)
        ms = [1000 * sum(c['seconds'] for c in cells) / sum(c['images'] for c in cells) for cells in (alone, layer)]
        assert rows['ms per image, USRNet-tiny / the layer'][f] == f'{ms[0]:.1f} / {ms[1]:.1f}'
    shipped = dict(_table_after(lines, '| Set5, 2 family kernels | x2 | x3 | x3, 2.55 | x3, 7.65 | x4 |'))
    rows_record = 'prior_study_set5_rows_cpu.json'
    for label, row in (('USRNet-tiny', 'usrnet_tiny'), ('FFDNetHQS', 'ffdnet_hqs'), ('FFDNetPnP', 'ffdnet_pnp'),
                       ('MCNet + FFDNetHQS', 'mcnet_ffdnet_hqs'), ('MCNet + FFDNetPnP', 'mcnet_ffdnet_pnp')):
        assert shipped[label] == [_mean(rows_record, row, f) for f in PRIOR_FAMILIES], label
    results = json.loads((RECORDS / rows_record).read_text())['results']

    def reached(row, f):
        conv = results[row][f]['converged']
        return f'{100 * sum(conv) / len(conv):.0f}%'

    assert shipped['its solves that reached the tolerance, HQS / PnP'] == [
        f'{reached("mcnet_ffdnet_hqs", f)} / {reached("mcnet_ffdnet_pnp", f)}' for f in PRIOR_FAMILIES]
    stages = dict(_table_after(lines, '| Set5, 2 family kernels, MCNet + FFDNetHQS | x2 | x3 | x3, 2.55 | x3, 7.65 '
                                      '| x4 |'))
    first = 'prior_study_set5_rows_stage1_prior_cpu.json'
    assert stages['prior after the first stage'] == [_mean(first, 'mcnet_ffdnet_hqs', f) for f in PRIOR_FAMILIES]
    assert stages['prior after both stages (shipped)'] == shipped['MCNet + FFDNetHQS']
    first_conv = json.loads((RECORDS / first).read_text())['results']['mcnet_ffdnet_hqs']
    first_reached = [f'{100 * sum(first_conv[f]["converged"]) / len(first_conv[f]["converged"]):.0f}%'
                     for f in PRIOR_FAMILIES]
    assert stages['solves that reached the tolerance, first / both'] == [
        f'{a} / {reached("mcnet_ffdnet_hqs", f)}' for a, f in zip(first_reached, PRIOR_FAMILIES)]
    hqs = dict(_table_after(lines, '| Table K, row means, shipped weights alone | x2 | x3 | x3, 2.55 | x3, 7.65 '
                                   '| x4 |'))
    _, published = read_published(str(RECORDS / 'usrnet_table1_published.tsv'))
    shipped_layer = 'kernel_table_mcnet_ffdnet_hqs_h100.json'
    for f, family in enumerate(PRIOR_FAMILIES):
        pan = f'kernel_table_pan_kernels_x{family[1]}_{({"2": 500, "3": 500, "4": 400})[family[1]]}_h200.json'
        for label, rec, row in (
                ('USRNet-tiny (official weights, fetched; not shipped)', record, 'usrnet_tiny'),
                ('MCNet + FFDNetHQS (`ffdnet_hqs`), untrained layer', shipped_layer, 'mcnet_ffdnet_hqs'),
                ('FFDNetHQS alone', 'kernel_table_ffdnet_hqs_h100.json', 'ffdnet_hqs'),
                ('MCNet + PAN, kernel layer (the best trained layer)', pan, 'mcnet_pan_kernels')):
            assert hqs[label][f] == f'{sum(c["psnr"] for c in _kernel_cells(rec, row, family)) / 12:.2f}', label
        assert hqs['IRCNN (published)'][f] == f'{sum(published[("IRCNN", family)]) / 12:.2f}'
        reached = _reached(_kernel_cells(shipped_layer, 'mcnet_ffdnet_hqs', family))
        assert hqs["the layer's solves that reached the tolerance"][f] == reached


def _case_mean(entry, key):
    """A cli_defaults.py case's mean PSNR of ``key`` (a variant, or bicubic upsampling) as the docs print it."""
    return f'{sum(entry[key]) / len(entry[key]):.2f}'


def _cli_rows(lines, header, record):
    """The rows of the cli_defaults.py table under ``header`` beside the cases of ``record``, each row's PSNRs checked
    to be its case's means (bicubic, ffdnet, srcnn) to two decimals, one row per case in the record's order; returns
    the row labels."""
    rows = _table_after(lines, header)
    results = json.loads((RECORDS / record).read_text())['results']
    assert len(rows) == len(results), record
    for (label, values), entry in zip(rows, results.values()):
        assert values == [_case_mean(entry, k) for k in ('bicubic', 'ffdnet', 'srcnn')], label
    return [label for label, _ in rows], list(results)


def test_kernel_priors_cli_table_is_its_record():
    """docs/shipped_prior.md's tables of what mcnet-sr gives (benchmarks/cli_defaults.py): every PSNR is its record's
    mean to two decimals, one row per recorded case, in the record's order."""
    lines = _prior_pages_lines()
    _cli_rows(lines, '| LR made by | bicubic upsampling | `--backbone ffdnet_hqs` (kernels) / `ffdnet_pnp` '
              '(resizers) | `--backbone srcnn` |', 'cli_defaults_set5_cpu.json')
    labels, cases = _cli_rows(lines, '| LR made by, x4 | bicubic upsampling | `--backbone ffdnet_pnp` | '
                              '`--backbone srcnn` |', 'cli_defaults_aliasing_set5_cpu.json')
    assert [label.strip('`') + ' x4' for label in labels] == cases
    labels, cases = _cli_rows(lines, '| LR made by, x2 / x3 | bicubic upsampling | `--backbone ffdnet_pnp` | '
                              '`--backbone srcnn` |', 'cli_defaults_resizers_x23_set5_cpu.json')
    assert [label.replace('`', '').replace(',', '') for label in labels] == cases
    # the compact RCAN's layers at x2-x4: bicubic and rcan_compact from their records, srcnn from the records above
    header = '| LR made by | bicubic upsampling | `--backbone srcnn` | `--backbone rcan_compact` |'
    rows = _table_after(lines, header)
    rcan, srcnn = {}, {}
    for name in ('cli_defaults_rcan_compact_x24_set5_cpu.json', 'cli_defaults_rcan_compact_x3_set5_cpu.json'):
        rcan.update(json.loads((RECORDS / name).read_text())['results'])
    for name in ('cli_defaults_resizers_x23_set5_cpu.json', 'cli_defaults_set5_cpu.json',
                 'cli_defaults_aliasing_set5_cpu.json'):
        srcnn.update(json.loads((RECORDS / name).read_text())['results'])
    cases = sorted(rcan, key=lambda case: case.split()[-1])  # by scale, each record's order within it
    assert [label.replace('`', '').replace(',', '') for label, _ in rows] == cases
    for (label, values), case in zip(rows, cases):
        assert _case_mean(rcan[case], 'bicubic') == _case_mean(srcnn[case], 'bicubic'), case  # the same LR
        assert values == [_case_mean(rcan[case], 'bicubic'), _case_mean(srcnn[case], 'srcnn'),
                          _case_mean(rcan[case], 'rcan_compact')], label


def _validations(log):
    """``{iteration: Set5 Y-PSNR}`` of a training log: each validation under the iteration logged last before it."""
    iteration, out = None, {}
    for line in (RECORDS / log).read_text().splitlines():
        logged = re.search(r'iter:\s+([\d,]+),', line)
        if logged:
            iteration = int(logged.group(1).replace(',', ''))
        psnr = re.search(r'Validation Set5: psnr_y_uint8 ([\d.]+) dB', line)
        if psnr:
            out[iteration] = float(psnr.group(1))
    return out


# the training table of docs/kernel_layers.md: row label -> the run's training log
TRAINING_LOGS = {'x2 (shipped: 4,000)': 'train_mcnet_ffdnet_hqs_x2_penalty_cpu.log',
                 'x2 without the penalty': 'train_mcnet_ffdnet_hqs_x2_cpu.log',
                 'x3 (shipped: 4,000)': 'train_mcnet_ffdnet_hqs_x3_penalty_h100_cpu.log',
                 'x4 (shipped: 4,000)': 'train_mcnet_ffdnet_hqs_x4_penalty_h100.log'}


def test_layer_training_table_is_its_log():
    """The training table of docs/kernel_layers.md: each iteration's Set5 validation is the one in its run's log (a
    dash where the run has none), the untrained column the same validation without layer weights (test.py's log), and
    the hyper-network's pilot runs are theirs."""
    lines = _prior_pages_lines()
    header = next(line for line in lines
                  if line.startswith("| the recipe's Set5 validation, Y PSNR (dB) | untrained |"))
    iterations = [int(v.replace(',', '')) for v in header.strip('|').split('|')[2:]]
    rows = dict(_table_after(lines, header))
    assert list(rows) == list(TRAINING_LOGS)
    for label, log in TRAINING_LOGS.items():
        logged = _validations(log)
        untrained = _validations(f'untrained_val_mcnet_ffdnet_hqs_{label[:2]}_cpu.log')[None]
        assert rows[label] == [f'{untrained:.2f}'] + [f'{logged[i]:.2f}' if i in logged else '-' for i in iterations], \
            label
    page = (REPO_ROOT / 'docs' / 'kernel_layers.md').read_text()
    pilot, hyper = (_validations(f'train_mcnet_ffdnet_hqs_x2_pilot{v}_cpu.log')[1000] for v in ('', '_hyper'))
    assert f'gives {hyper:.2f} against {pilot:.2f}' in page


def test_layer_x3_x4_study_table_is_its_record():
    """docs/kernel_layers.md's Set5 table of the x3 and x4 layers, trained and untrained: PSNR, convergence and
    iterations are the prior study's means."""
    rows = dict(_table_after(_prior_pages_lines(), '| Set5, 2 family kernels, as Table K solves, untrained / trained '
                                                   '| x3 | x3, 2.55 | x3, 7.65 | x4 |'))
    study = json.loads((RECORDS / 'prior_study_set5_layer_x34_cpu.json').read_text())['results']
    for label, key, fmt in (('RGB PSNR', 'psnr', '{:.2f}'), ('solves at 1e-4', 'converged', '{:.0%}'),
                            ('mean iterations', 'iterations', '{:.1f}')):
        assert rows[label] == [' / '.join(fmt.format(sum(study[row][f][key]) / len(study[row][f][key]))
                                          for row in ('mcnet_ffdnet_hqs', 'mcnet_ffdnet_hqs_kernels'))
                               for f in ('x3', 'x3_n2.55', 'x3_n7.65', 'x4')], label


# the Table K records of docs/kernel_layers.md: row -> record (the trained layers': one per scale)
TRAINED_RECORDS = {'x2': 'kernel_table_mcnet_ffdnet_hqs_kernels_x2_h100.json',
                   'x3': 'kernel_table_mcnet_ffdnet_hqs_kernels_x3_h100.json',
                   'x4': 'kernel_table_mcnet_ffdnet_hqs_kernels_x4_h100.json'}
BESIDE_TRAINED = {
    'USRNet-tiny (official weights, fetched; not shipped)': ('usrnet_tiny', 'kernel_table_usrnet_tiny_h100.json'),
    'MCNet + FFDNetHQS, the untrained layer': ('mcnet_ffdnet_hqs', 'kernel_table_mcnet_ffdnet_hqs_h100.json'),
    'FFDNetHQS alone': ('ffdnet_hqs', 'kernel_table_ffdnet_hqs_h100.json')}


def test_trained_layer_table_k_is_its_records():
    """docs/kernel_layers.md's Table K tables: each row's mean per family, the trained layer's lowest / highest
    difference to it per cell, and the trained layer's convergence, iterations, times and images below its backbone
    and the untrained layer, from the records."""
    lines = _prior_pages_lines()
    families = '| x2 | x3 | x3, 2.55 | x3, 7.65 | x4 |'
    means = dict(_table_after(lines, f'| Table K, row means {families}'))
    diffs = dict(_table_after(lines, f'| Table K, the trained layer minus this row, per cell: lowest / highest '
                                     f'{families}'))
    solves = dict(_table_after(lines, f"| Table K, the trained layer's solves {families}"))
    _, published = read_published(str(RECORDS / 'usrnet_table1_published.tsv'))
    for f, family in enumerate(PRIOR_FAMILIES):
        trained = _kernel_cells(TRAINED_RECORDS[family[:2]], 'mcnet_ffdnet_hqs_kernels', family)
        psnr = [c['psnr'] for c in trained]
        assert means['MCNet + FFDNetHQS, the trained layer (shipped)'][f] == f'{sum(psnr) / 12:.2f}', family
        others = {label: _kernel_cells(record, row, family) for label, (row, record) in BESIDE_TRAINED.items()}
        for label, values in [(label, [c['psnr'] for c in cells]) for label, cells in others.items()] + [
                ('IRCNN (published)', published[('IRCNN', family)])]:
            d = [a - b for a, b in zip(psnr, values)]
            assert means[label][f] == f'{sum(values) / 12:.2f}', (label, family)
            assert diffs[label][f] == f'{min(d):+.3f} / {max(d):+.3f}', (label, family)
        untrained = others['MCNet + FFDNetHQS, the untrained layer']
        assert solves['reached 1e-4 (the untrained layer)'][f] == f'{_reached(trained)} ({_reached(untrained)})'
        iterations = [sum(c['iterations'] for c in cells) / 12 for cells in (trained, untrained)]
        assert solves['mean iterations (the untrained layer)'][f] == '{:.1f} ({:.1f})'.format(*iterations), family
        ms = [1000 * c['seconds'] / c['images'] for c in trained[1:]]
        assert solves['ms per image, kernels 2-12'][f] == f'{min(ms):.0f}-{max(ms):.0f}', family
        below = [sum(c['per_image'][name] < o['per_image'][name] for c, o in zip(trained, cells)
                     for name in c['per_image']) for cells in (others['FFDNetHQS alone'], untrained)]
        assert solves['images below the backbone / the untrained layer, of 816'][f] == f'{below[0]} / {below[1]}'


def test_shipped_prior_times_are_their_record():
    """The per-image times of docs/shipped_prior.md (one table process alone on the card) are the ranges of
    benchmarks/records/kernel_speed_h100.json."""
    cells = json.loads((RECORDS / 'kernel_speed_h100.json').read_text())['cells']
    ms = {}
    for key, cell in cells.items():
        ms.setdefault(key.split('|')[0], []).append(1000 * cell['seconds'] / cell['images'])
    text = ' '.join(' '.join(_prior_pages_lines()).split())
    for label, row in (('USRNet-tiny', 'usrnet_tiny'), ('FFDNetHQS alone', 'ffdnet_hqs'),
                       ('MCNet + FFDNetHQS', 'mcnet_ffdnet_hqs')):
        assert f'{label} {min(ms[row]):.1f}-{max(ms[row]):.1f} ms' in text, label
    ratios = [cells[k]['seconds'] / cells[k.replace('usrnet_tiny', 'mcnet_ffdnet_hqs')]['seconds']
              for k in cells if k.startswith('usrnet_tiny|')]
    assert f'which is {1 / max(ratios):.0f}-{1 / min(ratios):.0f} times USRNet-tiny' in text


# the trained x2 layers of docs/kernel_layers.md's convergence table: label -> option-file row of the records
PENALTY_ROWS = {
    'untrained': 'mcnet_ffdnet_hqs',
    'no penalty, 500 iterations (CPU)': 'layer_x2_no_penalty_500',
    'no penalty, 2,000 (CPU)': 'layer_x2_no_penalty_2000',
    'weight 10, 500 (H100)': 'layer_x2_penalty_w10_500',
    'weight 100, 1,250 (H100)': 'layer_x2_penalty_w100_1250',
    'weight 100, 4,000 (CPU; shipped)': 'mcnet_ffdnet_hqs_kernels',
}


def test_layer_convergence_table_is_its_records():
    """docs/kernel_layers.md's table of the trained x2 layers: PSNR, convergence and iterations from the prior study's
    record, the rate (largest of the images) and the Frobenius estimate (mean) from layer_jacobian.py's."""
    rows = _table_after(_prior_pages_lines(), '| x2 layer, Set5 | RGB PSNR | solves at 1e-4 | mean iterations | rate '
                                              '| Frobenius |')
    assert [label for label, _ in rows] == list(PENALTY_ROWS)
    study = json.loads((RECORDS / 'prior_study_set5_layer_penalty_x2_cpu.json').read_text())['results']
    jac = json.loads((RECORDS / 'layer_jacobian_x2_cpu.json').read_text())['results']
    for label, values in rows:
        s, j = study[PENALTY_ROWS[label]]['x2'], jac[PENALTY_ROWS[label]]['x2']
        mean = {key: sum(s[key]) / len(s[key]) for key in ('psnr', 'converged', 'iterations')}
        assert values == [f'{mean["psnr"]:.2f}', f'{100 * mean["converged"]:.0f}%', f'{mean["iterations"]:.1f}',
                          f'{max(j["rate"]):.2f}', f'{sum(j["frobenius"]) / len(j["frobenius"]):.3f}'], label
