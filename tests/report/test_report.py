"""The HTML report: its numbers against summarize() on tensors computed by hand, its pictures,
its escaping, that it fetches nothing, and that write_report never leaves a half-written folder."""

from __future__ import annotations

import base64
import io
import math
import os
import subprocess
import sys
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import skimage.data
import torch
from PIL import Image
from torch import nn

import hookscope
import hookscope.report.html
from hookscope import zoo
from hookscope.errors import OptionError, OutputExistsError, StoreError
from hookscope.report.build import build_report
from hookscope.report.cards import MAX_VALUES
from hookscope.report.content import Report
from hookscope.report.html import TEMPLATE, render_html, write_report
from hookscope.stats.summary import summarize
from tests.browser import check_sort_and_lightbox, open_page, undecoded_images, visible_rows
from tests.models import SharedCell

HOSTILE = 'x<script>alert("pwned")</script>\'&amp;'  # a legal module name: torch only refuses dots
CATS = range(281, 286)  # tabby, tiger cat, Persian, Siamese, Egyptian Mau


def tiny_cnn() -> nn.Sequential:
    torch.manual_seed(0)
    net = nn.Sequential()
    net.add_module("conv", nn.Conv2d(3, 4, 3, padding=1))
    net.add_module("relu", nn.ReLU())
    net.add_module(HOSTILE, nn.Conv2d(4, 6, 3, padding=1))
    net.add_module("pool", nn.AdaptiveAvgPool2d(2))
    net.add_module("flat", nn.Flatten())
    net.add_module("fc", nn.Linear(24, 5))
    return net.eval()


class Holes(nn.Module):
    """Copies its input with a NaN and an Inf in every map."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[:, :, 0, 0] = math.nan
        y[:, :, 0, 1] = math.inf
        return y


class Page(HTMLParser):
    """What a test needs from the page: tags with their attributes, text, style, and the layer table."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.style = ""
        self.rows: list[list[tuple[str, str]]] = []  # per row of the layer table: (data-v, text) per cell
        self._open: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.tags.append((tag, values))
        self._open.append(tag)
        if tag == "tr" and "data-layer" in values:
            self.rows.append([])
        if tag == "td" and "tbody" in self._open and self.rows:
            self.rows[-1].append((values.get("data-v", ""), ""))

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._open and self._open[-1] == "style":
            self.style += data
        if "td" in self._open and "tbody" in self._open and self.rows and self.rows[-1]:
            value, text = self.rows[-1][-1]
            self.rows[-1][-1] = (value, text + data)

    def attrs(self, tag: str) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag]

    def all_text(self) -> str:
        return "".join(self.text)


def by_hand(net: nn.Sequential, x: torch.Tensor) -> tuple[list[tuple[str, torch.Tensor]], list[torch.Tensor]]:
    """Each child's output, and d(top-1 logit sum)/d(output), computed without hookscope."""
    outputs, h = [], x
    for name, child in net.named_children():
        h = child(h)
        outputs.append((name, h))
    score = h.gather(1, h.argmax(1, keepdim=True)).sum()
    grads = torch.autograd.grad(score, [t for _, t in outputs])
    return [(n, t.detach()) for n, t in outputs], [g.detach() for g in grads]


@pytest.fixture(scope="module")
def batch() -> torch.Tensor:
    return torch.rand(2, 3, 12, 12, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def plain(batch: torch.Tensor) -> Report:
    labels = [f"label {i}" for i in range(4)] + [HOSTILE]
    return build_report(tiny_cnn(), batch, labels=labels, title=HOSTILE, notes=[f"note {HOSTILE}"], top_k=5)


@pytest.fixture(scope="module")
def with_grads(batch: torch.Tensor) -> Report:
    return build_report(tiny_cnn(), batch, grads=True, cam_methods=("gradcam", "layercam"))


def decode_png(src: str) -> Image.Image:
    """The PNG a data: URI holds, verified."""
    assert src.startswith("data:image/png;base64,"), src[:60]
    return png(base64.b64decode(src.removeprefix("data:image/png;base64,"), validate=True))


def png(data: bytes) -> Image.Image:
    Image.open(io.BytesIO(data)).verify()  # verify() leaves the image unusable: open it again
    return Image.open(io.BytesIO(data))


# -- the page --------------------------------------------------------------------------------
@pytest.mark.parametrize("fixture", ["plain", "with_grads"])
def test_every_image_is_an_inline_png(fixture: str, request: pytest.FixtureRequest) -> None:
    report: Report = request.getfixturevalue(fixture)
    page = Page(render_html(report))
    sources = [a["src"] for a in page.attrs("img") if a.get("src")]
    grids = sum(1 for layer in report.layers for v in (layer.output, layer.grad) if v is not None and v.grid)
    cams = sum(len(row.overlays) + 1 for row in report.cams)  # the picture, then one overlay per method
    assert len(sources) == grids + cams + len(report.predictions)  # the gradient-flow chart is HTML, not a picture
    for src in sources:
        assert decode_png(src).size[0] > 0


@pytest.mark.parametrize("fixture", ["plain", "with_grads"])
def test_the_page_fetches_nothing(fixture: str, request: pytest.FixtureRequest) -> None:
    html = render_html(request.getfixturevalue(fixture))
    page = Page(html)
    assert "http://" not in html and "https://" not in html
    for tag, attrs in page.tags:
        for name in ("src", "href", "action", "srcset", "poster"):
            value = attrs.get(name, "")
            assert not value or value.startswith(("data:", "#")), (tag, name, value[:60])
    assert not page.attrs("link"), "no stylesheet or font links"
    assert all("src" not in a for a in page.attrs("script")), "scripts are inline"
    assert "url(" not in page.style and "@import" not in page.style


def test_user_strings_and_module_names_are_escaped(plain: Report) -> None:
    html = render_html(plain)
    page = Page(html)
    assert HOSTILE not in html  # never raw
    assert "<script>alert" not in html
    assert len(page.attrs("script")) == 1  # ours
    text = page.all_text()
    assert text.count(HOSTILE) >= 4  # title (twice), note, label, table row, card heading
    assert f"note {HOSTILE}" in text
    names = [cells[1][1].strip() for cells in page.rows]
    assert HOSTILE in names
    attribute_values = [v for _, attrs in page.tags for v in attrs.values()]
    assert any(HOSTILE.lower() in v for v in attribute_values)  # data-search, round-tripped intact


def test_the_table_has_one_row_per_layer_with_summarize_numbers(plain: Report, batch: torch.Tensor) -> None:
    outputs, _ = by_hand(tiny_cnn(), batch)
    page = Page(render_html(plain))
    assert len(page.rows) == len(outputs) == len(plain.layers)
    for cells, (name, tensor) in zip(page.rows, outputs, strict=True):
        expected = summarize(tensor)
        _, layer, _, shape, mean, std, low, high, zeros, bad, _saved = cells  # then saved for backward (graph)
        assert layer[1].strip() == name
        assert shape[1] == str(tuple(tensor.shape))
        assert int(shape[0]) == tensor.numel()
        wanted = (expected.mean, expected.std, expected.min, expected.max, expected.zero_fraction)
        for (value, _), want in zip((mean, std, low, high, zeros), wanted, strict=True):
            assert float(value) == pytest.approx(want, rel=1e-12, abs=1e-15)
        assert int(bad[0]) == 0
    assert [layer.name for layer in plain.layers] == [name for name, _ in outputs]


def test_numbers_count_nan_and_inf_and_the_cell_is_flagged() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 2, 3), Holes())
    report = build_report(net, torch.rand(1, 3, 6, 6))
    page = Page(render_html(report))
    holes = page.rows[1]
    assert holes[9][0] == "4" and holes[9][1].strip() == "2 / 2"  # 2 channels: a NaN and an Inf each
    assert any("bad" in a.get("class", "") for a in page.attrs("td"))
    assert "the model's output is not (batch, classes): no predictions" in report.remarks
    assert any(r.startswith("no CAM: the model's output is not (batch, classes)") for r in report.remarks)
    assert report.predictions == () and report.cams == ()


def test_predictions_are_the_softmax_top_k_with_class_names(plain: Report, batch: torch.Tensor) -> None:
    with torch.no_grad():
        probabilities = tiny_cnn()(batch).softmax(1)
    for prediction, row in zip(plain.predictions, probabilities, strict=True):
        values, indices = row.topk(5)
        assert [g.index for g in prediction.guesses] == indices.tolist()
        assert [g.probability for g in prediction.guesses] == pytest.approx(values.tolist(), rel=1e-6)
        names = [g.name for g in prediction.guesses]
        assert names == [HOSTILE if i == 4 else f"label {i}" for i in indices.tolist()]


def test_pictures_show_image_zero_as_grids_and_value_bars(plain: Report, batch: torch.Tensor) -> None:
    outputs, _ = by_hand(tiny_cnn(), batch)
    views = {layer.name: layer.output for layer in plain.layers}
    conv = views["conv"]
    assert conv is not None and conv.grid is not None and conv.values == ()
    assert png(conv.grid).size == (2 * 48 + 2, 2 * 48 + 2)  # 4 channels of 12x12 maps, enlarged x4, 2 x 2 tiles
    fc = views["fc"]
    assert fc is not None and fc.grid is None
    assert fc.values == pytest.approx(dict(outputs)["fc"][0].tolist())
    pool = views["pool"]  # (2, 6, 2, 2): maps, not 1x1
    assert pool is not None and pool.grid is not None


def test_large_maps_are_shrunk_and_3d_outputs_get_no_picture() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 2, 1), nn.Flatten(2), nn.Flatten(1), nn.Linear(2 * 100 * 100, 3))
    report = build_report(net, torch.rand(1, 1, 100, 100), cam_methods=())
    conv, tokens, flat, _ = (layer.output for layer in report.layers)
    assert conv is not None and conv.grid is not None
    assert "100x100 maps drawn at 64x64" in conv.note
    assert tokens is not None and tokens.grid is None and tokens.values == ()
    assert "3-D output" in tokens.note
    assert flat is not None and len(flat.values) == MAX_VALUES
    assert flat.note == f"image 0, values 0-{MAX_VALUES - 1} of 20000"


def test_grads_add_gradient_panels_and_a_flow_chart(with_grads: Report, plain: Report, batch: torch.Tensor) -> None:
    outputs, grads = by_hand(tiny_cnn(), batch)
    for layer, grad in zip(with_grads.layers, grads, strict=True):
        assert layer.grad is not None
        assert layer.grad.stats["mean_abs"] == pytest.approx(summarize(grad).mean_abs, rel=1e-6)
        assert layer.grad.stats["std"] == pytest.approx(summarize(grad).std, rel=1e-6)
    assert with_grads.flow is not None
    assert [bar.name for bar in with_grads.flow.bars] == [name for name, _ in outputs]
    expected = [summarize(grad).mean_abs for grad in grads]
    assert [bar.mean_abs for bar in with_grads.flow.bars] == pytest.approx(expected, rel=1e-6)
    html = render_html(with_grads)
    page = Page(html)
    assert any(a.get("id") == "flow" for a in page.attrs("section"))
    assert len([a for a in page.attrs("span") if "bar" in a.get("class", "").split()]) == 2 * len(outputs)
    assert page.all_text().count("gradient · grad_output") == len(outputs)
    assert len(page.rows[0]) == 12  # the mean |grad| column, then saved for backward (the graph's)
    assert float(page.rows[0][10][0]) == pytest.approx(summarize(grads[0]).mean_abs, rel=1e-6)
    assert [row.overlays[1][0] for row in with_grads.cams] == ["layercam", "layercam"]
    plain_page = render_html(plain)
    assert 'id="flow"' not in plain_page and "grad_output" not in plain_page


def test_grads_leave_param_grad_and_the_model_alone(batch: torch.Tensor) -> None:
    net = tiny_cnn()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    build_report(net, batch, grads=True)
    assert all(p.grad is None for p in net.parameters())
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert not net.training


def test_a_shared_module_shows_its_first_call_and_says_how_many() -> None:
    torch.manual_seed(0)
    net = SharedCell(width=4, steps=3).eval()
    x = torch.randn(5, 4)
    report = build_report(net, x, select="cell")
    (layer,) = report.layers
    assert layer.calls == 3
    assert layer.output is not None
    assert layer.output.stats["mean"] == pytest.approx(summarize(net.cell(x)).mean, rel=1e-12)
    assert "called 3×, showing call 0" in Page(render_html(report)).all_text()
    assert report.pictures == () and report.cams == ()
    assert any("no CAM: the input (5, 4) is not a batch of images" in r for r in report.remarks)
    assert len(report.predictions) == 5  # the (5, 4) output is read as 4 classes


def test_max_layers_leaves_the_rest_out_and_says_so(batch: torch.Tensor) -> None:
    report = build_report(tiny_cnn(), batch, max_layers=2, cam_methods=())
    assert [layer.name for layer in report.layers] == ["conv", "relu"]
    assert report.selected == 6
    assert any(
        r.startswith("4 more layers were captured but left out (raise max_layers=, --max-layers)")
        for r in report.remarks
    )


def test_progress_reports_each_stage(batch: torch.Tensor) -> None:
    calls: list[tuple[str, int, int]] = []
    build_report(tiny_cnn(), batch, grads=True, progress=lambda *a: calls.append(a))
    assert [c[0] for c in calls if c[1] == 0] == ["forward", "layers", "cam", "flow"]
    assert ("layers", 6, 6) in calls and calls[-1] == ("flow", 1, 1)
    layers = [c[1] for c in calls if c[0] == "layers"]
    assert layers == list(range(7))


class WithSpare(nn.Module):
    """The tiny CNN, and a Linear it never calls."""

    def __init__(self) -> None:
        super().__init__()
        self.net = tiny_cnn()
        self.spare = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def test_what_could_not_be_captured_is_a_remark_not_a_warning(batch: torch.Tensor) -> None:
    report = build_report(WithSpare().eval(), batch, select=["net.conv", "spare"], grads=True, cam_methods=())
    assert [layer.name for layer in report.layers] == ["net.conv"]
    assert any(r.startswith("nothing captured for 'spare': it was never called") for r in report.remarks)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"labels": ["a", "b"]}, r"got 2 labels but the model returns 5 classes"),
        ({"cam_methods": ("gradcam", "nope")}, r"unknown CAM method\(s\) 'nope'"),
        ({"cam_methods": "gradcam"}, r"cam_methods must be a list"),
        ({"pictures": []}, r"got 0 pictures for a batch of 2"),
        ({"top_k": 0}, r"top_k must be a positive int"),
        ({"max_layers": 0}, r"max_layers must be a positive int"),
    ],
)
def test_bad_options_are_one_line_errors(batch: torch.Tensor, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(OptionError, match=match):
        build_report(tiny_cnn(), batch, **kwargs)  # type: ignore[arg-type]


def test_pictures_given_are_what_the_cams_are_drawn_over(batch: torch.Tensor) -> None:
    pictures = [Image.new("RGB", (300, 200), (0, 0, 255)), Image.new("RGB", (40, 40), (255, 255, 0))]
    report = build_report(tiny_cnn(), batch, pictures=pictures)
    sizes = [png(picture).size for picture in report.pictures]
    assert sizes == [(300, 200), (200, 200)]  # small pictures are enlarged by a whole factor
    assert [png(row.overlays[0][1]).size for row in report.cams] == sizes


def test_import_does_not_pull_in_jinja_pillow_or_matplotlib() -> None:
    code = (
        "import sys, hookscope.report.build; "
        "print(sorted(m for m in ('jinja2', 'PIL', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_template_is_package_data() -> None:
    assert resources.files("hookscope").joinpath(TEMPLATE).is_file()


# -- a real network ----------------------------------------------------------------------------
def test_efficientnet_on_the_cat_names_a_cat_class() -> None:
    labels = zoo.imagenet_labels()
    x = zoo.lite_input(skimage.data.chelsea())
    report = build_report(zoo.efficientnet_lite0(), x, select="_blocks.1*", labels=labels, max_layers=8)
    best = report.predictions[0].guesses[0]
    assert best.index in CATS, best.name
    assert best.name == labels[best.index]
    text = Page(render_html(report)).all_text()
    assert best.name in text
    assert report.cams[0].target == f"{best.name} #{best.index}"
    assert report.cam_layer == "_swish (the second of 2 calls, after _bn1): the last spatial map"
    assert report.selected == 56 and len(report.layers) == 8  # 77 with the 21 static_padding Identity modules
    assert any(r.startswith("48 more layers were captured but left out") for r in report.remarks)


# -- writing -----------------------------------------------------------------------------------
def test_write_replaces_its_own_report_with_force_and_never_the_user_s_files(plain: Report, tmp_path: Path) -> None:
    out = tmp_path / "report"
    out.mkdir()
    assert write_report(plain, out) == out / "index.html"  # an empty folder is fine
    assert sorted(p.name for p in out.iterdir()) == [".hookscope", "index.html"]  # marked as hookscope's
    with pytest.raises(OutputExistsError, match=r"already exists; pass force=True to replace it \(the hookscope "
                                                r"report there\), or pick another path$"):  # fmt: skip
        write_report(plain, out)
    (out / "old.txt").write_text("old")  # the user's file: force would delete it, so it is refused
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(OutputExistsError, match=r"holds 1 file hookscope did not write \(old\.txt\)"):
        write_report(plain, out, force=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    (out / "old.txt").unlink()
    (out / "index.html").write_text("stale")
    index = write_report(plain, out, force=True)
    assert index.read_text(encoding="utf-8") == render_html(plain)
    assert sorted(p.name for p in out.iterdir()) == [".hookscope", "index.html"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # nothing staged left behind


def test_write_to_a_new_folder(plain: Report, tmp_path: Path) -> None:
    index = write_report(plain, str(tmp_path / "fresh"))
    assert index == tmp_path / "fresh" / "index.html" and index.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh"]
    with pytest.raises(OptionError, match=r"is a file, not a folder"):
        write_report(plain, index)


def test_a_failure_mid_write_leaves_the_old_report_and_no_temp_folder(
    plain: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "report"
    write_report(plain, out)
    before = (out / "index.html").read_text(encoding="utf-8")

    def broken(report: Report) -> str:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(hookscope.report.html, "render_html", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        write_report(plain, out, force=True)
    with pytest.raises(RuntimeError, match="disk on fire"):
        write_report(plain, tmp_path / "other")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]
    assert (out / "index.html").read_text(encoding="utf-8") == before


def test_an_unwritable_parent_is_a_clear_error(plain: Report, tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file.txt"
    not_a_folder.write_text("")
    with pytest.raises(StoreError, match=r"^cannot write the report to .*file\.txt/report: Not a directory"):
        write_report(plain, not_a_folder / "report")
    with pytest.raises(StoreError, match=r"^cannot write the report to .*: No such file or directory"):
        write_report(plain, tmp_path / "missing" / "report")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


def test_a_disk_that_fails_mid_write_is_a_store_error_naming_the_path_and_reason(
    plain: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's own write failing (a full disk) is a StoreError, not an OSError or an OptionError."""
    out = tmp_path / "report"
    write_report(plain, out)
    before = (out / "index.html").read_text(encoding="utf-8")

    def full(self: Path, *args: Any, **kwargs: Any) -> int:
        raise OSError(28, "No space left on device", str(self))

    monkeypatch.setattr(Path, "write_text", full)
    no_space = r"^cannot write the report to .*report: No space left on device \(.*index\.html\)$"
    with pytest.raises(StoreError, match=no_space):
        write_report(plain, out, force=True)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no staging folder left
    assert (out / "index.html").read_text(encoding="utf-8") == before


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_parent_is_a_clear_error(plain: Report, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(StoreError, match=r"^cannot write the report to .*: Permission denied"):
            write_report(plain, locked / "report")
        assert list(locked.iterdir()) == []
    finally:
        locked.chmod(0o700)


# -- in a browser, where one is installed --------------------------------------------------------
def test_in_chromium_search_filter_sort_and_lightbox_work_without_errors(
    with_grads: Report, tmp_path: Path, chromium: Any
) -> None:
    index = write_report(with_grads, tmp_path / "report")
    page, problems = open_page(chromium, index)
    assert undecoded_images(page) == []
    page.fill("#layer-search", "conv")
    assert page.locator("#layer-table tbody tr:not([hidden])").count() == 2
    assert page.locator("article.layer:not([hidden])").count() == 2
    assert page.inner_text("#layer-count") == "2 of 6 layers"
    page.fill("#layer-search", "")
    page.select_option("#layer-type", "Linear")
    assert len(visible_rows(page)) == 1
    page.select_option("#layer-type", "")
    check_sort_and_lightbox(page)
    page.close()
    assert problems == []


def tied_net() -> nn.Sequential:
    """1000 classes whose top two, 3 and 999, tie exactly on every input (the same weights and bias)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 1000))
    with torch.no_grad():
        head = net[4]
        head.weight[3] = head.weight[3].abs() + 0.1  # a CAM with something in it
        head.weight[999] = head.weight[3]
        head.bias[3] = head.bias[999] = 50.0
    return net.eval()


def test_tied_top_logits_name_and_explain_the_same_class(batch: torch.Tensor) -> None:
    """Of tied scores the lowest index comes first in the predictions and is the class explained
    (torch.topk alone puts 999 first at this width; argmax takes 3)."""
    net = tied_net()
    with torch.no_grad():
        logits = net(batch)
    assert torch.equal(logits[:, 3], logits[:, 999]) and (logits.argmax(dim=1) == 3).all()
    report = build_report(net, batch)
    assert [p.guesses[0].index for p in report.predictions] == [3] * len(report.predictions)
    assert [p.guesses[1].index for p in report.predictions] == [999] * len(report.predictions)
    assert report.predictions[0].guesses[0].probability == report.predictions[0].guesses[1].probability
    assert [row.target for row in report.cams] == ["class 3"] * len(report.cams)
    shown = batch[: len(report.cams)]
    assert build_report(net, shown, target=3).cams == build_report(net, shown).cams


def test_vit_tokens_are_drawn_on_their_patch_grid_and_sequences_are_not() -> None:
    from torchvision.models.vision_transformer import VisionTransformer

    from hookscope.report.cards import picture_of

    torch.manual_seed(0)
    vit = VisionTransformer(image_size=32, patch_size=8, num_layers=1, num_heads=2, hidden_dim=16, mlp_dim=32,
                            num_classes=4).eval()  # fmt: skip
    x = torch.randn(1, 3, 32, 32)
    report = build_report(vit, x, select="encoder.ln", cam_methods=())
    (view,) = report.layers[0].tensors
    assert view.shape == (1, 17, 16) and view.grid is not None
    assert view.note == "image 0, channels 0-15 of 16; tokens drawn as a 4x4 patch grid after 1 leading token"
    with hookscope.capture(vit, "encoder.ln") as cap:  # oracle: the class token dropped, the 16 patches by hand
        vit(x)
    tokens = cap["encoder.ln"].output  # (1, 17, 16)
    by_hand = tokens[:, 1:].transpose(1, 2).reshape(1, 16, 4, 4)  # (B, D, 4, 4), patches row-major
    assert view.grid == picture_of(by_hand, diverging=False)[0]
    sequence = torch.randn(1, 7, 16)  # 7 tokens: no square grid of 4 x 4 or more
    conv1d = torch.randn(1, 16, 36)  # (B, C, L) with C the module's channels: 36 would read as 6 x 6 "tokens"
    assert picture_of(sequence, diverging=False)[0] is None
    assert picture_of(conv1d, diverging=False, channels=16)[0] is None
