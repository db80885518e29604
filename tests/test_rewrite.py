"""The cell rewriter on its own: no IPython, no torch."""

from __future__ import annotations

import ast
import textwrap
from typing import Any

import pytest

from tests.conftest import FakeEvent
from xprof_magic._cell import labels as _labels
from xprof_magic._cell import step_tracker as _steps
from xprof_magic._cell.markers import find_markers, label_for
from xprof_magic._cell.rewrite import rewrite


def run(
    source: str, tracker: _steps.StepTracker | None = None, **options: Any
) -> tuple[dict[str, Any], _labels.Recorder, Any]:
    source = textwrap.dedent(source)
    tree = ast.parse(source)
    cell = rewrite(tree, source.splitlines(), markers=find_markers(source), **options)
    namespace: dict[str, Any] = {}
    FakeEvent.log = []
    recorder = _labels.Recorder(FakeEvent)
    with _labels.recording(recorder, tracker):
        exec(compile(cell.tree, "<cell>", "exec"), namespace)
    namespace.pop("__builtins__", None)
    return namespace, recorder, cell


def paths(recorder: _labels.Recorder) -> dict[tuple[str, ...], int]:
    return {stat.path: stat.count for stat in recorder.labels()}


def test_each_top_level_statement_is_a_block_named_by_its_first_line() -> None:
    ns, rec, cell = run(
        """
        a = 1
        def f(x):
            return x + 1
        b = f(a)
        """
    )
    assert ns["b"] == 2
    assert paths(rec) == {("a = 1",): 1, ("def f(x)",): 1, ("b = f(a)",): 1}
    assert cell.labels == ("a = 1", "def f(x)", "b = f(a)")


def test_markers_group_statements_inside_a_loop_and_add_up() -> None:
    ns, rec, _ = run(
        """
        total = 0
        for i in range(3):
            # xprof: forward
            total += i
            total += 1
            # xprof: backward
            total *= 2
        """
    )
    assert ns["total"] == 22
    assert paths(rec) == {
        ("total = 0",): 1,
        ("for i in range(3)",): 1,
        ("for i in range(3)", "forward"): 3,
        ("for i in range(3)", "backward"): 3,
    }


def test_top_level_markers_group_until_the_next_marker() -> None:
    _, rec, _ = run(
        """
        x = 1
        # xprof: setup
        y = 2
        z = 3
        # xprof: report
        w = x + y + z
        """
    )
    assert paths(rec) == {("x = 1",): 1, ("setup",): 1, ("report",): 1}


def test_markers_in_else_and_except_bodies_stay_there() -> None:
    ns, rec, _ = run(
        """
        out = []
        if out:
            # xprof: yes
            out.append(1)
        else:
            # xprof: no
            out.append(2)
        try:
            # xprof: risky
            1 / 0
        except ZeroDivisionError:
            # xprof: handled
            out.append(3)
        """
    )
    assert ns["out"] == [2, 3]
    assert ("if out", "no") in paths(rec)
    assert ("if out", "yes") not in paths(rec)
    assert ("try", "handled") in paths(rec)
    assert ("try", "risky") in paths(rec)


def test_markers_inside_functions_label_later_calls_and_leave_no_names() -> None:
    ns, rec, _ = run(
        """
        def step(x):
            # xprof: inner
            return x * 2
        y = step(2)
        """
    )
    assert set(ns) == {"step", "y"}
    assert paths(rec)[("y = step(2)", "inner")] == 1
    assert ns["step"](5) == 10  # outside any capture the labels do nothing


def test_final_expression_value_is_kept_and_plain_statements_are_not() -> None:
    _, rec, cell = run("x = 2\nx * 21\n")
    assert cell.keeps_value and rec.has_value and rec.value == 42
    _, rec, cell = run("x = 2\n")
    assert not cell.keeps_value and not rec.has_value


def test_steps_mark_each_iteration_of_top_level_loops() -> None:
    tracker = _steps.StepTracker(FakeEvent)
    _, rec, cell = run(
        """
        for i in range(4):
            # xprof: work
            pass
        """,
        tracker,
        steps=True,
    )
    assert cell.step_loops == 1
    assert len(tracker.durations()) == 4
    step_events = [
        stats for kind, name, stats in FakeEvent.log if kind == "open" and name == "step"
    ]
    assert [s["step_num"] for s in step_events] == [0, 1, 2, 3]
    assert all(s["_r"] == 1 for s in step_events)
    # the marker block is inside the step, and steps do not add a level to label paths
    assert paths(rec)[("for i in range(4)", "work")] == 4


def test_no_labels_keeps_the_code_as_is() -> None:
    ns, rec, cell = run("a = 1\nb = a + 1\n", labels=False)
    assert ns == {"a": 1, "b": 2}
    assert rec.labels() == [] and cell.labels == ()


def test_future_import_stays_first() -> None:
    ns, rec, _ = run("from __future__ import annotations\nx = 1\n")
    assert ns["x"] == 1
    assert list(paths(rec)) == [("x = 1",)]


def test_marker_text_inside_strings_is_not_a_marker() -> None:
    source = 's = """\n# xprof: nope\n"""\n# xprof: yes\nx = 1\n'
    assert [m.name for m in find_markers(source)] == ["yes"]


def test_trailing_comment_is_not_a_marker() -> None:
    assert find_markers("x = 1  # xprof: nope\n") == []


def test_exception_line_numbers_point_at_the_user_line() -> None:
    source = "a = 1\nfor i in range(2):\n    # xprof: boom\n    b = 1 / 0\n"
    tree = ast.parse(source)
    cell = rewrite(tree, source.splitlines(), markers=find_markers(source))
    with pytest.raises(ZeroDivisionError) as info:
        exec(compile(cell.tree, "<cell>", "exec"), {})
    assert info.traceback[-1].lineno + 1 == 4


def test_label_names_are_trimmed_to_60_characters() -> None:
    name = label_for("x = " + "a" * 100)
    assert len(name) == 60 and name.endswith("…")
    assert label_for("   y  =   1  ") == "y = 1"


def test_labels_outside_a_capture_are_no_ops() -> None:
    with _labels.label("x"), _labels.step():
        pass
    assert _labels.keep(3) == 3


def test_docstrings_and_future_imports_stay_first() -> None:
    ns, _, _ = run(
        '''
        """cell doc"""
        from __future__ import annotations
        def f():
            # xprof: inside
            """doc"""
            return 1
        class C:
            """class doc"""
            # xprof: body
            x = 1
        '''
    )
    assert ns["f"].__doc__ == "doc" and ns["f"]() == 1
    assert ns["C"].__doc__ == "class doc" and ns["C"].x == 1


def test_a_trailing_marker_in_an_if_body_does_not_label_the_else_branch() -> None:
    _, rec, _ = run(
        """
        a = 0
        if a:
            x = 1
            # xprof: tail
        else:
            y = 2
        """
    )
    assert not any("tail" in path for path in paths(rec))


def test_label_names_drop_trailing_comments_but_keep_hashes_in_strings() -> None:
    assert label_for("for x in y:  # the loop") == "for x in y"
    assert label_for("print('#1')  # note") == "print('#1')"


def test_a_generator_finished_on_another_thread_does_not_break_labels() -> None:
    ns, rec, _ = run(
        """
        import threading
        def gen():
            # xprof: a
            yield 1
            yield 2
        g = gen()
        first = next(g)
        rest = []
        t = threading.Thread(target=lambda: rest.extend(g))
        t.start()
        t.join()
        x = 1
        """
    )
    assert ns["first"] == 1 and ns["rest"] == [2] and ns["x"] == 1
    assert ("x = 1",) in paths(rec) and ("t.join()",) in paths(rec)
