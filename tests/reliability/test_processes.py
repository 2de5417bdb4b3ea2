"""The child-process helpers themselves: a real CLI run, and a crash at an armed step."""

from __future__ import annotations

from tests.reliability.processes import KILLED, finish, ragbound, start


def test_a_child_runs_the_real_command_and_reports_a_usage_error():
    done = ragbound("decide")
    assert done.returncode == 2 and done.stderr.startswith("error: ")


def test_two_children_run_at_once():
    first, second = start("--help"), start("--help")
    assert [finish(first)[0], finish(second)[0]] == [0, 0]


def test_an_unarmed_step_does_not_kill_and_an_armed_one_is_sigkill(tmp_path):
    assert ragbound("--help", crash_at="no:such-step").returncode == 0
    kb = tmp_path / "kb"
    (tmp_path / "doc.txt").write_text("Bees make honey from nectar.\n", encoding="utf-8")
    killed = ragbound(
        "index",
        tmp_path / "doc.txt",
        "--out",
        kb,
        "--embedder",
        "bm25",
        crash_at="kb.index:chunks-written",
    )
    assert killed.returncode == KILLED
