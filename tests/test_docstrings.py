"""lite.docstrings: module and class docstrings of one package dropped, functions' and other packages' kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PKG = {
    "pkgdoc/__init__.py": '"""package doc"""\n',
    "pkgdoc/mod.py": ('"""module doc"""\n\n\nclass C:\n    """class doc"""\n\n\n'
                      'def f() -> None:\n    """function doc"""\n'),
    "pkgdocx/__init__.py": '"""other package doc"""\n',
}

CASE = r'''
import json, sys
import pkgdoc, pkgdoc.mod, pkgdocx
from lite.docstrings import drop_docstrings
n = drop_docstrings("pkgdoc")
print(json.dumps([n, pkgdoc.__doc__, pkgdoc.mod.__doc__, pkgdoc.mod.C.__doc__, pkgdoc.mod.f.__doc__, pkgdocx.__doc__,
                  drop_docstrings("pkgdoc")]))
'''


def test_drop_docstrings(tmp_path: Path) -> None:
    for rel, text in PKG.items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_text(text)
    out = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n{CASE}"],
                         capture_output=True, text=True, check=True)
    n, pkg, mod, cls, fn, other, again = json.loads(out.stdout)
    assert (pkg, mod, cls) == (None, None, None)
    assert (fn, other) == ("function doc", "other package doc")
    assert n == len("package doc") + len("module doc") + len("class doc")
    assert again == 0
