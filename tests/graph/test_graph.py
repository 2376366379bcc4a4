"""The module graph: nodes are the modules that ran, edges a hand trace of tensor identity (and torch.export's
data flow), colours the numbers, saved bytes against the hooks' totals and a checkpointed copy, the Model Explorer
node data against its own builder, the report's graph section in Chromium."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import hookscope
from hookscope.graph.arrange import BOX_H, BOX_W, arrange
from hookscope.graph.nodes import Graph
from hookscope.graph.overlay import VIRIDIS, color, overlay_of
from hookscope.graph.svg import svg
from hookscope.graph.trace import Tracer, module_graph
from hookscope.report.build import build_report
from hookscope.report.html import render_html, write_report
from hookscope.store.history import COLUMNS, History
from tests.browser import open_page

ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts"


class DictOut(nn.Module):
    """Two heads over a shared trunk with a residual add, returning a dict."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.skip = nn.Linear(4, 8)
        self.mean = nn.Linear(8, 2)
        self.scale = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.trunk(x) + self.skip(x)  # a join through functional code
        return {"mean": self.mean(h), "scale": self.scale(h).exp()}


def ran(model: nn.Module, *args: Any, **kwargs: Any) -> set[str]:
    """The oracle: names of the modules whose forward ran, by plain forward hooks."""
    names: set[str] = set()
    handles = [m.register_forward_hook(lambda *_, n=n: names.add(n)) for n, m in model.named_modules()]
    with torch.no_grad():
        model(*args, **kwargs)
    for handle in handles:
        handle.remove()
    return names


@pytest.fixture(scope="module")
def resnet() -> tuple[nn.Module, torch.Tensor, Graph]:
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model, x = torchvision.models.resnet18().eval(), torch.randn(2, 3, 32, 32)
    return model, x, module_graph(model, x, exported=True)


def test_a_dict_output_model_has_the_edges_of_a_hand_trace() -> None:
    torch.manual_seed(0)
    model, x = DictOut(), torch.randn(3, 4)
    graph = module_graph(model, x)
    assert {n.module for n in graph.nodes} == ran(model, x)
    edges = {(e.source, e.target, e.via) for e in graph.edges}
    assert edges == {
        ("input", "trunk.0", "tensor"), ("trunk.0", "trunk.1", "tensor"), ("input", "skip", "tensor"),
        ("trunk.1", "mean", "autograd"), ("skip", "mean", "autograd"),  # h = trunk + skip: a join
        ("trunk.1", "scale", "autograd"), ("skip", "scale", "autograd"),
        ("mean", "output", "tensor"), ("scale", "output", "autograd"),  # .exp() after the module
    }  # fmt: skip
    assert graph.node("trunk").leaf is False and graph.node("trunk.0").parent == "trunk"
    frozen = copy.deepcopy(model).requires_grad_(False)  # nothing requires grad: the trace's copy of x does
    assert {(e.source, e.target, e.via) for e in module_graph(frozen, x).edges} == edges
    assert not x.requires_grad and not any(p.requires_grad for p in frozen.parameters())  # flags as they were
    with torch.inference_mode():  # nothing is recorded: identity edges only, and said
        plain = module_graph(model, x)
    assert {(e.source, e.target) for e in plain.edges} == {(s, t) for s, t, via in edges if via == "tensor"}
    assert plain.built == "hooks" and "identity only" in plain.note


def test_resnet_nodes_are_the_modules_that_ran_and_hooks_agree_with_torch_export(resnet: Any) -> None:
    model, x, graph = resnet
    assert {n.module for n in graph.nodes} == ran(model, x)
    assert graph.built == "torch.export"
    hooks = module_graph(model, x)  # the same edges from the run as from the program
    assert {(e.source, e.target) for e in hooks.edges} == {(e.source, e.target) for e in graph.edges}
    by_hooks = {(e.source, e.target): e.via for e in hooks.edges}
    assert by_hooks[("maxpool", "layer1.0.relu#1")] == "autograd"  # the residual join of the first block
    assert by_hooks[("layer2.0.downsample.1", "layer2.0.relu#1")] == "autograd"
    assert by_hooks[("layer1.0.bn2", "layer1.0.relu#1")] == "tensor"  # out += identity keeps bn2's tensor
    assert graph.blocks == tuple(f"layer{i}.{j}" for i in range(1, 5) for j in range(2))


def test_saved_bytes_match_the_hooks_totals_and_an_independent_count(resnet: Any) -> None:
    model, x, _ = resnet
    held = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    sizes: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in held:
            sizes[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x)
    with Tracer(model) as tracer:
        model(x)
    graph = tracer.graph()
    assert sum(n.saved for n in graph.nodes) == tracer.saved == sum(sizes.values())
    maps = x.shape[0] * 64 * (x.shape[2] // 4) * (x.shape[3] // 4) * 4  # (B, 64, H/4, W/4) float32, by hand
    assert graph.node("layer1.0.conv1").saved == maps  # its input: max pooling keeps its own input, not its output
    assert graph.node("layer1.0.bn1").saved == maps  # BatchNorm keeps its input


@pytest.mark.parametrize("block", ["layer1.0", "layer2.0", "layer4.1"])
def test_checkpointing_a_block_frees_what_the_graph_says(resnet: Any, block: str) -> None:
    model, x, graph = resnet
    copied = copy.deepcopy(model)
    module = copied.get_submodule(block)
    forward = module.forward
    module.forward = lambda t: checkpoint(forward, t, use_reentrant=True)  # type: ignore[method-assign]
    checkpointed = module_graph(copied, x)
    total = sum(n.saved for n in graph.nodes) - sum(n.saved for n in checkpointed.nodes)
    assert total == graph.node(block).checkpoint > 0
    kept = checkpointed.saved_under(block)  # the checkpoint saves only its input (when nothing saved it before)
    assert kept in (0, graph.node(block).inputs)


def test_colours_are_the_numbers(resnet: Any) -> None:
    _, _, graph = resnet
    values = {"conv1": 0.0, "bn1": 5.0, "relu": 10.0, "fc": float("nan")}
    page = svg(graph.colored(values, column="test"))
    fills = dict(re.findall(r'data-name="([^"]+)"><title>[^<]*</title><rect [^>]*fill="(#[0-9a-f]{6})"', page))
    assert fills["conv1"] == VIRIDIS[0] and fills["relu"] == VIRIDIS[-1]
    assert fills["bn1"] == "#269089"  # by hand: halfway between stops 2 (#2a788e) and 3 (#22a884)
    assert fills["fc"] == "#d62728" and fills["maxpool"] == "#ffffff"  # non-finite red, no value white
    assert "test: 5" in page and color(2.5, 0, 10) == color(0.25, 0, 1)


def test_overlays_from_hookscope_results(resnet: Any) -> None:
    model, x, _ = resnet
    with hookscope.capture(model, ["conv1", "fc"]) as cap, torch.no_grad():
        model(x)
    values, column = overlay_of(cap, column="std")
    assert values["conv1"] == pytest.approx(cap["conv1"].output.std(unbiased=False).item(), rel=1e-5)
    assert column == "std of the output"
    error = hookscope.errors.NonFiniteError("x", module="layer2.0.conv1", value="nan")
    assert overlay_of(error)[0] == {"layer2.0.conv1": 1.0}


def test_blocks_fold_and_open_and_boxes_never_overlap(resnet: Any) -> None:
    _, _, graph = resnet
    overview = arrange(graph)
    assert {b.name for b in overview.boxes if b.folded} == set(graph.blocks)
    opened = arrange(graph, within="layer2.0")
    assert {b.name for b in opened.boxes} - {"input", "output"} == {
        n.name for n in graph.leaves() if n.name.startswith("layer2.0.")
    }
    big = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.LayerNorm(8)) for _ in range(100)])
    drawing = arrange(module_graph(big, torch.randn(2, 8)))  # 401 modules, repeated blocks folded
    assert len(drawing.boxes) <= 102
    for drawn in (overview, opened, drawing):
        spots = {(round(b.x), round(b.y)) for b in drawn.boxes}
        assert len(spots) == len(drawn.boxes)
        rows: dict[float, list[float]] = {}
        for b in drawn.boxes:
            rows.setdefault(b.y, []).append(b.x)
        assert all(
            min(b - a for a, b in zip(sorted(xs), sorted(xs)[1:], strict=False)) >= BOX_W
            for xs in rows.values()
            if len(xs) > 1
        )


def test_efficientnet_lite0_graph_folds_its_16_blocks() -> None:
    from hookscope import zoo

    model, x = zoo.efficientnet_lite0(), torch.randn(1, 3, 96, 96)
    graph = module_graph(model, x)
    assert {n.module for n in graph.nodes} == ran(model, x)
    assert len(graph.blocks) == 16 and len(arrange(graph).boxes) < 30
    joins = {(e.source, e.target) for e in graph.edges if e.via == "autograd"}
    assert any(t.startswith("_blocks.2.") for _, t in joins) or any(s.startswith("_blocks.1.") for s, _ in joins)


def test_minilm_graph_without_torch_export(minilm: Any, minilm_tokenizer: Any) -> None:
    batch = dict(minilm_tokenizer(["the graph of a transformer"], return_tensors="pt"))
    graph = module_graph(minilm, batch)
    assert {n.module for n in graph.nodes} == ran(minilm, **batch)
    edges = {(e.source, e.target): e.via for e in graph.edges}
    assert edges[("embeddings.dropout", "encoder.layer.0.attention.self.query")] == "tensor"
    assert edges[("embeddings.dropout", "encoder.layer.0.attention.output.LayerNorm")] == "autograd"  # residual
    assert graph.blocks[:2] == ("encoder.layer.0", "encoder.layer.1")


def test_model_explorer_node_data_matches_its_builder_and_adapter(resnet: Any, tmp_path: Path) -> None:
    builder = pytest.importorskip("model_explorer.node_data_builder")
    adapter = pytest.importorskip("model_explorer.pytorch_exported_program_adapter_impl")
    model, x, graph = resnet
    sites = [n.name for n in graph.leaves() if n.type in ("Conv2d", "BatchNorm2d", "Linear")]
    assert len(sites) == 41
    values = {name: float(i) for i, name in enumerate(sites)}
    path = hookscope.export(graph.colored(values, column="index"), tmp_path / "nd.json", format="model-explorer")
    ours = json.loads(path.read_text())
    program = torch.export.export(model, (x,))
    converted = adapter.PytorchExportedProgramAdapterImpl(program, {"const_element_count_limit": 16}).convert()
    node_ids = {node.id for node in converted["graphs"][0].nodes}
    results = {nid: builder.NodeDataResult(value=v) for s, v in values.items() for nid in graph.export_ids[s]}
    assert set(results) <= node_ids and len(results) >= 41
    stops = [builder.GradientItem(stop=i / 5, bgColor=c) for i, c in enumerate(VIRIDIS)]
    theirs = builder.ModelNodeData(
        graphsData={"graph": builder.GraphNodeData(results=results, name="index", gradient=stops)}
    )
    read = ours["graph"]  # our file read back through the builder's own classes (an unknown field raises)
    back = builder.GraphNodeData(
        results={k: builder.NodeDataResult(**v) for k, v in read.pop("results").items()},
        gradient=[builder.GradientItem(**g) for g in read.pop("gradient")],
        **read,
    )
    assert builder.ModelNodeData(graphsData={"graph": back}).to_json_string() == theirs.to_json_string()


def test_model_explorer_one_file_per_logged_step(resnet: Any, tmp_path: Path) -> None:
    _, _, graph = resnet
    rows = torch.zeros(2, len(COLUMNS), dtype=torch.float64)
    rows[:, COLUMNS.index("step")] = torch.tensor([10.0, 20.0])
    rows[:, COLUMNS.index("grad_norm")] = torch.tensor([1.5, 2.5])
    histories = {"conv1": History("conv1", "Conv2d", rows)}
    folder = hookscope.export(histories, tmp_path / "steps", format="model-explorer", graph=graph)
    files = sorted(p.name for p in folder.iterdir())
    assert files == [".hookscope", "step-10.json", "step-20.json"]  # the marker: force may replace it
    with pytest.raises(hookscope.OutputExistsError, match=r"pass force=True to replace it \(the hookscope export"):
        hookscope.export(histories, folder, format="model-explorer", graph=graph)
    assert hookscope.export(histories, folder, format="model-explorer", graph=graph, force=True) == folder
    (folder / "notes.md").write_text("mine")
    with pytest.raises(hookscope.OutputExistsError, match=r"hookscope did not write \(notes\.md\)"):
        hookscope.export(histories, folder, format="model-explorer", graph=graph, force=True)
    data = json.loads((folder / "step-20.json").read_text())["graph"]["results"]
    assert data == {node: {"value": 2.5} for node in graph.export_ids["conv1"]}
    with pytest.raises(hookscope.errors.OptionError, match="exported=True"):
        hookscope.export({"conv1": 1.0}, tmp_path / "x.json", format="model-explorer")


def test_notebook_view_table_and_plot(resnet: Any) -> None:
    _, _, graph = resnet
    assert "<svg" in (graph._repr_html_() or "")
    assert len(graph.table().splitlines()) == len(graph.nodes) + 1
    picture = graph.plot()
    assert picture.size == (int(arrange(graph).width), int(arrange(graph).height))


@pytest.fixture(scope="module")
def page(resnet: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, x, _ = resnet
    report = build_report(model, x[:1], grads=True, cam_methods=())
    assert report.graph is not None and report.graph.column == "mean |grad_output|"
    return write_report(report, tmp_path_factory.mktemp("graph") / "report")


def test_the_report_draws_the_graph_and_fetches_nothing(page: Path, chromium: Any) -> None:
    html = page.read_text()
    for href in set(re.findall(r'href="#([^"]+)"', html)):
        assert f'id="{href}"' in html, href  # every box goes to a card or a block on the page
    for width in (1280, 400):
        tab, problems = open_page(chromium, page)
        tab.set_viewport_size({"width": width, "height": 900})
        tab.locator("#graph").scroll_into_view_if_needed()
        box = tab.locator("#graph svg.hs-graph g.node rect").first.bounding_box()
        assert box["width"] == pytest.approx(BOX_W, abs=2) and box["height"] == pytest.approx(
            BOX_H, abs=2
        )  # not shrunk
        ARTIFACTS.mkdir(exist_ok=True)
        tab.locator("#graph").screenshot(path=str(ARTIFACTS / f"graph-{width}.png"))
        tab.locator('#graph svg.hs-graph g.node[data-name="conv1"]').click()
        assert tab.evaluate("location.hash").startswith("#layer-")
        tab.locator('#graph svg.hs-graph g.node[data-name="layer3.0"]').click()
        assert tab.evaluate("document.getElementById('graph-block-layer3.0').open")
        tab.close()
        assert problems == []


def test_a_store_keeps_its_graph_and_its_report_draws_it(resnet: Any, tmp_path: Path) -> None:
    from hookscope.report.from_store import build_report_from_store

    model, x, graph = resnet
    assert Graph.from_dict(json.loads(json.dumps(graph.as_dict()))) == graph  # through JSON and back
    with hookscope.capture(model, ["conv1", "layer1.0.conv1"]) as cap, torch.no_grad():
        model(x)
    run = hookscope.save(cap, tmp_path / "store", graph=graph)
    report = build_report_from_store(hookscope.load(run.path))
    assert report.graph is not None and report.graph.edges == graph.edges
    assert report.graph.column == "bytes saved for backward"
    html = render_html(report)
    assert 'href="#layer-0"' in html and 'class="hs-graph"' in html


def test_the_training_report_colours_the_graph_by_its_alerts(tmp_path: Path) -> None:
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with hookscope.watch(model, opt, every=1, out=tmp_path / "run.hookscope"):
        for step in range(4):
            x = torch.randn(16, 8)
            x[0, 0] = float("nan") if step == 2 else x[0, 0]
            loss = F.cross_entropy(model(x), torch.randint(0, 3, (16,)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    run = hookscope.load(tmp_path / "run.hookscope")
    assert run.alerts
    report = hookscope.build_training_report(run, graph=module_graph(model, torch.randn(2, 8)))
    assert report.graph is not None and report.graph.column == "alerts"
    by_hand: dict[str, float] = {}
    for alert in run.alerts:
        by_hand[alert.module] = by_hand.get(alert.module, 0.0) + 1
    assert report.graph.overlay == by_hand
    html = render_html(report)
    assert 'id="graph"' in html and html.count('class="node"') == 3


def test_hookscope_capture_keeps_the_graph_and_report_from_the_store_draws_it(tmp_path: Path) -> None:
    from hookscope.cli import main
    from hookscope.zoo.lenet import lenet

    assert main(["capture", "lenet", "random:1x1x32x32", "--out", str(tmp_path / "store")]) == 0
    kept = Graph.from_dict(hookscope.load(tmp_path / "store").manifest["graph"])
    assert {n.module for n in kept.nodes} == ran(lenet(), torch.randn(1, 1, 32, 32))
    assert main(["report", "--from", str(tmp_path / "store"), "--out", str(tmp_path / "page")]) == 0
    assert 'class="hs-graph"' in (tmp_path / "page" / "index.html").read_text()


def test_the_tracer_leaves_no_hook_behind_even_when_the_forward_raises() -> None:
    model = DictOut()
    counts = lambda: sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())  # noqa: E731
    with pytest.raises(RuntimeError, match="mat1 and mat2"), Tracer(model):
        model(torch.randn(3, 5))  # the wrong width
    assert counts() == 0 and torch.is_grad_enabled()
    with torch.no_grad(), Tracer(model) as tracer:
        model(torch.randn(3, 4))
        assert torch.is_grad_enabled()  # it records gradients inside its block
    assert counts() == 0 and tracer.saved > 0


def test_divergence_is_zero_before_the_change_and_the_relative_norm_after() -> None:
    from hookscope.graph.overlay import divergence

    torch.manual_seed(0)
    first, x = DictOut(), torch.randn(3, 4)
    second = copy.deepcopy(first)
    with torch.no_grad():
        second.mean.weight.mul_(2)
    caps = []
    for model in (first, second):
        with hookscope.capture(model) as cap, torch.no_grad():
            model(x)
        caps.append(cap)
    found = divergence(*caps)
    assert found["trunk.0"] == found["skip"] == found["scale"] == 0.0
    a, b = caps[0]["mean"].output.double(), caps[1]["mean"].output.double()
    assert found["mean"] == pytest.approx(float((b - a).norm() / a.norm()))


class Branchy(nn.Module):
    """Data-dependent control flow: torch.export cannot trace it, hooks do not mind."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        return self.b(h) if h.sum() > 0 else -h


def test_where_torch_export_fails_the_hooks_graph_stays_and_says_why() -> None:
    torch.manual_seed(0)
    model, x = Branchy(), torch.randn(2, 4)
    with pytest.warns(hookscope.CaptureWarning, match="torch.export failed on Branchy"):
        graph = module_graph(model, x, exported=True)
    assert graph.built.startswith("hooks") and "torch.export failed" in graph.note and not graph.export_ids
    assert {n.module for n in graph.nodes} == ran(model, x)


def test_a_graph_of_401_modules_stays_readable_in_chromium(chromium: Any, tmp_path: Path) -> None:
    """300+ modules: repeated blocks folded, boxes and labels at full size at 1280 and 400 px, the graph
    scrolling inside its own frame (the page never wider than the window), a folded block opening."""
    big = nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.LayerNorm(8)) for _ in range(100)])
    report = build_report(big, torch.randn(2, 8), cam_methods=(), max_layers=10)
    assert report.graph is not None and len(report.graph.nodes) == 401
    page = write_report(report, tmp_path / "report")
    for width in (1280, 400):
        tab, problems = open_page(chromium, page)
        tab.set_viewport_size({"width": width, "height": 900})
        tab.locator("#graph").scroll_into_view_if_needed()
        boxes = tab.locator("#graph .hs-graph-scroll").first.locator("svg.hs-graph g.node")
        assert 100 <= boxes.count() <= 102  # 100 folded blocks, the input and the output
        rect = boxes.first.locator("rect").first.bounding_box()
        assert rect["width"] == pytest.approx(BOX_W, abs=2) and rect["height"] == pytest.approx(BOX_H, abs=2)
        sizes = tab.eval_on_selector_all(
            "#graph svg.hs-graph g.node text", "ts => ts.map(t => t.getBoundingClientRect().height)"
        )
        assert sizes and min(s for s in sizes if s > 0) >= 9  # labels drawn at their size, not shrunk
        assert tab.evaluate("document.documentElement.scrollWidth") <= width + 1  # the frame scrolls, not the page
        ARTIFACTS.mkdir(exist_ok=True)
        tab.locator("#graph").screenshot(path=str(ARTIFACTS / f"graph-401-{width}.png"))
        tab.locator('#graph svg.hs-graph g.node[data-name="57"]').first.click()
        tab.wait_for_function("document.getElementById('graph-block-57').open", timeout=10_000)  # a loaded CI
        tab.close()
        assert problems == []
