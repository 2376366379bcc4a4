"""The trace itself: a node per call of a module that runs more than once (oracle: torchvision's BasicBlock
forward and EfficientNet-Lite's MBConvBlock forward rewritten by hand), no cycle, the same edges whether or
not the input requires grad (the flags untouched), and the tracer's block lifecycle (no hook left on an
exception, entered once, a compiled model run eagerly)."""

from __future__ import annotations

import copy
import graphlib
import itertools
import re
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.errors import BlockError, CaptureWarning
from hookscope.exports.model_explorer import node_data
from hookscope.graph.arrange import arrange
from hookscope.graph.nodes import Graph
from hookscope.graph.svg import svg
from hookscope.graph.trace import Tracer, module_graph
from hookscope.report.build import build_report

Edges = set[tuple[str, str, str]]


def acyclic(graph: Graph) -> bool:
    """True when the edges have a topological order (graphlib, an independent check)."""
    order = graphlib.TopologicalSorter()
    for edge in graph.edges:
        order.add(edge.target, edge.source)
    try:
        order.prepare()
    except graphlib.CycleError:
        return False
    return True


def edges_of(graph: Graph) -> Edges:
    return {(e.source, e.target, e.via) for e in graph.edges}


def resnet18_edges() -> Edges:
    """torchvision's ResNet.forward and BasicBlock.forward by hand: conv1, bn1, relu (call 0), conv2, bn2,
    ``out += identity`` (bn2's tensor kept, the shortcut through autograd), relu (call 1)."""
    edges = {("input", "conv1", "tensor"), ("conv1", "bn1", "tensor"), ("bn1", "relu", "tensor")}
    edges.add(("relu", "maxpool", "tensor"))
    last = "maxpool"
    for layer in range(1, 5):
        for i in range(2):
            b = f"layer{layer}.{i}"
            chain = [last, f"{b}.conv1", f"{b}.bn1", f"{b}.relu#0", f"{b}.conv2", f"{b}.bn2", f"{b}.relu#1"]
            edges |= {(s, t, "tensor") for s, t in itertools.pairwise(chain)}
            identity = last
            if layer > 1 and i == 0:  # stride 2: identity = downsample(x)
                edges |= {(last, f"{b}.downsample.0", "tensor"), (f"{b}.downsample.0", f"{b}.downsample.1", "tensor")}
                identity = f"{b}.downsample.1"
            edges.add((identity, f"{b}.relu#1", "autograd"))
            last = f"{b}.relu#1"
    return edges | {(last, "avgpool", "tensor"), ("avgpool", "fc", "autograd"), ("fc", "output", "tensor")}


@pytest.fixture(scope="module")
def resnet() -> tuple[nn.Module, torch.Tensor]:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return torchvision.models.resnet18().eval(), torch.randn(2, 3, 32, 32)


def test_each_basicblock_relu_call_is_its_own_node_with_the_inputs_of_its_forward(resnet: Any) -> None:
    model, x = resnet
    graph = module_graph(model, x)
    assert edges_of(graph) == resnet18_edges() and acyclic(graph)
    relus = graph.calls_of("layer2.0.relu")
    assert [n.name for n in relus] == ["layer2.0.relu#0", "layer2.0.relu#1"]
    assert [(n.module, n.call, n.calls, n.parent) for n in relus] == [("layer2.0.relu", 0, 2, "layer2.0"),
                                                                      ("layer2.0.relu", 1, 2, "layer2.0")]  # fmt: skip
    assert graph.node("relu").call is None and "relu#0" not in {n.name for n in graph.nodes}  # the stem's: once
    with pytest.raises(KeyError, match=re.escape("its nodes are ['layer1.0.relu#0', 'layer1.0.relu#1']")):
        graph.node("layer1.0.relu")
    assert repr(graph) == "<Graph ResNet: 68 modules in 76 calls, 69 edges, by hooks and autograd>"


def test_the_same_edges_whether_or_not_x_or_the_parameters_require_grad(resnet: Any) -> None:
    model, x = resnet
    plain = module_graph(model, x)
    wanting = x.clone().requires_grad_()
    assert module_graph(model, wanting).edges == plain.edges and wanting.requires_grad and wanting.grad is None
    frozen = copy.deepcopy(model).requires_grad_(False)
    assert module_graph(frozen, x).edges == plain.edges
    assert not x.requires_grad and not any(p.requires_grad for p in frozen.parameters())
    assert all(p.requires_grad and p.grad is None for p in model.parameters())


@pytest.fixture(scope="module")
def lite() -> tuple[nn.Module, torch.Tensor]:
    """The demo's network and photo (EfficientNet-Lite0, 224 x 224, scikit-image's chelsea)."""
    data = pytest.importorskip("skimage.data")
    return hookscope.zoo.efficientnet_lite0(), hookscope.zoo.lite_input(data.chelsea())


def test_the_demo_model_traces_the_same_edges_with_or_without_grad_and_has_no_cycle(lite: Any) -> None:
    model, x = lite
    assert not x.requires_grad
    plain, wanting = module_graph(model, x), module_graph(model, x.clone().requires_grad_())
    assert plain.edges == wanting.edges and len(plain.edges) == 144 and acyclic(plain)
    assert ("_conv_stem.static_padding", "_bn0", "autograd") in edges_of(plain)  # padding, then F.conv2d: a join
    into = {t: {s for s, t2, _ in edges_of(plain) if t2 == t} for _, t, _ in edges_of(plain)}
    # MBConvBlock.forward by hand: _expand_conv, _bn0, _swish (call 0), _depthwise_conv, _bn1, _swish (call 1)
    assert into["_swish#0"] == {"_bn0"} and into["_swish#1"] == {"_bn1"}  # the stem's and the head's
    assert into["_blocks.0._swish"] == {"_blocks.0._bn1"}  # expand ratio 1: no expansion, one call
    for i in range(1, 16):
        assert into[f"_blocks.{i}._swish#0"] == {f"_blocks.{i}._bn0"}
        assert into[f"_blocks.{i}._swish#1"] == {f"_blocks.{i}._bn1"}
        assert into[f"_blocks.{i}._depthwise_conv.static_padding"] == {f"_blocks.{i}._swish#0"}


def test_the_demo_reports_graph_is_the_trace_with_or_without_grads(lite: Any) -> None:
    model, x = lite
    drawn = [build_report(model, x, select="_conv_head", grads=grads, cam_methods=()).graph for grads in (False, True)]
    assert drawn[0] is not None and drawn[1] is not None
    assert drawn[0].edges == drawn[1].edges == module_graph(model, x).edges
    assert drawn[1].column == "mean |grad_output|" and acyclic(drawn[1])


def test_a_modules_value_colours_each_of_its_calls_and_a_calls_value_that_call(resnet: Any) -> None:
    model, x = resnet
    graph = module_graph(model, x)
    page = svg(graph.colored({"layer1.0.relu": 1.0, "layer1.1.relu#1": 0.0, "layer1.1.relu": 2.0}), within="layer1.1")
    fills = dict(re.findall(r'data-name="([^"]+)"><title>[^<]*</title><rect [^>]*fill="(#[0-9a-f]{6})"', page))
    assert fills["layer1.1.relu#1"] == "#440154" and fills["layer1.1.relu#0"] == "#fde725"  # its own; the module's
    overview = svg(graph.colored({"layer1.0.relu": 1.0}), links={"layer1.0.relu": "#layer-7"}, within="layer1.0")
    assert overview.count('href="#layer-7"') == 2  # both calls go to the module's card
    assert "call 1 of layer1.0.relu (2 calls in all)" in overview
    assert graph.colored({"layer1.0.relu": 1.0}).value("layer1.0.relu#1") == 1.0


def test_model_explorer_ids_of_each_call(resnet: Any) -> None:
    model, x = resnet
    graph = module_graph(model, x, exported=True)
    both = graph.export_ids["layer1.0.relu"]
    assert len(both) == 2 and (graph.export_ids["layer1.0.relu#0"] + graph.export_ids["layer1.0.relu#1"]) == both
    assert edges_of(graph) == {(s, t, "export") for s, t, _ in resnet18_edges()}
    data = node_data({"layer1.0.relu": 1.0, "layer1.1.relu#1": 2.0}, graph, name="test")["graph"]["results"]
    assert data == {node: {"value": 1.0} for node in both} | {
        node: {"value": 2.0} for node in graph.export_ids["layer1.1.relu#1"]
    }


class Faulty(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if h.shape[0] == 3:
            raise ValueError("inside the traced forward")
        return self.b(h)


def test_the_tracer_is_a_block_no_hook_survives_an_exception_and_it_is_entered_once() -> None:
    model = Faulty()
    with pytest.raises(ValueError, match="inside the traced forward"), Tracer(model):
        model(torch.randn(3, 4))
    assert hookscope.find_hooks(model) == [] and torch.is_grad_enabled()
    with pytest.raises(ValueError, match="inside the traced forward"):
        module_graph(model, torch.randn(3, 4))
    assert hookscope.find_hooks(model) == [] and model.training  # its mode restored too
    tracer = Tracer(model)
    with tracer:
        model(torch.randn(2, 4))
    assert tracer.state == "closed"
    with pytest.raises(BlockError, match=r"this module graph tracer was already used.*Tracer\(model\)"), tracer:
        pass
    assert hookscope.find_hooks(model) == []


def test_a_compiled_model_runs_eagerly_in_the_trace_and_says_so_once() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3), nn.ReLU())
    model, x = torch.compile(net, backend="eager"), torch.randn(5, 4)
    model(x)  # compiled before the trace: hooks added later would not fire in its code
    eager = module_graph(net, x)
    note = "'Sequential' is compiled; inside this module graph trace it runs eagerly"
    with pytest.warns(CaptureWarning, match=note) as caught:
        graph = module_graph(model, x)
    assert edges_of(graph) == edges_of(eager) and [n.name for n in graph.nodes] == [n.name for n in eager.nodes]
    assert len(caught) == 1 and hookscope.find_hooks(model) == []
    said = pytest.warns(CaptureWarning, match="inside this capture it runs eagerly")
    with said as both, hookscope.capture(model, "0") as cap, Tracer(model) as tracer:
        model(x)
    assert len(both) == 1 and cap["0"].calls and edges_of(tracer.graph()) == edges_of(eager)  # said once


class Step(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, act: nn.Module) -> torch.Tensor:
        return act(self.fc(x))


class SharedAct(nn.Module):
    """One Tanh, owned by the model, called inside each of three repeated blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.act = nn.Tanh()
        self.blocks = nn.ModuleList([Step() for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, self.act)
        return x


def test_a_shared_module_called_inside_each_block_folds_into_the_block_it_ran_in() -> None:
    graph = module_graph(SharedAct(), torch.randn(2, 4))
    assert [(n.name, n.parent) for n in graph.calls_of("act")] == [(f"act#{i}", f"blocks.{i}") for i in range(3)]
    drawing = arrange(graph)  # its calls ran inside the blocks: drawn inside them, not as boxes between
    assert [b.name for b in drawing.boxes] == ["input", "blocks.0", "blocks.1", "blocks.2", "output"]
    assert not any(line.back for line in drawing.lines) and acyclic(graph)
    opened = arrange(graph, within="blocks.1")
    assert [b.name for b in opened.boxes] == ["input", "blocks.1.fc", "act#1", "output"]


class _Raises(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("the model's own error")


def test_a_model_s_error_names_the_module_it_escaped_from() -> None:
    """module_graph and build_report (which traces the graph) say where it was raised, as capture does."""
    net = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.ReLU(), _Raises()))
    with pytest.raises(ValueError, match="the model's own error") as graph_error:
        hookscope.module_graph(net, torch.randn(1, 3))
    assert graph_error.value.__notes__ == ["hookscope: raised inside module '1.1' (call 0)"]
    with pytest.raises(ValueError, match="the model's own error") as report_error:
        hookscope.build_report(net, torch.randn(1, 3), select="0")  # the capture does not watch 1.1: the trace does
    assert report_error.value.__notes__ == ["hookscope: raised inside module '1.1' (call 0)"]
    with pytest.raises(ValueError, match="own error") as both:
        hookscope.build_report(net, torch.randn(1, 3), select="1.1")  # capture and trace saw it: one note
    assert both.value.__notes__ == ["hookscope: raised inside module '1.1' (call 0)"]
