"""patch_sweep against a manual loop over sites (hookscope.edit + edits.replace, one run per site):
on a CNN with two photos swapped, and on an nn.TransformerEncoder position by position."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import skimage.data
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import hookscope
from hookscope import edits

D = torch.float64
Metric = Callable[[Tensor], Tensor]


def photo(image: object) -> Tensor:
    x = torch.as_tensor(image, dtype=D).permute(2, 0, 1)[None] / 255  # (1, 3, H, W)
    return F.interpolate(x, size=(32, 32), mode="bilinear", antialias=True)


def cnn() -> nn.Sequential:
    torch.manual_seed(0)
    return (
        nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(8 * 8 * 8, 5),
        )
        .to(D)
        .eval()
    )


def metric(out: Tensor) -> Tensor:
    return out[:, 0] - out[:, 1]


def manual(model: nn.Module, clean_x: Tensor, corrupt_x: Tensor, site: str, measure: Metric, **where: object) -> float:
    """The restored fraction of one site, the slow way."""
    with torch.no_grad():
        with hookscope.capture(model, site) as clean:
            m_clean = float(measure(model(clean_x)).mean())
        m_corrupt = float(measure(model(corrupt_x)).mean())
        with hookscope.edit(model, {site: edits.replace(clean, **where)}, strict=False):  # type: ignore[arg-type]
            m = float(measure(model(corrupt_x)).mean())
    return (m - m_corrupt) / (m_clean - m_corrupt)


SITES = ["0", "2", "3", "4", "6", "8"]


@pytest.mark.parametrize("copies", [1, 4])
def test_a_cnn_sweep_over_swapped_photos_equals_the_manual_loop(copies: int) -> None:
    model = cnn()
    cat, coffee = photo(skimage.data.chelsea()), photo(skimage.data.coffee())
    clean_x, corrupt_x = torch.cat([cat, coffee]), torch.cat([coffee, cat])  # the two photos swapped
    shift = torch.tensor([[1.0], [2.0]], dtype=D)  # so the batch mean of the metric does not cancel out

    def weighted(out: Tensor) -> Tensor:
        return metric(out) * shift[:, 0]

    effects = hookscope.patch_sweep(model, clean_x, corrupt_x, select=SITES, target=weighted, batch_size=copies)
    assert list(effects.restored) == SITES
    assert effects.forwards == 2 + math.ceil(len(SITES) / copies)
    expected = {site: manual(model, clean_x, corrupt_x, site, weighted) for site in SITES}
    for site in SITES:
        assert effects.fraction(site) == pytest.approx(expected[site], abs=1e-9)
    assert effects.fraction("8") == pytest.approx(1.0, abs=1e-12)  # the output itself restores fully
    assert effects.metric_clean == pytest.approx(float(weighted(model(clean_x)).detach().mean()), abs=1e-12)


def encoder() -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(D).eval()


def last_token(out: Tensor) -> Tensor:
    return out[:, -1, 0]


def test_a_transformer_sweep_over_positions_equals_the_manual_loop() -> None:
    model = encoder()
    torch.manual_seed(1)
    clean_x, corrupt_x = torch.randn(2, 5, 8, dtype=D), torch.randn(2, 5, 8, dtype=D)
    effects = hookscope.patch_sweep(
        model, clean_x, corrupt_x, select=["layers.0", "layers.1"], target=last_token, batch_size=3
    )
    for site in ("layers.0", "layers.1"):
        assert isinstance(effects.restored[site], list) and len(effects.restored[site]) == 5
        for p in range(5):
            expected = manual(model, clean_x, corrupt_x, site, last_token, positions=[p])
            assert effects.fraction(site, p) == pytest.approx(expected, abs=1e-9), (site, p)
    assert effects.fraction("layers.1", 4) == pytest.approx(1.0, abs=1e-12)  # the last token of the last layer
    assert effects.fraction("layers.1", 0) == pytest.approx(0.0, abs=1e-12)  # the metric reads token 4 only there
    assert effects.forwards == 2 + math.ceil(10 / 3)
    whole = hookscope.patch_sweep(model, clean_x, corrupt_x, select="layers.1", target=last_token, positions=False)
    assert whole.restored == {"layers.1": pytest.approx(1.0, abs=1e-12)}


def test_the_table_the_heatmap_and_the_notebook_view() -> None:
    model = encoder()
    torch.manual_seed(1)
    effects = hookscope.patch_sweep(
        model,
        torch.randn(1, 4, 8, dtype=D),
        torch.randn(1, 4, 8, dtype=D),
        select=["layers.0", "layers.1"],
        target=last_token,
    )
    lines = effects.table().splitlines()
    assert lines[0].split() == ["site", "pos", "0", "pos", "1", "pos", "2", "pos", "3"]
    assert lines[2].split()[0] == "layers.1" and lines[2].split()[-1] == "1.000"
    image = effects.plot()
    assert image.mode == "RGB" and image.width > image.height > 50
    html = effects._repr_html_()
    assert html is not None and "data:image/png;base64," in html and "<script" not in html and "http" not in html


def test_an_equal_metric_or_idle_sites_are_said() -> None:
    model = encoder()
    x = torch.randn(1, 4, 8, dtype=D)
    with pytest.raises(hookscope.EditError, match=r"the target is .* on both the clean and the corrupted input"):
        hookscope.patch_sweep(model, x, x.clone(), select="layers.0", target=last_token)
    with pytest.warns(hookscope.EditWarning, match=r"leaves out 'layers.0.self_attn.out_proj'.*never called"):
        hookscope.patch_sweep(
            model,
            x,
            torch.randn(1, 4, 8, dtype=D),
            select=["layers.0", "layers.0.self_attn.out_proj"],
            target=last_token,
        )
    with pytest.raises(hookscope.EditError, match="differ in shape"):
        hookscope.patch_sweep(model, x, x[:, :2], select="layers.0", target=last_token)


class Twice(nn.Module):
    """One linear layer called twice: ``s(x) + s(2 x)``; call 0 sees x, call 1 sees 2 x."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.s = nn.Linear(3, 2).to(D)

    def forward(self, x: Tensor) -> Tensor:
        return self.s(x) + self.s(2 * x)  # type: ignore[no-any-return]


def test_call_patches_one_call_of_a_shared_module() -> None:
    model = Twice()
    clean, corrupt = torch.randn(2, 3, dtype=D), torch.randn(2, 3, dtype=D)

    def total(out: Tensor) -> Tensor:
        return out.sum(1)

    with torch.no_grad():
        m_clean, m_corrupt = float(total(model(clean)).mean()), float(total(model(corrupt)).mean())
        by_hand = {
            0: float(total(model.s(clean) + model.s(2 * corrupt)).mean()),
            1: float(total(model.s(corrupt) + model.s(2 * clean)).mean()),
        }
    for call, patched in by_hand.items():
        sweep = hookscope.patch_sweep(model, clean, corrupt, target=total, select="s", call=call)
        assert sweep.fraction("s") == pytest.approx((patched - m_corrupt) / (m_clean - m_corrupt), abs=1e-12)
    every = hookscope.patch_sweep(model, clean, corrupt, target=total, select="s")  # None: every call
    assert every.fraction("s") == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(hookscope.NotCapturedError, match=r"call=2 is not a call of 's', which ran 2 time\(s\)"):
        hookscope.patch_sweep(model, clean, corrupt, target=total, select="s", call=2)


def test_blocks_by_default_a_class_target_and_the_old_keywords() -> None:
    model = encoder()
    torch.manual_seed(1)
    clean_x, corrupt_x = torch.randn(2, 5, 8, dtype=D), torch.randn(2, 5, 8, dtype=D)
    named = hookscope.patch_sweep(model, clean_x, corrupt_x, target=last_token, select=["layers.0", "layers.1"])
    blocks = hookscope.patch_sweep(model, clean_x, corrupt_x, target=last_token)  # ":blocks": layers.0, layers.1
    assert blocks.restored == named.restored
    with pytest.warns(DeprecationWarning, match=r"patch_sweep\(") as said:
        old = hookscope.patch_sweep(
            model, clean_x, corrupt_x, sites=["layers.0", "layers.1"], metric=last_token, copies=3
        )
    assert old.forwards == 2 + math.ceil(10 / 3)
    for site, fractions in named.restored.items():
        assert old.restored[site] == pytest.approx(fractions, abs=1e-12)  # 3 copies a pass, not 8: rounding
    messages = sorted(str(w.message) for w in said)
    assert [m.split(" is deprecated")[0] for m in messages] == [
        "patch_sweep(copies=...)",
        "patch_sweep(metric=...)",
        "patch_sweep(sites=...)",
    ]
    assert [m.split("; use ")[1] for m in messages] == [
        "patch_sweep(batch_size=...)",
        "patch_sweep(target=...)",
        "patch_sweep(select=...)",
    ]
    head = nn.Sequential(nn.Flatten(), nn.Linear(40, 4)).to(D)
    by_class = hookscope.patch_sweep(head, clean_x, corrupt_x, target=2, select="1")
    by_function = hookscope.patch_sweep(head, clean_x, corrupt_x, target=lambda out: out[:, 2], select="1")
    assert by_class.restored == by_function.restored and by_class.metric_clean == by_function.metric_clean


class TwoHeads(nn.Module):
    """A structured output: ``{"aux": ..., "logits": ...}`` (aux first, so the first tensor is not the logits)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body, self.head = nn.Linear(6, 6).to(D), nn.Linear(6, 3).to(D)

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        hidden = self.body(x).tanh()
        return {"aux": hidden.sum(1, keepdim=True), "logits": self.head(hidden)}


def test_output_names_the_tensor_the_target_reads() -> None:
    model = TwoHeads()
    clean, corrupt = torch.randn(2, 6, dtype=D), torch.randn(2, 6, dtype=D)
    by_hand = hookscope.patch_sweep(model, clean, corrupt, target=lambda out: out["logits"][:, 1], select="body")
    by_class = hookscope.patch_sweep(model, clean, corrupt, target=1, output="logits", select="body")
    by_key = hookscope.patch_sweep(model, clean, corrupt, target=lambda t: t[:, 1], output="logits", select="body")
    assert by_class.restored == by_hand.restored == by_key.restored
    assert by_class.metric_clean == by_hand.metric_clean


def test_no_target_measures_the_clean_top_1_logit() -> None:
    """target=None means what it means in cam and attribute: each image's top-1 class (here on the
    clean input, the answer a patch restores)."""
    model = TwoHeads()
    clean, corrupt = torch.randn(2, 6, dtype=D), torch.randn(2, 6, dtype=D)
    top = model(clean)["logits"].argmax(dim=1)
    default = hookscope.patch_sweep(model, clean, corrupt, output="logits", select="body")
    by_class = hookscope.patch_sweep(model, clean, corrupt, target=top, output="logits", select="body")
    assert default.restored == by_class.restored
    assert default.metric_clean == pytest.approx(
        float(model(clean)["logits"].max(dim=1).values.mean().detach()), rel=1e-12
    )
    with pytest.raises(hookscope.TargetError, match=r"a class target needs a \(batch, classes\) output"):
        hookscope.patch_sweep(encoder(), torch.randn(2, 5, 8, dtype=D), torch.randn(2, 5, 8, dtype=D))
