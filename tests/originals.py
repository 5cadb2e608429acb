"""The real timer modules the recorder's drop-ins copy, for the tests and benchmarks/bench_record.py.

``mlagents_envs.timers`` is plain Python.  Sample Factory's ``sample_factory/utils/timing.py``
imports ``psutil``, ``sample_factory.algo.utils.misc`` (for ``EPS``; it imports torch) and
``sample_factory.utils.utils`` (for ``log``): those three are stubbed while ``timing.py`` itself is
loaded from the installed package (``pip install --no-deps sample-factory``).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import types


def mlagents_timers() -> types.ModuleType | None:
    """ML-Agents' ``mlagents_envs.timers``, or None where it is not installed."""
    try:
        return importlib.import_module("mlagents_envs.timers")
    except ImportError:
        return None


def samplefactory_timing(module_name: str = "_sf_timing") -> types.ModuleType | None:
    """Sample Factory's ``utils/timing.py`` loaded on its own, or None where it is not installed."""
    spec = importlib.util.find_spec("sample_factory")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = f"{list(spec.submodule_search_locations)[0]}/utils/timing.py"
    stubs = {k: types.ModuleType(k) for k in ("psutil", "sample_factory.algo.utils.misc",
                                                 "sample_factory.utils.utils")}
    stubs["sample_factory.algo.utils.misc"].EPS = 1e-8
    stubs["sample_factory.utils.utils"].log = logging.getLogger("rl")
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        mspec = importlib.util.spec_from_file_location(module_name, path)
        mod = importlib.util.module_from_spec(mspec)
        mspec.loader.exec_module(mod)
        return mod
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
