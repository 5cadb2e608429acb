"""The README stays true to the code: its commands, its format table, its CI command."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from traceconv import formats

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def test_first_lines_say_what_it_is_and_what_it_is_not():
    head = README[:700]
    assert "Perfetto" in head and "chrome://tracing" in head
    assert "not* Perfetto's own `traceconv` binary" in head


def test_ci_runs_exactly_the_readme_test_command():
    blocks = re.findall(r"```\n(.*?)\n```", README, re.S)
    test_cmd = [b for b in blocks if "pytest" in b][0].strip()
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci.splitlines()


def test_the_bundled_example_exists():
    blocks = re.findall(r"```\n(.*?)\n```", README, re.S)
    main_cmd = blocks[0].strip()
    example = re.search(r"convert (\S+)", main_cmd).group(1)
    assert (ROOT / example).is_file()


def test_format_table_matches_the_registry():
    table = {m.group(1): (m.group(2) == "yes", m.group(3))
             for m in re.finditer(r"^\| `([a-z-]+)` \|\s*(yes)?\s*\|\s*(yes|merge)?\s*\|", README, re.M)}
    for f in formats.FORMATS:
        assert f.name in table, f"README's format table lacks {f.name}"
        reads, writes = table[f.name]
        assert writes == (("merge" if f.archive else "yes") if f.writer else None), f.name
        assert reads == bool(f.reader), f.name


def test_every_dependency_is_explained():
    import tomllib
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    table = README[README.index("| package | why |"):]
    for dep in deps:
        name = re.split(r"[<>=!~ \[]", dep)[0]
        assert re.search(rf"^\| [^|]*\b{re.escape(name)}\b", table, re.M), f"README does not say why {name}"


@pytest.mark.parametrize("script, least", [("bench", 2), ("opening", 1)])
def test_the_bench_commands_are_the_bench_s_own(script, least):
    spec = importlib.util.spec_from_file_location(script, ROOT / "benchmarks" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lines = re.findall(rf"^python benchmarks/{script}\.py\b([^#\n]*)", README, re.M)
    assert len(lines) >= least
    for line in lines:
        try:
            module.parser().parse_args(shlex.split(line))
        except SystemExit:
            pytest.fail(f"README runs benchmarks/{script}.py with options it does not take: {line.strip()}")
