"""One store-site selector (``core.store_sites.select_sites``) for every reader of a store: ``probe``,
``StoreDataset``, ``StoreStream``, ``export(format="datasets")`` and ``compare.cka`` pick the same sites for
the same selector (a name, a glob, ``re:``, a module type, a list), and a selector that picks nothing, or
needs the model, is a ``SelectionError`` in each."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import hookscope
from hookscope.core.store_sites import select_sites
from hookscope.errors import SelectionError
from tests.store.lm import TinyLM, token_batches

SITES = {"embed": "Embedding", "mlp": "Linear", "mlp.pad": "ZeroPad1d", "head": "NonDynamicallyQuantizableLinear"}


@pytest.mark.parametrize(
    ("select", "picked"),
    [
        (None, ["embed", "mlp", "mlp.pad", "head"]),
        ("mlp", ["mlp"]),
        ("m*", ["mlp"]),  # a glob leaves the padding out, as select_modules does
        ("mlp.*", ["mlp.pad"]),  # ... unless it is all the glob matches
        ("re:(embed|head)", ["embed", "head"]),
        (nn.Linear, ["mlp", "head"]),  # a type: its class and subclasses, by name
        (["head", "embed"], ["embed", "head"]),  # the store's order
        ("_orig_mod.mlp", ["mlp"]),  # a compiled model's name, as select_modules takes it
    ],
)
def test_a_selector_picks_site_names_as_it_picks_module_names(select: Any, picked: list[str]) -> None:
    assert select_sites(SITES, select, source="the store s") == picked


@pytest.mark.parametrize(
    ("select", "message"),
    [
        ("mpl", r"'mpl' matched no site of the store s \(4 sites; closest: 'mlp'"),
        (["mlp", "mpl"], r"'mpl' matched no site"),  # each entry of a list must match
        (nn.Conv2d, r"type Conv2d matched no site of the store s \(4 sites; types present: Embedding, Linear"),
        (":blocks", r"':blocks' finds a model's blocks and needs the model, but the store s holds site names"),
        (lambda name, module: True, r"needs the model.*by name, glob, 're:<regex>' or module type"),
        ("re:(", r"'re:\(' is not a valid regular expression"),
        ([], r"the selector list is empty"),
    ],
)
def test_what_picks_no_site_is_a_selection_error(select: Any, message: str) -> None:
    with pytest.raises(SelectionError, match=message):
        select_sites(SITES, select, source="the store s")


def _readers(run: hookscope.Run, tmp_path: Path) -> dict[str, Callable[[Any], list[str]]]:
    """Each reader of a store, as the sites it read for a selector."""
    labels = torch.arange(8) % 2
    other = hookscope.extract(TinyLM(1), token_batches(2, rows=4), out=tmp_path / "b.hookscope", progress=False)
    exported = iter(range(100))

    def export(select: Any) -> list[str]:
        pytest.importorskip("datasets")
        out = hookscope.export(run, tmp_path / f"hf{next(exported)}", format="datasets", select=select)
        sites = {s["name"] for s in run.manifest["sites"]}
        return [name for name in (out / "dataset_info.json").read_text().split('"') if name in sites]

    return {
        "probe": lambda s: list(hookscope.probe(run, labels, select=s)),
        "StoreDataset": lambda s: [c.site for c in hookscope.StoreDataset(run.path, s).columns],
        "StoreStream": lambda s: [c.site for c in hookscope.StoreStream(run, s).data.columns],
        "export": export,
        "compare.cka": lambda s: list(hookscope.compare.cka(run, other, select=s).rows),
    }


def test_every_reader_of_a_store_selects_as_one(tmp_path: Path) -> None:
    run = hookscope.extract(TinyLM(), token_batches(2, rows=4), out=tmp_path / "a.hookscope", progress=False)
    for reader, read in _readers(run, tmp_path).items():
        assert read("re:m.p") == ["mlp"], reader
        assert read(nn.Linear) == ["mlp"], reader
        assert read(["mlp", "e*"]) == ["embed", "mlp"], reader
        for wrong in ("mpl", ["mlp", "mpl"], ":blocks"):
            with pytest.raises(SelectionError, match=r"matched no site|needs the model"):
                read(wrong)


EXPERT_SITES = {"l0.mlp.gate": "TopKRouter", "l0.mlp.experts": "Experts", "l0.mlp.experts.0": "Expert",
                "l0.mlp.experts.1": "Expert", "l1.mlp.experts": "Experts", "l1.mlp.experts.0": "Expert"}  # fmt: skip


@pytest.mark.parametrize(
    ("select", "picked"),
    [
        (":experts", ["l0.mlp.experts.0", "l0.mlp.experts.1", "l1.mlp.experts.0"]),
        ("l1.*:experts", ["l1.mlp.experts.0"]),  # below the modules the glob names
        ("l0.mlp.experts:experts", ["l0.mlp.experts.0", "l0.mlp.experts.1"]),
        (
            ["l1.mlp.experts", ":experts"],
            ["l0.mlp.experts.0", "l0.mlp.experts.1", "l1.mlp.experts", "l1.mlp.experts.0"],
        ),
    ],
)
def test_experts_picks_the_sites_of_single_experts(select: Any, picked: list[str]) -> None:
    assert select_sites(EXPERT_SITES, select, source="the store s") == picked


def test_experts_on_a_store_without_expert_sites_says_what_it_looks_for() -> None:
    with pytest.raises(SelectionError, match=r"':experts' matched no expert site of the store s: none of its 4 sites"):
        select_sites(SITES, ":experts", source="the store s")
    with pytest.raises(SelectionError, match=r"'l2\*:experts' matched no expert site .* below 'l2\*'"):
        select_sites(EXPERT_SITES, "l2*:experts", source="the store s")


def test_a_saved_capture_of_experts_selects_as_the_capture_did(tmp_path: Path) -> None:
    """Oracle: the sites a capture of ``":experts"`` (and of one layer's) kept per expert on a Qwen3-MoE."""
    from hookscope.store.reader import selected_sites
    from tests.test_families import built, qwen3_moe

    model, ids = built(qwen3_moe), torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), hookscope.capture(model, ":experts") as cap:
        model(ids)
    with torch.no_grad(), hookscope.capture(model, "model.layers.1:experts") as one:
        model(ids)
    hookscope.save(cap, tmp_path / "moe.hookscope")
    run = hookscope.load(tmp_path / "moe.hookscope")
    experts = [name for name, record in cap.items() if record.type == "Expert"]
    assert len(experts) == 8  # 2 layers x 4 experts
    assert selected_sites(run, ":experts") == selected_sites(cap, ":experts") == experts
    assert selected_sites(run, "model.layers.1:experts") == [n for n, r in one.items() if r.type == "Expert"]
    assert selected_sites(run, "model.layers.1:experts") == [e for e in experts if e.startswith("model.layers.1.")]
