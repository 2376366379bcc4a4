"""Draws graph.png: ResNet-18's module graph in its report, coloured by mean |gradient|, block layer2.0 opened.

    python examples/graph_picture.py                 # writes examples/output/graph/graph.png
    python examples/graph_picture.py --out FOLDER    # writes FOLDER/graph.png
    python examples/graph_picture.py --docs          # regenerates the guide's docs/images/graph.png

ResNet-18 at its random initialisation (seed 0, no download) on one 64 x 64 input: ``build_report``
traces the graph in its own pass (``hookscope.graph.trace``) and the page is opened in Chromium
(Playwright with Debian's ``chromium``, as the browser tests run it), the box of ``layer2.0`` clicked
open, and the graph section photographed. Each call of a block's ReLU is a box of its own
(``layer2.0.relu#0``, ``layer2.0.relu#1``), so the opened block reads as its forward runs.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch
import torchvision
from PIL import Image

import hookscope

DOCS = Path(__file__).resolve().parent.parent / "docs" / "images"
OUTPUT = Path(__file__).resolve().parent / "output"  # every example writes under examples/output/ (ignored)


def where() -> Path:
    """The file to draw: ``graph.png`` in ``--out FOLDER`` (default ``examples/output/graph/``),
    or in docs/images with ``--docs``."""
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--out", default=str(OUTPUT / "graph"), help="the folder to write graph.png into")
    options.add_argument("--docs", action="store_true", help="write the guide's docs/images/graph.png instead")
    args = options.parse_args()
    return (DOCS if args.docs else Path(args.out)) / "graph.png"


def main() -> None:
    out = where()
    out.parent.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright  # the test toolchain's (make test installs it)

    torch.manual_seed(0)
    model, x = torchvision.models.resnet18().eval(), torch.randn(1, 3, 64, 64)
    report = hookscope.build_report(model, x, grads=True, cam_methods=())
    print(report.graph)
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        page_path = hookscope.write_report(report, Path(folder) / "report")
        browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1100, "height": 2400})  # the overview whole (its frame: 80vh)
        page.goto(page_path.as_uri())
        page.add_style_tag(content="nav.sections { display: none }")  # the sticky bar would cover the graph
        page.locator('#graph svg.hs-graph g.node[data-name="layer2.0"]').click()
        shot = Path(folder) / "graph.png"
        page.locator("#graph").screenshot(path=str(shot))
        browser.close()
        with Image.open(shot) as picture:  # 256 colours: a third of the bytes, the same to the eye
            picture.convert("RGB").quantize(256).save(out, optimize=True)
    print(out)


if __name__ == "__main__":
    main()
