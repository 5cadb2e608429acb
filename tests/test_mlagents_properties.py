"""Property tests: for any valid ML-Agents timer tree, the synthesized timeline keeps every node,
nests each child inside its parent on the parent's track (unless it starts a parallel subtree),
and gives each slice exactly its total as duration -- in the model and in both outputs."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import traceconv
from traceconv.model.layout import nest

from timeline import assert_same_timeline, from_model, read_chrome_json, read_perfetto

NAMES = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)


@st.composite
def timer_node(draw, budget_us: int, parallel: bool, depth: int):
    """A node whose children fit its total (the producer's invariant); parallel subtrees may exceed it."""
    total = draw(st.integers(0, budget_us))
    node: dict = {"total": total / 1e6, "count": draw(st.integers(1, 10_000))}
    if parallel:
        node["is_parallel"] = True
    k = draw(st.integers(0, 3)) if depth < 4 else 0
    names = draw(st.lists(NAMES, min_size=k, max_size=k, unique=True))
    children = {}
    left = total
    for name in names:
        starts_parallel = not parallel and draw(st.booleans()) and draw(st.booleans())
        if starts_parallel:
            child = draw(timer_node(10**7, True, depth + 1))   # merged work: may exceed the parent
        else:
            child = draw(timer_node(left, parallel, depth + 1))
            left -= round(child["total"] * 1e6)
        children[name] = child
    node["self"] = left / 1e6
    if children:
        node["children"] = children
    elif draw(st.booleans()):
        node["children"] = None          # the C# writer's leaves
    return node


def walk(node: dict, name: str, parent_parallel: bool = False):
    yield name, node, bool(node.get("is_parallel")) and not parent_parallel
    for cname, child in (node.get("children") or {}).items():
        yield from walk(child, cname, bool(node.get("is_parallel")))


def load(tree: dict, tmp: Path):
    f = tmp / "timers.json"
    f.write_text(json.dumps({"name": "root", **tree}), encoding="utf-8")
    trace = traceconv.load(f)
    nest(trace)
    return trace


def check_layout(tree: dict, trace) -> None:
    expected = list(walk(tree, "root"))
    s = trace.slices
    assert len(s) == len(expected), "every node appears exactly once"
    # slices are in depth-first file order; rebuild parents with a stack of (index, depth in tree)
    parents: list[int | None] = []
    stack: list[tuple[int, dict]] = []
    for i, (name, node, starts_parallel) in enumerate(expected):
        assert trace.strings[s.name[i]] == name
        assert s.dur[i] == round(node["total"] * 1e6) * 1000, "duration equals total"
        while stack and not any(node is c for c in (stack[-1][1].get("children") or {}).values()):
            stack.pop()
        parents.append(stack[-1][0] if stack else None)
        stack.append((i, node))
    for i, (name, node, starts_parallel) in enumerate(expected):
        p = parents[i]
        if p is None:
            continue
        if starts_parallel:
            assert s.track[i] != s.track[p] and s.ts[i] == s.ts[p] and s.depth[i] == 0
        else:
            assert s.track[i] == s.track[p], "child on its parent's track"
            assert s.ts[p] <= s.ts[i] and s.ts[i] + s.dur[i] <= s.ts[p] + s.dur[p], "child inside parent"
            if s.dur[i] > 0:
                assert s.depth[i] == s.depth[p] + 1
            # Zero-length slices follow the viewers' nesting rule (ties sorted longer first; a slice is
            # closed before one that starts at its end): one at its parent's end is drawn beside the
            # parent, one at the start of a longer sibling inside that sibling.  Only time containment
            # (checked above) is promised for them.
    assert not trace.diagnostics.lossy(), trace.diagnostics.summary()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timer_node(10**9, False, 0))
def test_any_valid_tree_nests_with_durations_equal_to_totals(tree):
    with tempfile.TemporaryDirectory() as d:
        check_layout(tree, load(tree, Path(d)))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(timer_node(10**9, False, 0))
def test_both_outputs_describe_the_same_timeline(tree):
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        trace = load(tree, tmp)
        traceconv.save(trace, tmp / "o.json.gz")
        traceconv.save(trace, tmp / "o.pftrace")
        p = read_perfetto(tmp / "o.pftrace")
        assert_same_timeline(from_model(trace), p)
        assert_same_timeline(read_chrome_json(tmp / "o.json.gz"), p)
