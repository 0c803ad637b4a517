"""The repository's shape, read from its files (no imports run): no import cycles inside the package, scripts/
as thin command lines that nothing imports and that import nothing of each other, the lab (benchmarks/) outside
the product, and no package module that only the lab or the tests use."""
import ast

import pytest

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / 'mcnet_basicsr'
SCRIPTS = REPO_ROOT / 'scripts'
LAB = REPO_ROOT / 'benchmarks'
TOP_LEVEL_MODULES = ('mcnet_basicsr_hook', )
# what a user runs: python -m <module>, the mcnet-sr console script (mcnet_basicsr.cli.main), the .pth hook
ENTRY_POINTS = ('mcnet_basicsr', 'mcnet_basicsr.train', 'mcnet_basicsr.test', 'mcnet_basicsr.demo',
                'mcnet_basicsr.autoload', 'mcnet_basicsr.cli.main', 'mcnet_basicsr.cli.__main__',
                'mcnet_basicsr.cli.inference', *TOP_LEVEL_MODULES)
# subpackages whose __init__ imports every module of theirs with this suffix (mcnet_basicsr.utils.registration)
REGISTERED = {'archs': '_arch', 'data': '_dataset', 'losses': '_loss', 'models': '_model'}


def module_name(path):
    parts = list(path.relative_to(REPO_ROOT).with_suffix('').parts)
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def imported_names(path):
    """Absolute names of the modules a file imports (relative imports resolved; ``from a import b`` gives ``a.b``
    and ``a``: ``b`` may be a module or a name in ``a``)."""
    tree = ast.parse(path.read_text(encoding='utf-8'))
    package = module_name(path) if path.name == '__init__.py' else module_name(path).rpartition('.')[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = package.split('.')[:len(package.split('.')) - node.level + 1]
                base = '.'.join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f'{base}.{alias.name}' for alias in node.names)
    return names


def package_graph(root=REPO_ROOT):
    """Module -> the modules of the package and the top-level modules it imports, at module or function level."""
    modules = {module_name(p): p for p in (root / 'mcnet_basicsr').rglob('*.py')}
    modules.update({name: root / f'{name}.py' for name in TOP_LEVEL_MODULES if (root / f'{name}.py').is_file()})
    return {name: sorted(n for n in imported_names(path) if n in modules and n != name)
            for name, path in modules.items()}


# layer -> the modules of the package it must not import (the package's root runs the registration of everything)
FORBIDDEN = {'mcnet_basicsr.utils': lambda n: n == 'mcnet_basicsr' or not n.startswith('mcnet_basicsr.utils'),
             'mcnet_basicsr.ops': lambda n: n == 'mcnet_basicsr' or n.split('.')[1] in ('archs', 'models', 'cli'),
             'mcnet_basicsr.deq': lambda n: n == 'mcnet_basicsr' or n.split('.')[1] in ('archs', 'models', 'cli')}


def upward_imports(graph):
    """``(module, imported)`` pairs where a lower layer (helpers, operators, solvers) imports above itself."""
    return [(name, n) for name, imported in sorted(graph.items()) for layer, forbidden in FORBIDDEN.items()
            if name == layer or name.startswith(layer + '.') for n in imported
            if n.startswith('mcnet_basicsr') and forbidden(n)]


def product_files():
    """The package, the scripts and the top-level modules: what is installed or run by users."""
    return (sorted(PACKAGE.rglob('*.py')) + sorted(SCRIPTS.glob('*.py')) +
            [REPO_ROOT / f'{name}.py' for name in TOP_LEVEL_MODULES])


def find_cycle(graph):
    """One import cycle as a list of modules, or None (a package importing its own submodules is no cycle)."""
    state, stack = {}, []

    def visit(node):
        state[node] = 'open'
        stack.append(node)
        for nxt in graph[node]:
            if node.startswith(nxt + '.'):  # a submodule naming its parent package: the parent is already loading
                continue
            if state.get(nxt) == 'open':
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 'done'
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_find_cycle_sees_a_cycle():
    assert find_cycle({'a': ['b'], 'b': ['c'], 'c': ['a']}) == ['a', 'b', 'c', 'a']
    assert find_cycle({'p': ['p.x'], 'p.x': ['p']}) is None


def test_no_import_cycles_inside_the_package():
    graph = package_graph()
    assert 'mcnet_basicsr.evaluation' in graph and 'mcnet_basicsr.utils.checkpoint' in graph
    assert 'mcnet_basicsr_hook' in graph and 'mcnet_basicsr.cli.options' in graph['mcnet_basicsr.cli.inference']
    assert find_cycle(graph) is None


def test_helpers_operators_and_solvers_import_nothing_above_them():
    """utils/ imports nothing of the package outside utils/; ops/ and deq/ import no archs, models or cli; none of
    them imports the package's root (which registers everything)."""
    assert upward_imports({'mcnet_basicsr.utils.a': ['mcnet_basicsr.zoo.assets'], 'mcnet_basicsr.ops.b': [
        'mcnet_basicsr.utils.c', 'mcnet_basicsr'], 'mcnet_basicsr.deq': ['mcnet_basicsr.deq.solvers']}) == [
            ('mcnet_basicsr.ops.b', 'mcnet_basicsr'), ('mcnet_basicsr.utils.a', 'mcnet_basicsr.zoo.assets')]
    assert upward_imports(package_graph()) == []


def test_scripts_are_command_lines_nothing_imports():
    stems = {p.stem for p in SCRIPTS.glob('*.py')}
    assert {'evaluate', 'reproduce_tables', 'convert_weights'} <= stems
    for path in sorted(SCRIPTS.glob('*.py')) + sorted(PACKAGE.rglob('*.py')):
        names = {n.split('.')[0] for n in imported_names(path)}
        assert not names & (stems | {'scripts'}), f'{path.relative_to(REPO_ROOT)} imports {sorted(names & stems)}'
    for path in SCRIPTS.glob('*.py'):
        assert 'sys.path' not in path.read_text(encoding='utf-8'), f'{path.name} edits sys.path'
        assert "if __name__ == '__main__':" in path.read_text(encoding='utf-8'), f'{path.name} is not a command'


def test_the_product_never_imports_the_lab():
    """benchmarks/ imports the package (and its own modules by name); the package, the scripts and the top-level
    modules import nothing of it."""
    lab = {p.stem for p in LAB.glob('*.py')} | {'benchmarks'}
    assert {'benchmark', 'benchmarking', 'cli_latency', 'tolerance_sweep'} <= lab
    assert any('mcnet_basicsr' in {n.split('.')[0] for n in imported_names(p)} for p in LAB.glob('*.py'))
    for path in product_files():
        names = {n.split('.')[0] for n in imported_names(path)}
        assert not names & lab, f'{path.relative_to(REPO_ROOT)} imports the lab: {sorted(names & lab)}'


def test_every_package_module_serves_the_product():
    """Every module of the package is reached from what users run (the entry points, the scripts, the registered
    arch/model/dataset/loss modules) through imports inside the product: none is there for the lab or the tests."""
    modules = {module_name(p): p for p in PACKAGE.rglob('*.py')}
    roots = set(ENTRY_POINTS) | {name for name in modules for sub, suffix in REGISTERED.items()
                                 if name.startswith(f'mcnet_basicsr.{sub}.') and name.endswith(suffix)}
    roots |= {n for p in SCRIPTS.glob('*.py') for n in imported_names(p)}
    files = dict(modules, **{name: REPO_ROOT / f'{name}.py' for name in TOP_LEVEL_MODULES})
    reached, todo = set(), [r for r in roots if r in files]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        parts = name.split('.')
        todo.extend('.'.join(parts[:i]) for i in range(1, len(parts)))  # importing a.b.c runs a and a.b
        todo.extend(n for n in imported_names(files[name]) if n in files)
    assert not sorted(set(modules) - reached)


@pytest.mark.slow  # a pytest subprocess
def test_pytest_summary_lists_skip_reasons(tmp_path):
    """pytest.ini makes the summary list each skipped test with its reason (-rs), so a run without the reference data
    beside the repository says what it left out."""
    import subprocess
    import sys
    (tmp_path / 'test_probe.py').write_text('import pytest\n\n\ndef test_needs_data():\n'
                                            "    pytest.skip('needs reference data, absent here')\n")
    proc = subprocess.run([sys.executable, '-m', 'pytest', '-c', str(REPO_ROOT / 'pytest.ini'), '--rootdir',
                           str(tmp_path), '-n', '0', '-p', 'no:cacheprovider', str(tmp_path / 'test_probe.py')],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert 'SKIPPED [1] test_probe.py:5: needs reference data, absent here' in proc.stdout, proc.stdout[-2000:]


def test_test_files_are_split_by_topic():
    """Each test file holds one topic, at most 500 lines (a longer one is split, its shared helpers in a module)."""
    long = {p.name: n for p in sorted((REPO_ROOT / 'tests').glob('*.py'))
            if (n := len(p.read_text(encoding='utf-8').splitlines())) > 500}
    assert not long, long
