"""tkir's version, in one place: `tkir.__version__`, `tkc --version`, the disk cache's key
(tkir.backend.cache.tool_versions) and the package metadata (pyproject.toml reads it) all take it from here.

A core module of its own, with no imports, so that the backend can read the version without importing
the `tkir` package's face (tkir/__init__.py, tkir/api.py), which imports the backend in turn.
"""

# 0.2: the deprecated spellings (--group-m, --pass-option, compile(group_m=, pass_options=), tkir.cuda) removed
__version__ = "0.2.0"
