"""How the package's classes are put together: code is shared by inheritance or composition, never by assigning
another class's methods in a class body."""
import ast
from pathlib import Path

from conftest import REPO_ROOT

PACKAGE = Path(REPO_ROOT) / 'mcnet_basicsr'


def _borrowed(value, names):
    """Whether ``value`` reads an attribute of a class named in ``names`` (``Other.method``, also wrapped, as in
    ``staticmethod(Other.method)``)."""
    return any(isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names
               for node in ast.walk(value))


def test_no_class_assigns_another_class_method():
    found = []
    for path in sorted(PACKAGE.rglob('*.py')):
        tree = ast.parse(path.read_text(), str(path))
        classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
        imported = {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                    for alias in node.names if alias.name[:1].isupper()}
        names = classes | imported
        for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
            for stmt in cls.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None \
                        and _borrowed(stmt.value, names - {cls.name}):
                    found.append(f'{path.relative_to(REPO_ROOT)}:{stmt.lineno} ({cls.name})')
    assert not found, f'class bodies assigning another class\'s attribute: {found}'


def test_the_check_sees_a_borrowed_method():
    tree = ast.parse('class A:\n    def f(self): pass\nclass B:\n    f = A.f\n    g = staticmethod(A.f)\n')
    b = tree.body[1]
    assert all(_borrowed(stmt.value, {'A'}) for stmt in b.body)


def test_mcnet_arch_stays_small():
    """MCNetArch is the network: tiling, precision and colour live in the frozen backbone, the measurement in the
    layer core, checkpoint records and settings in their mixins."""
    path = PACKAGE / 'archs' / 'mcnet_arch.py'
    cls = next(node for node in ast.parse(path.read_text()).body
               if isinstance(node, ast.ClassDef) and node.name == 'MCNetArch')
    lines = cls.end_lineno - cls.lineno + 1
    assert lines <= 200, f'MCNetArch has {lines} lines'
