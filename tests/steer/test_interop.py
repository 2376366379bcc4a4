"""Directions to and from steering-vectors' SteeringVector, repeng's ControlVector and a plain safetensors file."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from hookscope import Direction, Directions
from hookscope.errors import OptionError, OutputExistsError, StoreError


def found() -> Directions:
    g = torch.Generator().manual_seed(0)
    units = torch.nn.functional.normalize(torch.randn(2, 16, generator=g, dtype=torch.float64), dim=1)
    sites = {f"transformer.h.{i}": j for j, i in enumerate((3, 5))}
    made = {site: Direction(site, "pca", units[j], 2.5 + j, 0.9, (30, 10), 20) for site, j in sites.items()}
    return Directions(made, {"store": "/s.hookscope", "method": "pca", "seed": 0})


def test_to_and_from_steering_vectors_steer_as_it_does() -> None:
    from steering_vectors import SteeringVector

    ours = found()
    theirs = ours.to_steering_vector()
    assert isinstance(theirs, SteeringVector) and sorted(theirs.layer_activations) == [3, 5]
    torch.testing.assert_close(theirs.layer_activations[5], ours["transformer.h.5"].vector.float())
    back = Directions.from_steering_vector(theirs, site="transformer.h.{}")
    assert list(back) == list(ours) and back["transformer.h.3"].method == "steering_vectors"
    for site in ours:
        torch.testing.assert_close(back[site].vector, ours[site].vector, rtol=0, atol=1e-6)
        assert back[site].norm == pytest.approx(ours[site].norm, rel=1e-6)


def test_to_and_from_repeng_control_vector() -> None:
    np.float_ = np.float64  # type: ignore[attr-defined]  # repeng 0.4 names numpy.float_, which numpy 2 removed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its own imports' deprecation warnings
        from repeng import ControlVector

    ours = found()
    theirs = ours.to_control_vector("gpt2")
    assert isinstance(theirs, ControlVector) and theirs.model_type == "gpt2"
    assert theirs.directions[3].dtype == np.float32 and sorted(theirs.directions) == [3, 5]
    doubled = 2 * theirs  # repeng's own arithmetic on what we gave it
    back = Directions.from_control_vector(doubled, site="transformer.h.{}")
    for site in ours:
        torch.testing.assert_close(back[site].vector, 2 * ours[site].vector, rtol=0, atol=1e-6)


def test_safetensors_round_trip_keeps_norms_scores_and_provenance(tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    ours = found()
    path = ours.save(tmp_path / "d.safetensors")
    plain = load_file(path)  # a plain file: one tensor per site
    torch.testing.assert_close(plain["transformer.h.3"], ours["transformer.h.3"].vector, rtol=0, atol=0)
    back = Directions.read(path)
    assert back.provenance == ours.provenance and list(back) == list(ours)
    for site in ours:
        torch.testing.assert_close(back[site].unit, ours[site].unit, rtol=0, atol=1e-15)
        assert (back[site].norm, back[site].auc, back[site].examples) == (ours[site].norm, 0.9, (30, 10))
    with pytest.raises(OutputExistsError, match="already exists"):
        ours.save(path)
    save_file({"fc1": torch.full((4,), 0.5)}, str(tmp_path / "other.safetensors"))  # written by anyone
    other = Directions.read(tmp_path / "other.safetensors")["fc1"]
    assert other.method == "safetensors" and other.norm == 1.0 and math.isnan(other.auc)


def test_conversions_refuse_what_they_cannot_name() -> None:
    unnumbered = Directions({"fc": Direction("fc", "pca", torch.ones(2) / 2**0.5, 1.0)})
    with pytest.raises(OptionError, match="does not end with a block number"):
        unnumbered.to_steering_vector()
    with pytest.raises(OptionError, match="with \\{\\} for the index"):
        Directions.from_steering_vector(found().to_steering_vector(), site="transformer.h")
    zero = type("V", (), {"directions": {0: np.zeros(3)}, "model_type": "x"})()
    with pytest.raises(StoreError, match="needs a nonzero finite vector"):
        Directions.from_control_vector(zero, site="h.{}")


def test_a_vector_steers_the_same_through_steering_vectors_and_edits_add() -> None:
    """Block 1 of steering-vectors is hookscope's site ``transformer.h.1``: the same logits either way."""
    import transformers

    from hookscope import edit, edits

    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=16, vocab_size=30,
                                     bos_token_id=0, eos_token_id=0)  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    vector = torch.randn(16, generator=torch.Generator().manual_seed(1))
    ours = Directions({"transformer.h.1": Direction("transformer.h.1", "pca", vector.double() / vector.norm(),
                                                    float(vector.norm()))})  # fmt: skip
    ids = torch.arange(8)[None]
    with torch.no_grad():
        plain = model(ids).logits
        with ours.to_steering_vector().apply(model, multiplier=3.0):
            theirs = model(ids).logits
        with edit(model, {"transformer.h.1": edits.add(3.0 * ours["transformer.h.1"].vector.float())}):
            steered = model(ids).logits
    assert not torch.allclose(theirs, plain, atol=1e-3)
    torch.testing.assert_close(steered, theirs, rtol=0, atol=1e-5)


def test_steer_sweep_takes_directions_by_site() -> None:
    """``steer_sweep`` reads ``Directions.vector(site)``: the same propensities as the plain tensor."""
    import transformers

    import hookscope

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=16, vocab_size=30,
                                     bos_token_id=0, eos_token_id=0)  # fmt: skip
    model = transformers.GPT2LMHeadModel(config).eval()
    w = model.lm_head.weight.detach()
    vector = (w[7] - w[9]).double()
    found = Directions({"transformer.h.1": Direction("transformer.h.1", "pca", vector / vector.norm(),
                                                     float(vector.norm()))})  # fmt: skip
    prompts = torch.randint(1, 30, (4, 5), generator=torch.Generator().manual_seed(0))
    options = {"select": "transformer.h.1", "completions": (7, 9), "scales": (-1.0, 0.0, 1.0)}
    ours = hookscope.steer_sweep(model, prompts, found, **options)
    plain = hookscope.steer_sweep(model, prompts, vector.float(), **options)
    torch.testing.assert_close(ours.propensity, plain.propensity, rtol=0, atol=1e-6)
    assert ours.steerability > 0
    with pytest.raises(OptionError, match=r"has none for 'transformer\.h\.0'"):
        hookscope.steer_sweep(model, prompts, found, **{**options, "select": "transformer.h.0"})
