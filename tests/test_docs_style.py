"""docs/ reads as pages for users (STYLE.md, "Docs as a lab notebook", "Evidence inside docs/"): every page at most
250 lines, no sentence over 60 words, and no records kept inside docs/ (they live in benchmarks/records/)."""
import re

import pytest

from conftest import REPO_ROOT

DOCS = REPO_ROOT / 'docs'
PAGES = sorted(DOCS.glob('*.md'))
MAX_LINES = 250
MAX_WORDS = 60

URL = re.compile(r'https?://\S+|\]\([^)]*\)')
CODE_SPAN = re.compile(r'`[^`]*`')
LIST_ITEM = re.compile(r'^\s*(?:[-*+]|\d+\.)\s+')
# a sentence ends at . ! or ? (also inside bold: ``met.**``) followed by space and a capital, a digit, an opening
# bracket or quote, or bold
SENTENCE_END = re.compile(r'(?:(?<=[.!?])|(?<=[.!?]\*\*))\s+(?=[A-Z0-9(\["`*])')


def paragraphs(text):
    """The prose of a markdown page as paragraphs: fenced and indented code blocks, tables, headings and HTML
    lines are left out; a list item starts a paragraph of its own."""
    out, current, fenced = [], [], False
    for line in text.splitlines():
        if line.lstrip().startswith('```'):
            fenced = not fenced
            line = ''
        skip = (fenced or line.startswith('    ') and not current or line.lstrip().startswith(('|', '#', '<'))
                or not line.strip())
        if skip or LIST_ITEM.match(line):
            if current:
                out.append(' '.join(current))
            current = []
            if skip:
                continue
        current.append(LIST_ITEM.sub('', line).strip())
    if current:
        out.append(' '.join(current))
    return out


def sentences(text):
    """The sentences of a page's prose; inline code counts as one word, URLs and link targets as none."""
    for para in paragraphs(text):
        para = ' '.join(CODE_SPAN.sub('CODE', URL.sub('', para)).split())
        for sentence in SENTENCE_END.split(para):
            if sentence.strip():
                yield sentence.strip()


def test_sentence_splitter():
    text = ('# Title\n\nOne two three. Four five (six).\n\n    python run.py --a. B c\n\n| a. B | c |\n\n'
            '```\nx. Y z\n```\n- item one\n- item two. Next one\nsee https://x.org/a.B c and `a. B`.\n\n'
            '**Bold: met.** Then more. **Bold** too.\n')
    assert list(sentences(text)) == ['One two three.', 'Four five (six).', 'item one', 'item two.',
                                     'Next one see c and CODE.', '**Bold: met.**', 'Then more.', '**Bold** too.']


def test_docs_has_no_records():
    assert not (DOCS / 'records').exists(), 'records live in benchmarks/records/, beside the scripts that write them'


@pytest.mark.parametrize('page', PAGES, ids=[p.name for p in PAGES])
def test_page_is_short(page):
    lines = len(page.read_text(encoding='utf-8').splitlines())
    assert lines <= MAX_LINES, f'{page.name}: {lines} lines (split it by topic or table)'


@pytest.mark.parametrize('page', PAGES, ids=[p.name for p in PAGES])
def test_no_sentence_over_60_words(page):
    long = [(len(s.split()), s[:80]) for s in sentences(page.read_text(encoding='utf-8'))
            if len(s.split()) > MAX_WORDS]
    assert not long, f'{page.name}: {len(long)} sentences over {MAX_WORDS} words: {long}'


def test_readme_is_short_and_plain():
    """The README: at most 160 lines, no sentence over 60 words."""
    text = (REPO_ROOT / 'README.md').read_text(encoding='utf-8')
    assert len(text.splitlines()) <= 160
    long = [(len(s.split()), s[:80]) for s in sentences(text) if len(s.split()) > MAX_WORDS]
    assert not long, long


def test_readme_degradation_table_is_the_docs_numbers():
    """Every number of the README's table of known degradations stands in the row means of docs' Table K / Table R
    (CBSD68, x4) for its row: IMDN alone, the best shipped IMDN layer, USRNet-tiny."""
    readme = (REPO_ROOT / 'README.md').read_text(encoding='utf-8').splitlines()
    start = readme.index('| LR made by | IMDN alone | MCNet + IMDN, told A | USRNet-tiny (told the kernel) |')
    rows = {}
    for line in readme[start + 2:]:
        if not line.startswith('| '):
            break
        label, *cells = [c.strip() for c in line.strip('|').split('|')]
        rows[label] = [c.split(' / ') for c in cells]
    kernels = (DOCS / 'degradations_kernels.md').read_text().split('**x4, noise 0**')[1].split('\n\n')[1]
    means = {line.split('|')[1].strip(): line.strip('|').split('|')[-1].strip() for line in kernels.splitlines()[2:]}
    assert rows["USRNet's 12 blur kernels"] == [[means['imdn']], [means['mcnet_imdn_kernels']], [means['usrnet_tiny']]]
    resizers = (DOCS / 'degradations_resizer_layers.md').read_text().split('| x4, CBSD68 |')[1].split('\n\n')[0]
    header = [c.strip() for c in resizers.splitlines()[0].strip().strip('|').split('|')]
    table = {line.strip('|').split('|')[0].strip(): dict(zip(header, [c.strip() for c in
                                                                      line.strip('|').split('|')[1:]]))
             for line in resizers.splitlines()[2:] if line.startswith('| ')}
    for label, names in (('`cv2-area` / `cv2-linear` / `cv2-cubic`', ['cv2-area', 'cv2-linear', 'cv2-cubic']),
                         ('`pil-bicubic`', ['pil-bicubic'])):
        alone, layer, _ = rows[label]
        assert alone == [table['IMDN alone'][n] for n in names]
        best = [max(float(row[n]) for name, row in table.items() if name.startswith('MCNet + IMDN') and row[n] != '-')
                for n in names]
        assert layer == [f'{b:.2f}' for b in best]
