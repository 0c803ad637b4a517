"""The paper's Table 1 (data fidelity) and Table 2 (PSNR/SSIM) as this project reproduces them: the rows (one test
option file pattern each), the record schema, the targets and literature figures they are checked against, and the
markdown rendering of a list of records (``scripts/reproduce_tables.py`` evaluates and writes them).
"""
import datetime

REQUIRED_KEYS = ('method', 'backbone', 'scale', 'dataset', 'psnr', 'ssim', 'fidelity', 'seconds_per_image',
                 'iterations')
EXTRA_KEYS = ('backbone_weights', 'psnr_float_y', 'psnr_rgb_uint8', 'ssim_rgb_uint8', 'eps', 'eps_rms',
              'fidelity_over_eps', 'fidelity_mean', 'images', 'option', 'device', 'overrides', 'iterations_max',
              'converged', 'residual_max')
SCALES = (2, 3, 4)
DATASETS = ('Set5', 'Set14')

# Table rows in the paper's order: (method, backbone, backbone weights, option file pattern). Rows whose
# option file, weights or data are missing are reported as skipped. The official RDN/RCAN weights cannot be
# downloaded here; the tables use our compact RDN/RCAN (trained on T91 + BSD200) and keep the official-size
# rows for users who have those weights.
ROWS = (
    ('bicubic', 'none', '-', 'options/test_bicubic_x{s}.yml'),
    ('pnp', 'none', 'ours', 'options/test_pnp_x{s}.yml'),
    ('pnp', 'none', 'ryu', 'options/test_pnp_ryu_x{s}.yml'),
    ('backbone', 'srcnn', 'official', 'options/test_srcnn_x{s}.yml'),
    ('tvtv', 'srcnn', 'official', 'options/test_tvtv_srcnn_x{s}.yml'),
    ('mcnet', 'srcnn', 'official', 'options/test_mcnet_srcnn_x{s}.yml'),
    ('backbone', 'rdn', 'official', 'options/test_rdn_x{s}.yml'),
    ('tvtv', 'rdn', 'official', 'options/test_tvtv_rdn_x{s}.yml'),
    ('mcnet', 'rdn', 'official', 'options/test_mcnet_rdn_x{s}.yml'),
    ('backbone', 'rdn', 'ours-compact', 'options/test_rdn_compact_x{s}.yml'),
    ('tvtv', 'rdn', 'ours-compact', 'options/test_tvtv_rdn_compact_x{s}.yml'),
    ('mcnet', 'rdn', 'ours-compact', 'options/test_mcnet_rdn_compact_x{s}.yml'),
    ('backbone', 'rcan', 'official', 'options/test_rcan_x{s}.yml'),
    ('tvtv', 'rcan', 'official', 'options/test_tvtv_rcan_x{s}.yml'),
    ('mcnet', 'rcan', 'official', 'options/test_mcnet_rcan_x{s}.yml'),
    ('backbone', 'rcan', 'ours-compact', 'options/test_rcan_compact_x{s}.yml'),
    ('tvtv', 'rcan', 'ours-compact', 'options/test_tvtv_rcan_compact_x{s}.yml'),
    ('mcnet', 'rcan', 'ours-compact', 'options/test_mcnet_rcan_compact_x{s}.yml'),
    ('backbone', 'imdn', 'official', 'options/test_imdn_x{s}.yml'),
    ('tvtv', 'imdn', 'official', 'options/test_tvtv_imdn_x{s}.yml'),
    ('mcnet', 'imdn', 'official', 'options/test_mcnet_imdn_x{s}.yml'),
    ('backbone', 'pan', 'official', 'options/test_pan_x{s}.yml'),
    ('tvtv', 'pan', 'official', 'options/test_tvtv_pan_x{s}.yml'),
    ('mcnet', 'pan', 'official', 'options/test_mcnet_pan_x{s}.yml'),
)

# The paper-derived targets for MCNet + official SRCNN (the tables' protocol, Y quantised to uint8, under which the
# official SRCNN gives the literature's 36.66 / 32.75 / 30.48):
# per cell the larger of the paper's MCNet+SRCNN value and our SRCNN plus the paper's MCNet gain.
TARGETS = {('mcnet', 'srcnn', 'Set5'): (37.23, 33.44, 31.22), ('mcnet', 'srcnn', 'Set14'): (32.90, 29.66, 27.98)}
# MCNet's gain over a strong backbone that the authors claim (their training logs: +0.08 dB for RDN/RCAN at x2 on
# Set5, +0.05 at x3, +0.01..+0.02 at x4), per scale x2/x3/x4; other non-SRCNN backbones are held to +0.05 everywhere
STRONG_BACKBONE_GAIN = {'imdn': (0.05, 0.02, 0.02), 'pan': (0.05, 0.02, 0.02)}
# Set5 x2/x3/x4 figures of the literature that tie the protocol to it (bicubic and the official SRCNN 9-5-5), each
# +-0.02; checked under both uint8 protocols (only the primary must hold)
LITERATURE_SET5 = {('bicubic', 'none', '-'): (33.66, 30.39, 28.42),
                   ('backbone', 'srcnn', 'official'): (36.66, 32.75, 30.48)}

ROW_LABELS = {
    ('bicubic', 'none', '-'): 'Bicubic',
    ('pnp', 'none', 'ours'): 'PnP-ADMM (our real-SN DnCNN17, beta = 0)',
    ('pnp', 'none', 'ryu'): 'PnP-ADMM (Ryu et al. DnCNN17 without SN)',
}


def row_label(method, backbone, weights='official'):
    if (method, backbone, weights) in ROW_LABELS:
        return ROW_LABELS[(method, backbone, weights)]
    name = {'srcnn': 'SRCNN', 'rdn': 'RDN', 'rcan': 'RCAN', 'imdn': 'IMDN', 'pan': 'PAN'}.get(backbone, backbone)
    if weights == 'ours-compact':
        name += ' (ours, compact)'
    return {'backbone': name, 'tvtv': f'TV-TV + {name}', 'mcnet': f'MCNet + {name}', 'pnp': 'PnP-ADMM'}[method]


def to_record(r):
    return {k: r[k] for k in REQUIRED_KEYS + EXTRA_KEYS}


def key_of(r):
    return (r['method'], r['backbone'], r.get('backbone_weights', 'official'), r['dataset'], r['scale'])


def _cells(records, key, fmt):
    return {key_of(r): (fmt(r[key]) if r[key] is not None else '-') for r in records}


def acceptance(records):
    """The per-cell checks of the measured rows against the targets and the literature: lines of text, one per check."""
    by = {key_of(r): r for r in records}
    lines = []
    for (m, b, w, d, s), r in sorted(by.items()):
        if m != 'mcnet':
            continue
        comps = [('backbone', b, w), ('tvtv', b, w)] + ([('pnp', 'none', 'ours')] if b == 'srcnn' else [])
        for cm, cb, cw in comps:
            other = by.get((cm, cb, cw, d, s))
            if other is not None:
                diff = r['psnr'] - other['psnr']
                need = 0.0
                if cm == 'backbone' and b != 'srcnn':
                    need = STRONG_BACKBONE_GAIN[b][s - 2] if b in STRONG_BACKBONE_GAIN else 0.05
                ok = diff >= need
                lines.append(f"{'PASS' if ok else 'FAIL'} {row_label(m, b, w)} - {row_label(cm, cb, cw)} on {d} x{s}: "
                             f"{diff:+.3f} dB (need >= {need:+.2f})")
        target = TARGETS.get((m, b, d))
        if target is not None and w == 'official':
            t = target[s - 2]
            # strict: a value that only rounds to the target (32.896 for 32.90) does not meet it
            lines.append(f"{'PASS' if r['psnr'] >= t else 'FAIL'} {row_label(m, b, w)} {d} x{s}: "
                         f"{r['psnr']:.3f} dB vs target {t:.2f} ({r['psnr'] - t:+.3f})")
            if r.get('psnr_rgb_uint8') is not None:
                v = r['psnr_rgb_uint8']
                lines.append(f"(info) {row_label(m, b, w)} {d} x{s}, RGB-uint8 protocol: {v:.3f} dB vs target {t:.2f} "
                             f"({v - t:+.3f})")
        ratio = r.get('fidelity_over_eps')
        if ratio is None:  # eps = 0: exact consistency up to rounding
            lines.append(f"{'PASS' if r['fidelity'] <= 1e-5 else 'FAIL'} {row_label(m, b, w)} {d} x{s}: "
                         f"max ||Ax - b|| = {r['fidelity']:.2e} (eps = 0: need <= 1e-5)")
        else:  # eps > 0: inside the ball on every image (float64 check of the float32 output)
            lines.append(f"{'PASS' if ratio <= 1 + 1e-4 else 'FAIL'} {row_label(m, b, w)} {d} x{s}: "
                         f"max ||Ax - b|| / eps = {ratio:.4f} (need <= 1)")
    for (m, b, w, d, s), r in sorted(by.items()):
        lit = LITERATURE_SET5.get((m, b, w))
        if lit is None or d != 'Set5':
            continue
        for key, name in (('psnr', 'Y-uint8 (primary)'), ('psnr_rgb_uint8', 'RGB-uint8')):
            if r.get(key) is not None:
                v, ref = r[key], lit[s - 2]
                ok = abs(v - ref) <= 0.02
                verdict = ('PASS' if ok else 'FAIL') if key == 'psnr' else '(info)'
                lines.append(f"{verdict} {row_label(m, b, w)} Set5 x{s}, {name} protocol: {v:.3f} dB vs the "
                             f"literature's {ref:.2f} +-0.02 ({v - ref:+.3f}{'' if ok else ', outside'})")
    return lines


def markdown(records, skipped, quick=False):
    present = {(r['dataset'], r['scale']) for r in records}
    cols = [(d, s) for d in DATASETS for s in SCALES if (d, s) in present]
    rows = []
    for method, backbone, weights, _ in ROWS:
        if any(key_of(r)[:3] == (method, backbone, weights) for r in records):
            rows.append((method, backbone, weights))
    devices = sorted({r['device'] for r in records})
    head = '| | ' + ' | '.join(f'{d} x{s}' for d, s in cols) + ' |\n|---|' + '---|' * len(cols) + '\n'

    def table(cell, extra_rows=()):
        out = head
        for m, b, w in rows:
            out += f'| {row_label(m, b, w)} | ' + ' | '.join(cell.get((m, b, w, d, s), 'n/a') for d, s in cols) + ' |\n'
        for label, values in extra_rows:
            out += f'| {label} | ' + ' | '.join(values.get((d, s), '') for d, s in cols) + ' |\n'
        return out

    psnr = _cells(records, 'psnr', lambda v: f'{v:.2f}')
    ssim = _cells(records, 'ssim', lambda v: f'{v:.4f}')
    both = {k: f'{psnr[k]} / {ssim[k]}' for k in psnr}
    fid = _cells(records, 'fidelity', lambda v: f'{v:.1e}')
    fid_mean = _cells(records, 'fidelity_mean', lambda v: f'{v:.1e}')
    fid_both = {k: f'{fid[k]} ({fid_mean[k]})' for k in fid}
    secs = _cells(records, 'seconds_per_image', lambda v: f'{v:.3f}')
    iters = _cells(records, 'iterations', lambda v: f'{v:.0f}')
    # a solve stopped by max_iter returns its best iterate: say so where it happened (records since 2026-11-27)
    conv = _cells([r for r in records if r.get('converged') is not None], 'converged', lambda v: f'{v:.0%}')
    timing = {k: f'{secs[k]} ({iters[k]}' + (f', {conv[k]} to tol)' if k in conv and conv[k] != '100%' else ')')
              for k in secs}
    overrides = sorted({o for r in records for o in r['overrides']})
    target_rows = []
    for (m, b, d), values in TARGETS.items():
        cells = {}
        for i, s in enumerate(SCALES):
            got = next((r['psnr'] for r in records if key_of(r) == (m, b, 'official', d, s)), None)
            cells[(d, s)] = f'{values[i]:.2f}' + (f' ({got - values[i]:+.2f})' if got is not None else '')
        target_rows.append((f'target for {row_label(m, b)} (difference)', cells))
    merged = {}
    for _, cells in target_rows:
        merged.update(cells)
    target_rows = [('paper-derived target, MCNet + SRCNN (ours minus target)', merged)] if merged else []

    md = '# Table 1 and Table 2 rows reproduced by `scripts/reproduce_tables.py`\n\n'
    if quick:
        md += ('**QUICK SMOKE RUN** (`--quick`: first Set5 image, x2, CPU, loose solver settings). '
               'These numbers say nothing about the methods.\n\n')
    md += (f'Generated {datetime.date.today().isoformat()} on {", ".join(devices) or "-"}. Protocol: '
           '`scripts/evaluate.py` (HR mod-crop, LR = MATLAB bicubic then uint8, the output\'s Y rounded to uint8, '
           'Y-PSNR/SSIM with BasicSR against the Y of the uint8 HR, crop = scale; fidelity on the float output). '
           'This protocol gives the literature\'s bicubic and official SRCNN figures to the hundredth.\n'
           'Backbone weights: SRCNN = the official 9-5-5 ImageNet MATLAB models (converted); "ours, compact" = '
           'RDN/RCAN trained by this project on T91 + BSD200 (`options/train_{rdn,rcan}_compact_x*.yml`); the '
           'official-size RDN/RCAN rows need weights that cannot be downloaded here and are skipped.\n'
           'The paper\'s own table is not typed in (no reliable copy is available offline); the row below the '
           'table gives the paper-derived targets of the MCNet + SRCNN rows instead.\n')
    if overrides:
        md += f'Option overrides: `{"`, `".join(overrides)}`.\n'
    md += '\n## Table 2: PSNR (dB) / SSIM on Y\n\n' + table(both, target_rows)
    if any(r.get('psnr_float_y') is not None for r in records):
        fy = _cells([r for r in records if r.get('psnr_float_y') is not None], 'psnr_float_y', lambda v: f'{v:.2f}')
        md += ('\n## Table 2, secondary protocol: PSNR (dB) of the float Y output (not rounded), crop = scale\n\n'
               + table(fy))
    if any(r.get('psnr_rgb_uint8') is not None for r in records):
        rgb = [r for r in records if r.get('psnr_rgb_uint8') is not None]
        rp = _cells(rgb, 'psnr_rgb_uint8', lambda v: f'{v:.2f}')
        rs = _cells(rgb, 'ssim_rgb_uint8', lambda v: f'{v:.4f}')
        md += ('\n## Table 2, secondary protocol: PSNR (dB) / SSIM with the RGB output rounded to uint8, '
               'crop = scale\n\n'
               'What BasicSR\'s own metrics print in validation and `mcnet_basicsr/test.py` (`# psnr`; `tensor2img` '
               'rounds RGB, the metric takes Y in float; `psnr_rgb_uint8` in the records): 0.005-0.03 dB above the '
               'primary protocol, which an MCNet model\'s validation logs beside it as `psnr_y_uint8`.\n\n'
               + table({k: f'{rp[k]} / {rs[k]}' for k in rp}))
    md += ('\n## Table 1: data fidelity ||A x - b||_2 (Y in [0, 1]), max over the set (mean)\n\n' + table(fid_both))
    md += ('\n## Seconds per image (mean iterations; for MCNet, the share of images whose solve reached the '
           'tolerance when not all did)\n\n' + table(timing))
    md += ('\nNotes: PnP-ADMM is MCNet\'s iteration with beta = 0 and no backbone, run for a fixed number of '
           'iterations; TV-TV is solved by ADMM with the exact projection onto the consistency set '
           '(see `mcnet_basicsr/archs/baselines_arch.py`).\n')
    checks = acceptance(records)
    if checks and not quick:
        md += '\n## Acceptance checks\n\n' + ''.join(f'- {line}\n' for line in checks)
    if skipped:
        # one line per row (its scales' reasons joined), so that the page stays short
        by_label = {}
        for label, s, reason in skipped:
            by_label.setdefault(label, []).append(f'x{s}: {reason}')
        md += '\n## Skipped\n\n' + ''.join(f'- {label}: {"; ".join(v)}\n' for label, v in by_label.items())
    return md
