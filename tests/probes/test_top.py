"""Top examples per unit: the streamed top k equals a brute-force sort, resumes, compares two runs, stays small."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope
from hookscope.errors import OptionError, StoreError
from hookscope.probes.top import TopExamples
from hookscope.reducers import top_examples

ROOT = Path(__file__).resolve().parents[2]


def conv_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 6, 3), nn.ReLU(), nn.Conv2d(6, 5, 3)).eval()


def batches(sizes: tuple[int, ...] = (5, 5, 3), side: int = 9) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(n, 3, side, side, generator=g) for n in sizes]


def brute_force(model: nn.Module, loader: list[torch.Tensor], site: str, k: int) -> list[list[tuple]]:
    """Per unit, its k largest (value, batch, row, position) over every activation, by a full sort."""
    found: list[list[tuple]] = []
    with hookscope.capture(model, site) as cap, torch.no_grad():
        for x in loader:
            model(x)
    maps = [call.output for call in cap[site].calls]
    for unit in range(maps[0].shape[1]):
        every = [
            (float(v), b, r, p)
            for b, m in enumerate(maps)
            for r in range(m.shape[0])
            for p, v in enumerate(m[r, unit].reshape(-1).tolist())
        ]
        found.append(sorted(every, key=lambda e: -e[0])[:k])
    return found


def test_the_streamed_top_k_is_the_brute_force_top_k(tmp_path: Path) -> None:
    model, loader = conv_net(), batches()
    hookscope.extract(model, loader, select="2", out=tmp_path / "top", reduce=top_examples(top_k=7), progress=False)
    top = TopExamples.read(hookscope.load(tmp_path / "top"), "2")
    expected = brute_force(model, loader, "2", 7)
    assert top.grid == (5, 5) and top.units == 5 and top.k == 7 and top.peaks.shape == (5, 13)
    for unit in range(5):
        got = list(zip(top.values[unit].tolist(), top.batches[unit].tolist(), top.rows[unit].tolist(),
                       top.positions[unit].tolist(), strict=True))  # fmt: skip
        assert [g[1:] for g in got] == [e[1:] for e in expected[unit]]
        assert [g[0] for g in got] == pytest.approx([e[0] for e in expected[unit]], abs=1e-6)
    batch, row, cell = top.where(0, 0)
    assert (batch, row, cell[0] * 5 + cell[1]) == expected[0][0][1:]


def test_tokens_rank_positions_and_peaks_count_each_input(tmp_path: Path) -> None:
    torch.manual_seed(0)
    layer = nn.Linear(4, 3)
    g = torch.Generator().manual_seed(2)
    loader = [torch.randn(2, 6, 4, generator=g), torch.randn(3, 6, 4, generator=g)]
    hookscope.extract(layer, loader, out=tmp_path / "tok", reduce=top_examples(top_k=3), progress=False)
    top = TopExamples.read(hookscope.load(tmp_path / "tok"), "")
    with torch.no_grad():
        acts = torch.cat([layer(x) for x in loader])  # (5, T, D): rows in store order
    assert top.grid == (6,)
    torch.testing.assert_close(top.peaks, acts.amax(dim=1).T.double())
    flat = acts.permute(2, 0, 1).reshape(3, -1)  # (D, rows * T)
    torch.testing.assert_close(top.values, flat.topk(3, dim=1).values.double())


def test_a_resumed_store_merges_to_the_same_top_k(tmp_path: Path) -> None:
    model, loader = conv_net(), batches((4, 4, 4, 4))

    def failing():
        yield from loader[:2]
        raise RuntimeError("the data went away")

    with pytest.raises(RuntimeError, match="the data went away"):
        hookscope.extract(
            model, failing(), select="2", out=tmp_path / "r", reduce=top_examples(top_k=5), progress=False
        )
    assert hookscope.load(tmp_path / "r").batches == [0, 1]
    hookscope.extract(model, loader, select="2", out=tmp_path / "r", reduce=top_examples(top_k=5), progress=False,
                      resume=True)  # fmt: skip
    hookscope.extract(model, loader, select="2", out=tmp_path / "w", reduce=top_examples(top_k=5), progress=False)
    resumed, whole = (TopExamples.read(hookscope.load(tmp_path / name), "2") for name in ("r", "w"))
    assert torch.equal(resumed.values, whole.values) and torch.equal(resumed.rows, whole.rows)
    assert torch.equal(resumed.batches, whole.batches) and torch.equal(resumed.peaks, whole.peaks)


def test_the_difference_of_two_runs_ranks_the_inputs_whose_peak_grew(tmp_path: Path) -> None:
    a, loader = conv_net(), batches()
    b = conv_net()
    with torch.no_grad():
        b[2].weight[3] *= 2.0  # unit 3 changed between the two checkpoints
    for model, name in ((a, "a"), (b, "b")):
        hookscope.extract(model, loader, select="2", out=tmp_path / name, reduce=top_examples(top_k=4), progress=False)
    top_a, top_b = (TopExamples.read(hookscope.load(tmp_path / n), "2") for n in ("a", "b"))
    moved = top_b.difference(top_a)
    grown = top_b.peaks - top_a.peaks
    assert moved.label == "difference" and moved.values.shape == (5, 4)
    torch.testing.assert_close(moved.values, grown.gather(1, grown.abs().topk(4, dim=1).indices))
    assert moved.ranked()[0] == 3 and moved.input_index(3, 0) == int(grown[3].abs().argmax())
    assert float(moved.values[[0, 1, 2, 4]].abs().max()) < 1e-6 < float(moved.values[3].abs().max())


def test_memory_stays_flat_and_the_store_small(tmp_path: Path) -> None:
    job = subprocess.run([sys.executable, "-m", "tests.jobs", "top", str(tmp_path / "m")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert job.returncode == 0, job.stderr
    measured = json.loads(job.stdout)
    activations = 40 * measured["batch"]  # 40 batches of (4, 32, 128, 128) float32: 320 MiB
    assert measured["written"] < activations / 100  # (32 units, 3 * 9 + 4 + 4 rows) float64 a batch
    grew = measured["peak"] - measured["base"]
    assert grew <= 2 * measured["batch"] + 48 * 2**20, f"resident memory grew by {grew / 2**20:.0f} MiB"


def test_wrong_uses_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="top_examples needs a positive int, got 0"):
        top_examples(top_k=0)
    hookscope.extract(conv_net(), batches(), select="2", out=tmp_path / "plain", progress=False)
    with pytest.raises(StoreError, match=r"not extracted with reduce=top_examples\(k\)"):
        TopExamples.read(hookscope.load(tmp_path / "plain"), "2")


def test_top_examples_show_as_table_plot_and_html(tmp_path: Path) -> None:
    model, loader = conv_net(), batches()
    hookscope.extract(model, loader, select="2", out=tmp_path / "t", reduce=top_examples(top_k=3), progress=False)
    top = hookscope.TopExamples.read(hookscope.load(tmp_path / "t"), "2")
    best = top.ranked()[0]
    first = top.table().splitlines()[1].split()
    assert first[:2] == [str(best), f"{float(top.values[best, 0]):.4g}"]
    counts, edges = top.histogram(best)
    assert sum(counts) == 13 and edges[0] == float(top.peaks[best].min()) and top.plot().size[0] > 100
    assert "Top examples of 2" in (top._repr_html_() or "") and "unit 4" in str(top._repr_html_())
    page = hookscope.build_report(model, loader[0][:1], select="0", sections=[top])
    assert [s.id for s in page.sections] == ["top-2"] and "Top examples: 2" in hookscope.render_html(page)
