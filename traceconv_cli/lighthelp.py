"""``traceconv --help`` without the import of a Markdown parser it never uses.

Typer draws help (and usage errors) with ``typer.rich_utils``, which imports, at its top,
``rich.markdown`` (and through it ``markdown_it`` and ``pygments``) for the ``"markdown"`` markup
mode, and ``rich.traceback`` for its own exception hook.  traceconv's help is in ``"rich"`` markup
mode and its ``main`` prints its own tracebacks, so neither is used, yet the two are ~80 ms of the
~0.34 s that ``traceconv --help`` took in a fresh venv (``python -X importtime``: ``rich.markdown``
71 ms, ``rich.traceback`` 12 ms).  Upstream knows (typer PR #1128 made ``rich_utils`` itself lazy;
the review asks the same for ``Markdown``); until typer does it, the command's process does it:

:func:`install` puts a finder on ``sys.meta_path`` that, when ``typer.rich_utils`` is imported,
runs it with placeholder ``rich.markdown`` and ``rich.traceback`` modules in ``sys.modules`` whose
``Markdown`` and ``Traceback`` are :class:`Deferred` classes, then takes the placeholders out again:
only ``rich_utils`` holds them, and anyone importing ``rich.markdown`` later gets the real module.
A placeholder imports the real class the first time it is called or asked for an attribute (a
``Traceback.from_exception``), so typer's markdown mode and its exception hook still work, only
later.  A module already imported is used as it is; if ``rich_utils`` ever asks for a name the
placeholders lack, it is imported again the ordinary way.  The library never installs it: the
command's process only (``traceconv_cli.app.main``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
from typing import Any

TARGET = "typer.rich_utils"
# the modules rich_utils imports only for what traceconv does not use, and the names it takes
DEFERRED = {"rich.markdown": ("Markdown",), "rich.traceback": ("Traceback",)}


class Deferred(type):
    """The metaclass of a placeholder: calling the class or reading an attribute it lacks imports
    the real module and hands over to the real class; ``isinstance`` asks the real class too."""

    def real(cls) -> type:
        return getattr(importlib.import_module(cls._module), cls.__name__)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.real()(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(cls.real(), name)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls.real())


def placeholder(module: str, names: tuple[str, ...]) -> types.ModuleType:
    m = types.ModuleType(module, "a placeholder (traceconv_cli.lighthelp): the real module loads at first use")
    for name in names:
        setattr(m, name, Deferred(name, (), {"_module": module, "__module__": module}))
    return m


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def __getattr__(self, name: str) -> Any:       # get_source, get_code, ...: the real loader's
        return getattr(self.loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        put = {name: placeholder(name, names) for name, names in DEFERRED.items() if name not in sys.modules}
        sys.modules.update(put)
        try:
            self.loader.exec_module(module)
        except ImportError:
            # a typer whose rich_utils takes other names from these modules: the ordinary import
            for name in put:
                sys.modules.pop(name, None)
            put = {}
            self.loader.exec_module(module)
        finally:
            for name, m in put.items():
                if sys.modules.get(name) is m:
                    del sys.modules[name]


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        uninstall()                                 # once: the finder's work is this one import
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


_finder = _Finder()


def install() -> None:
    """Defer the two modules when ``typer.rich_utils`` is imported (if it is not already)."""
    if TARGET not in sys.modules and _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def uninstall() -> None:
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
