"""export(source, out, *, format, ...): every writer's options are keyword-only parameters of export itself,
and an option the chosen format does not take is an OptionError naming the ones it takes."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from torch import nn

import hookscope
from hookscope.exports.dispatch import FORMATS, OPTIONS


def test_every_writer_option_is_a_keyword_only_parameter_of_export() -> None:
    params = inspect.signature(hookscope.export).parameters
    assert all(p.kind is not p.VAR_KEYWORD for p in params.values())  # no **options hiding them
    for format, writer in FORMATS.items():
        own = [n for n, p in inspect.signature(writer).parameters.items() if p.kind is p.KEYWORD_ONLY]
        assert own == ["force", *OPTIONS[format]], format
        for name in own:
            assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
            default = inspect.signature(writer).parameters[name].default
            assert params[name].default == default, f"export({name}=) defaults as the {format} writer does"
        doc = inspect.getdoc(hookscope.export) or ""
        assert all(f"\n    {name}: " in doc for name in OPTIONS[format]), (
            f"export's docstring documents {format}'s options"
        )


def test_an_option_of_another_format_is_an_option_error(tmp_path: Path) -> None:
    model = nn.Linear(3, 2)
    store = hookscope.extract(model, [torch.randn(4, 3)], out=tmp_path / "s", progress=False)
    graph = hookscope.module_graph(model, torch.randn(1, 3))
    with pytest.raises(hookscope.OptionError, match=r"format='datasets' takes select=, kind=, key=, shard_size=, "
                                                     r"progress=; got graph=, column="):  # fmt: skip
        hookscope.export(store, tmp_path / "hf", format="datasets", graph=graph, column="mean")
    with pytest.raises(hookscope.OptionError, match=r"format='model-explorer' takes graph=, model=, x=, column=; "
                                                     r"got select=, shard_size="):  # fmt: skip
        hookscope.export({"": 1.0}, tmp_path / "nd.json", format="model-explorer", select="0", shard_size=10)
    assert not (tmp_path / "hf").exists() and not (tmp_path / "nd.json").exists()
