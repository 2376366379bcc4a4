"""The report's edit sections: a patch sweep and an ablation, reached through build_report(sections=...),
linked from the navigation, every name escaped, nothing fetched."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from torch import nn

import hookscope
from hookscope import edits
from hookscope.edits.ablation import ablation
from hookscope.report.content import Section


def model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        OrderedDict([("<b>conv", nn.Conv2d(3, 4, 3)), ("relu", nn.ReLU()), ("pool", nn.AdaptiveAvgPool2d(1)),
                     ("flat", nn.Flatten()), ("head", nn.Linear(4, 3))])
    ).eval()  # fmt: skip


def test_a_sweep_and_an_ablation_are_sections_of_the_page() -> None:
    m = model()
    torch.manual_seed(1)
    x, y = torch.randn(1, 3, 8, 8), torch.randn(1, 3, 8, 8)
    sweep = hookscope.patch_sweep(m, x, y, select=["<b>conv", "head"], target=lambda out: out[:, 0] - out[:, 1])
    cut = ablation(m, x, {"<b>conv": edits.zero(channels=[0])}, labels=["cat", "dog", "<i>fish"], top_k=3)
    report = hookscope.build_report(m, x, select="head", sections=[sweep, cut])
    assert [s.id for s in report.sections] == ["patching", "ablation"]
    page = hookscope.render_html(report)
    for anchor in ("patching", "ablation"):
        assert f'href="#{anchor}"' in page and f'<section id="{anchor}">' in page
    patching = page[page.index('<section id="patching">') :].split("</section>")[0]
    assert "&lt;b&gt;conv" in patching and "<b>conv" not in patching
    assert "data:image/png;base64," in patching and "<script" not in patching
    ablated = page[page.index('<section id="ablation">') :].split("</section>")[0]
    assert "&lt;i&gt;fish" in ablated or "cat (0)" in ablated
    assert "<i>" not in ablated and "http" not in ablated


def test_sections_are_checked() -> None:
    m = model()
    with pytest.raises(hookscope.OptionError, match=r"a report section is a Section.*, got str"):
        hookscope.build_report(m, torch.randn(1, 3, 8, 8), select="head", sections=["nope"])  # type: ignore[list-item]
    own = Section("mine", "Mine", "<p>hello</p>")
    report = hookscope.build_report(m, torch.randn(1, 3, 8, 8), select="head", sections=[own])
    assert '<section id="mine">' in hookscope.render_html(report) and "<p>hello</p>" in hookscope.render_html(report)
