"""The cli-start benchmark part: its docs/benchmarks.md section from saved results."""

from __future__ import annotations

from benchmarks import cli_start
from benchmarks.run import SECTIONS


def test_the_section_renders_every_command_with_its_ratio_and_the_help_target() -> None:
    medians = dict(zip(cli_start.LABELS, (0.03, 0.1, 0.3, 1.0, 8.0, 8.0), strict=True))
    part = {
        "runs": 10,
        "median_s": medians,
        "ratio_to_baseline": {name: s / 8.0 for name, s in medians.items()},
        "load_average": 2.0,
    }
    title, render = SECTIONS["cli-start"]
    text = "\n".join(render({"cli_start": part}))
    assert "| `ragbound --help` | 0.300 | 0.037 | < 0.5 s |" in text
    assert "one query embedded | 8.000 | 1.000 |  |" in text
    assert "median of 10 interleaved rounds" in text and "starts fast" in title
    assert render({}) == []
