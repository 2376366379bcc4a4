"""Draws docs/images/inline.png, docs/guide/notebooks.md's picture of a notebook cell: what `cap` shows inline.

    python examples/inline_picture.py                 # writes examples/output/inline/inline.png
    python examples/inline_picture.py --out FOLDER    # writes FOLDER/inline.png
    python examples/inline_picture.py --docs          # regenerates the guide's docs/images/inline.png

The capture's own `_repr_html_` (what Jupyter, VS Code and GitHub show) under a cell prompt, drawn by
Chromium through Playwright.
"""

from __future__ import annotations

import argparse
import html
import shutil
import tempfile
from pathlib import Path

import torch

import hookscope
from hookscope.zoo import lenet

DOCS = Path(__file__).resolve().parent.parent / "docs" / "images"
OUTPUT = Path(__file__).resolve().parent / "output"  # every example writes under examples/output/ (ignored)
CELL = 'with hookscope.capture(model, "conv*", kinds=("input", "output", "grad_output")) as cap:\n    ...\ncap'
PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><style>
body {{ margin: 0; padding: 14px 18px; background: #fff; font: 13px system-ui, sans-serif; }}
pre {{ margin: 0 0 10px; padding: 8px 10px; background: #f5f5f5; border: 1px solid #e0e0e0; border-radius: 4px;
       font: 12.5px/1.45 ui-monospace, Menlo, Consolas, monospace; }}
.prompt {{ color: #303f9f; font: 12px ui-monospace, monospace; margin: 0 0 4px; }}
</style></head><body><p class="prompt">[3]:</p><pre>{cell}</pre>{view}</body></html>"""


def where() -> Path:
    """The file to draw: ``inline.png`` in ``--out FOLDER`` (default ``examples/output/inline/``),
    or in docs/images with ``--docs``."""
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--out", default=str(OUTPUT / "inline"), help="the folder to write inline.png into")
    options.add_argument("--docs", action="store_true", help="write the guide's docs/images/inline.png instead")
    args = options.parse_args()
    return (DOCS if args.docs else Path(args.out)) / "inline.png"


def main() -> None:
    out = where()
    out.parent.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    model, (digits, _) = lenet.lenet(), lenet.digits("test")
    with hookscope.capture(model, "conv*", kinds=("input", "output", "grad_output")) as cap:
        logits = model(digits[:8])
        logits.gather(1, logits.argmax(1, keepdim=True)).sum().backward()
    page_html = PAGE.format(cell=html.escape(CELL), view=cap._repr_html_())
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as p:
        path = Path(folder, "cell.html")
        path.write_text(page_html, encoding="utf-8")
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 980, "height": 300}, device_scale_factor=1)
        page.goto(path.as_uri())
        page.screenshot(path=str(out), full_page=True)
        browser.close()
    print(out)


if __name__ == "__main__":
    torch.set_grad_enabled(True)
    main()
