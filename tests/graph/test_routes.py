"""Edges routed around boxes: no segment of any edge passes through a box other than its own ends, on
the hand-written U-Net (three skips), an ``nn.Transformer`` seq2seq and a residual ResNet block. The
oracle is the layout's own geometry (each box's rectangle, each edge's points) and a hand check of
the segment test; the straight lines drawn before are shown to cross boxes, so the check has teeth."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hookscope.graph.arrange import BOX_H, BOX_W, Drawing, arrange
from hookscope.graph.routes import crosses
from hookscope.graph.trace import module_graph
from tests import handwritten


def crossings(drawing: Drawing) -> list[tuple[str, str, str]]:
    """(source, target, box) for each box an edge segment passes through, other than the edge's ends."""
    found = []
    for line in drawing.lines:
        for a, b in zip(line.points, line.points[1:], strict=False):
            for box in drawing.boxes:
                rect = (box.x, box.y, box.x + BOX_W, box.y + BOX_H)
                if box.name not in (line.source, line.target) and crosses(a, b, rect):
                    found.append((line.source, line.target, box.name))
    return found


def straight(drawing: Drawing, source: str, target: str) -> list[str]:
    """The boxes the straight line from the source's bottom to the target's top (as drawn before) crosses."""
    s, t = drawing.box(source), drawing.box(target)
    a, b = (s.x + BOX_W / 2, s.y + BOX_H), (t.x + BOX_W / 2, t.y)
    return [x.name for x in drawing.boxes if x.name not in (source, target)
            and crosses(a, b, (x.x, x.y, x.x + BOX_W, x.y + BOX_H))]  # fmt: skip


@pytest.fixture(scope="module")
def unet() -> Drawing:
    return arrange(module_graph(handwritten.unet(), torch.randn(1, 3, 32, 32)))


def test_segments_through_a_box_are_found() -> None:
    box = (0.0, 0.0, 10.0, 10.0)
    assert crosses((5, -5), (5, 15), box) and crosses((-1, -1), (11, 11), box) and crosses((2, 2), (3, 3), box)
    assert not crosses((5, -5), (5, 0), box)  # touching the top edge: an edge ending at the box
    assert not crosses((10, -5), (10, 15), box)  # along its side
    assert not crosses((11, -5), (11, 15), box) and not crosses((-5, 12), (15, 12), box)
    assert not crosses((-5, 4), (-1, 4), box)


def test_the_unet_shows_three_skips_and_no_edge_crosses_a_box(unet: Drawing) -> None:
    skips = [line for line in unet.lines if line.source.startswith("down") and line.target.startswith("dec")]
    assert sorted((line.source, line.target) for line in skips) == [
        ("down1.3", "dec1.0"), ("down2.3", "dec2.0"), ("down3.3", "dec3.0"),
    ]  # fmt: skip
    for line in skips:
        assert len(straight(unet, line.source, line.target)) >= 6  # drawn straight, it ran through the spine
        assert len(line.points) == 6
    lanes = {line.source: line.points[2][0] for line in skips}
    right = max(box.x for box in unet.boxes) + BOX_W
    assert right < lanes["down3.3"] < lanes["down2.3"] < lanes["down1.3"] <= unet.width  # nested, each visible
    assert crossings(unet) == []


def test_a_shared_maxpool_is_a_box_per_call_one_level_each(unet: Drawing) -> None:
    """``pool`` runs three times: three boxes, each between the levels it joins, none beside another box."""
    order = ["down1.3", "pool#0", "down2.0", "down2.3", "pool#1", "down3.0", "down3.3", "pool#2", "bottleneck.0"]
    ys = [unet.box(name).y for name in order]
    assert ys == sorted(ys) and len(set(ys)) == len(ys)
    assert len({box.y for box in unet.boxes}) == len(unet.boxes)  # the encoder is one column: no level parallel


@pytest.mark.parametrize("which", ["transformer", "seq2seq", "resnet_block"])
def test_no_edge_crosses_a_box(which: str) -> None:
    if which == "transformer":
        model: nn.Module = nn.Transformer(d_model=16, nhead=2, num_encoder_layers=2, num_decoder_layers=2,
                                          dim_feedforward=32, batch_first=True).eval()  # fmt: skip
        x: object = (torch.randn(1, 5, 16), torch.randn(1, 4, 16))
    elif which == "seq2seq":
        model, x = handwritten.seq2seq(), (torch.tensor([[1, 2, 3, 4]]), torch.tensor([[5, 6, 7]]))
    else:
        torchvision = pytest.importorskip("torchvision")
        model, x = torchvision.models.resnet18(num_classes=4).eval(), torch.randn(1, 3, 32, 32)
    graph = module_graph(model, x)
    drawings = [arrange(graph), *(arrange(graph, within=block) for block in graph.blocks[:2])]
    for drawing in drawings:
        assert crossings(drawing) == []
        assert all(0 <= x <= drawing.width and 0 <= y <= drawing.height for line in drawing.lines
                   for x, y in line.points)  # fmt: skip
    assert any(len(line.points) > 2 for drawing in drawings for line in drawing.lines)  # some edges were routed
