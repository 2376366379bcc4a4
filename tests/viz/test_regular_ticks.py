"""The training heatmap's step ticks fall on one round stride (they were 0, 60, 120, 170 for steps 0..170)."""

from __future__ import annotations

from hookscope.viz.curves import regular_ticks


def test_ticks_are_multiples_of_one_round_stride() -> None:
    steps = list(range(0, 171, 10))
    assert [steps[i] for i in regular_ticks(steps)] == [0, 50, 100, 150]
    steps = list(range(0, 1001, 50))
    assert [steps[i] for i in regular_ticks(steps)] == [0, 200, 400, 600, 800, 1000]
    assert regular_ticks([0, 7]) == [0, 1] and regular_ticks([5]) == [0]
