"""Token attributions on the packaged MiniLM: the sentence similarity they explain, completeness,
Captum's LayerIntegratedGradients, autograd through ``inputs_embeds``, word pieces merged, HTML escaped."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import hookscope
from hookscope.base.display import html_of
from hookscope.errors import OptionError, ShapeError, TargetError
from hookscope.transformer.word_pieces import merge_words
from hookscope.viz.highlight import token_html

PAIR = ["A man is playing a guitar.", "Someone plays an acoustic guitar."]
UNRELATED = "The stock market fell sharply today."


def _embedding(output: Any, mask: torch.Tensor) -> torch.Tensor:
    """Mean-pooled sentence embeddings, padding left out, as sentence-transformers pools them."""
    weights = mask[..., None].to(output.last_hidden_state)
    return (output.last_hidden_state * weights).sum(1) / weights.sum(1)


def _similarity(mask: torch.Tensor) -> Any:
    def similarity(output: Any) -> torch.Tensor:
        pooled = _embedding(output, mask)
        return F.cosine_similarity(pooled[0], pooled[1], dim=0)

    return similarity


@pytest.fixture
def pair(minilm: Any, minilm_tokenizer: Any) -> tuple[Any, Any]:
    """The MiniLM in float64 and the two paraphrases, padded to one length."""
    return minilm.double(), minilm_tokenizer(PAIR, padding=True, return_tensors="pt")


def test_paraphrases_are_closer_than_unrelated_sentences(minilm: Any, minilm_tokenizer: Any) -> None:
    enc = minilm_tokenizer([*PAIR, UNRELATED], padding=True, return_tensors="pt")
    with torch.no_grad():
        pooled = F.normalize(_embedding(minilm(**enc), enc["attention_mask"]), dim=1)
    close, far = float(pooled[0] @ pooled[1]), float(pooled[0] @ pooled[2])
    assert close > 0.5 > far and close > far + 0.3


def test_completeness_delta_shrinks_with_steps(pair: tuple[Any, Any]) -> None:
    model, enc = pair
    scalar = _similarity(enc["attention_mask"])
    results = [hookscope.token_attribution(model, enc, scalar, steps=s) for s in (4, 16, 24)]
    gap = results[0].value - (results[0].baseline_value or 0.0)
    assert abs(gap) > 0.1  # the [PAD] baseline is far from the sentences: something to explain
    deltas = [abs(r.delta or 0.0) for r in results]
    assert deltas[0] > deltas[1] > deltas[2] and deltas[2] < 2e-2 * abs(gap)
    for r in results:
        assert r.delta == pytest.approx(float(r.attributions.sum()) - gap, abs=1e-12)
        assert sum(float(s.sum()) for s in r.scores) == pytest.approx(float(r.attributions.sum()), abs=1e-12)
    assert results[-1].tokens[0][0] == "[CLS]" and float(results[-1].scores[0][0]) == 0.0  # kept in the baseline
    assert hookscope.find_hooks(model) == []


def test_equals_captum_layer_integrated_gradients(pair: tuple[Any, Any]) -> None:
    captum = pytest.importorskip("captum.attr")
    model, enc = pair
    mask = enc["attention_mask"]
    ours = hookscope.token_attribution(model, enc, _similarity(mask), steps=8)
    ids, types = enc["input_ids"], enc["token_type_ids"]
    length = ids.shape[1]
    special = torch.isin(ids, torch.tensor([101, 102, 0]))  # [CLS], [SEP], [PAD] stay in the baseline
    base = torch.where(special, ids, torch.zeros_like(ids))

    def forward(flat_ids: torch.Tensor, flat_mask: torch.Tensor, flat_types: torch.Tensor) -> torch.Tensor:
        """Captum stacks each step's pair as one row of 2 * T ids: split it back into two sentences."""
        rows = flat_ids.reshape(-1, length), flat_mask.reshape(-1, length), flat_types.reshape(-1, length)
        pooled = _embedding(model(input_ids=rows[0], attention_mask=rows[1], token_type_ids=rows[2]), rows[1])
        return F.cosine_similarity(pooled[0::2], pooled[1::2], dim=1)  # one similarity per step

    lig = captum.LayerIntegratedGradients(forward, model.embeddings.word_embeddings)
    attr = lig.attribute(  # its convergence delta expects attributions shaped like the (1, 2T) ids: not asked
        ids.reshape(1, -1),
        baselines=base.reshape(1, -1),
        additional_forward_args=(mask.reshape(1, -1), types.reshape(1, -1)),
        n_steps=8,
        method="gausslegendre",
    )
    theirs = attr.reshape(*ids.shape, -1).sum(-1)  # (2, T)
    # Captum casts the quadrature weights to float32 (torch.tensor(step_sizes).float()): ~6e-8 relative
    torch.testing.assert_close(ours.attributions, theirs, rtol=2e-7, atol=1e-9)


def test_input_x_gradient_equals_autograd_through_inputs_embeds(pair: tuple[Any, Any]) -> None:
    model, enc = pair
    mask = enc["attention_mask"]
    ours = hookscope.token_attribution(model, enc, _similarity(mask), method="input_x_gradient")
    embeds = model.get_input_embeddings()(enc["input_ids"]).detach().requires_grad_(True)
    value = _similarity(mask)(model(inputs_embeds=embeds, attention_mask=mask, token_type_ids=enc["token_type_ids"]))
    (grad,) = torch.autograd.grad(value, embeds)
    torch.testing.assert_close(ours.attributions, (embeds * grad).sum(-1).detach(), rtol=1e-10, atol=1e-13)
    assert ours.delta is None and ours.value == pytest.approx(float(value.detach()), abs=1e-12)


def test_rows_keep_the_other_texts_as_they_are(pair: tuple[Any, Any]) -> None:
    model, enc = pair
    mask = enc["attention_mask"]
    one = hookscope.token_attribution(model, enc, _similarity(mask), steps=2, rows=[0])
    assert bool((one.attributions[1] == 0).all()) and bool((one.attributions[0] != 0).any())
    with torch.no_grad():  # the baseline: text 0 all [PAD] but [CLS] and [SEP], text 1 itself
        ids = enc["input_ids"].clone()
        ids[0, 1 : int(mask[0].sum()) - 1] = 0
        blank = _similarity(mask)(model(input_ids=ids, attention_mask=mask, token_type_ids=enc["token_type_ids"]))
    assert one.baseline_value == pytest.approx(float(blank), abs=1e-12)
    with pytest.raises(OptionError, match=r"rows=\[5\] must be indices of the 2 input rows"):
        hookscope.token_attribution(model, enc, _similarity(mask), steps=1, rows=[5])


def test_word_pieces_merge_into_their_word(minilm: Any, minilm_tokenizer: Any) -> None:
    enc = minilm_tokenizer(["unbelievably good tokenization", "fine"], padding=True, return_tensors="pt")
    mask = enc["attention_mask"]
    result = hookscope.token_attribution(minilm, enc, _similarity(mask), method="input_x_gradient")
    tokens, scores = result.tokens[0], result.scores[0]
    assert tokens[:6] == ["[CLS]", "un", "##bel", "##ie", "##va", "##bly"]
    assert result.words[0] == ["[CLS]", "unbelievably", "good", "tokenization", "[SEP]"]
    torch.testing.assert_close(result.word_scores[0][1], scores[1:6].sum())
    torch.testing.assert_close(result.word_scores[0][3], scores[7:9].sum())
    assert result.tokens[1] == ["[CLS]", "fine", "[SEP]"]  # padding left out
    by_pieces = merge_words(tokens, scores)  # the ## rule, for a slow tokenizer, agrees with word_ids()
    assert by_pieces[0] == result.words[0]
    torch.testing.assert_close(by_pieces[1], result.word_scores[0])


def test_hostile_tokens_are_escaped() -> None:
    hostile = ['<script>alert("x")</script>', "<img src=x onerror=alert(1)>", "a&b", '" onmouseover="x']
    page = token_html(hostile, torch.tensor([1.0, -0.5, 0.0, float("nan")]))
    assert "<script" not in page and "<img" not in page and 'onmouseover="x' not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page and "a&amp;b" in page
    assert page.count("<span") == 4 and "rgba(178,24,43,0.850)" in page and "rgba(33,102,172,0.425)" in page
    with pytest.raises(ShapeError, match="got 4 tokens but 1 scores"):
        token_html(hostile, [1.0])


def test_the_result_shows_itself_escaped() -> None:
    ids = torch.tensor([[3, 1, 2]])
    embed = torch.nn.Embedding(4, 2)
    model = torch.nn.Sequential(embed, torch.nn.Flatten(), torch.nn.Linear(6, 1))
    tok = type("Tok", (), {"convert_ids_to_tokens": lambda self, ids: ["<b>", "x", "##y"][: len(ids)]})()
    result = hookscope.token_attribution(
        model, ids, lambda out: out.sum(), baseline="zeros", tokenizer=tok, embeddings=embed, steps=8
    )
    assert result.words == [["<b>", "xy"]]
    page = html_of(result)
    assert page is not None and "&lt;b&gt;" in page and "<b>" not in page and "<script" not in page
    assert result.delta is not None and abs(result.delta) < 1e-5  # a linear model: integrated gradients are exact


def test_options_are_checked(pair: tuple[Any, Any]) -> None:
    model, enc = pair
    scalar = _similarity(enc["attention_mask"])
    with pytest.raises(OptionError, match="method='shap' is not a token attribution method"):
        hookscope.token_attribution(model, enc, scalar, method="shap")  # type: ignore[arg-type]
    with pytest.raises(TargetError, match=r"returned shape \(2, 9, 384\); return \(2,\), one value per row, or \(\)"):
        hookscope.token_attribution(model, enc, lambda out: out.last_hidden_state, steps=1)
    with pytest.raises(OptionError, match="has no get_input_embeddings"):
        hookscope.token_attribution(torch.nn.Linear(2, 2), torch.zeros(1, 2), lambda out: out.sum())


def _toy() -> tuple[torch.nn.Embedding, torch.nn.Module, torch.nn.Module]:
    """A float64 token classifier: embedding (10 ids, 3 wide), then tanh and a linear head over 4 tokens."""
    torch.manual_seed(0)
    embed = torch.nn.Embedding(10, 3).double()
    rest = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Tanh(), torch.nn.Linear(12, 5)).double()
    return embed, rest, torch.nn.Sequential(embed, rest)


def test_integrated_gradients_are_attributes_own() -> None:
    embed, rest, model = _toy()
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    ours = hookscope.token_attribution(model, ids, 2, baseline="zeros", embeddings=embed, steps=8)
    with torch.no_grad():
        x = embed(ids)
    attr, delta = hookscope.attribute(rest, x, "integrated_gradients", 2, steps=8, return_delta=True)
    torch.testing.assert_close(ours.attributions, attr.sum(-1), rtol=1e-12, atol=1e-14)
    assert ours.delta == pytest.approx(float(delta.sum()), abs=1e-12)
    with torch.no_grad():
        assert ours.value == pytest.approx(float(rest(x)[:, 2].sum()), abs=1e-12)  # per-row targets: their sum
        assert ours.baseline_value == pytest.approx(float(rest(torch.zeros_like(x))[:, 2].sum()), abs=1e-12)
    gradient = hookscope.token_attribution(model, ids, 2, method="input_x_gradient", embeddings=embed)
    expected = hookscope.attribute(rest, x, "input_x_gradient", 2)
    torch.testing.assert_close(gradient.attributions, expected.sum(-1), rtol=1e-12, atol=1e-14)


def test_a_per_row_target_is_the_sum_of_class_targets() -> None:
    embed, _, model = _toy()
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    by_class = hookscope.token_attribution(model, ids, [1, 3], baseline="zeros", embeddings=embed, steps=4)
    by_rows = hookscope.token_attribution(
        model,
        ids,
        lambda out: out.gather(1, torch.tensor([[1], [3]]))[:, 0],
        baseline="zeros",
        embeddings=embed,
        steps=4,
    )
    torch.testing.assert_close(by_class.attributions, by_rows.attributions, rtol=0, atol=0)


def test_old_spellings_warn_and_work() -> None:
    embed, _, model = _toy()
    ids = torch.tensor([[1, 2, 3, 4]])
    new = hookscope.token_attribution(model, ids, lambda out: out[0, 0], baseline="zeros", embeddings=embed, steps=4)
    with pytest.warns(DeprecationWarning, match=r"method='ig'\) is deprecated.*method='integrated_gradients'"):
        old = hookscope.token_attribution(
            model,
            ids,
            lambda out: out[0, 0],
            method="ig",
            baseline="zeros",
            embeddings=embed,
            steps=4,  # type: ignore[arg-type]
        )
    with pytest.warns(DeprecationWarning, match=r"token_attribution\(scalar_fn=...\) is deprecated.*\(target=...\)"):
        named = hookscope.token_attribution(
            model, ids, scalar_fn=lambda out: out[0, 0], baseline="zeros", embeddings=embed, steps=4
        )
    assert old.method == named.method == new.method == "integrated_gradients"
    with pytest.warns(DeprecationWarning, match="is deprecated") as said:  # each names the line that used it
        hookscope.token_attribution(
            model, ids, scalar_fn=lambda out: out[0, 0], method="ig", baseline="zeros", embeddings=embed, steps=1
        )  # type: ignore[arg-type]
    assert [w.filename for w in said] == [__file__, __file__]
    assert torch.equal(old.attributions, new.attributions) and torch.equal(named.attributions, new.attributions)


def test_table_plot_and_text() -> None:
    embed, rest, _ = _toy()

    class Classifier(torch.nn.Module):  # takes a tokenizer's batch as keywords
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.rest = embed, rest

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.rest(self.embed(input_ids))  # type: ignore[no-any-return]

    model = Classifier()

    class Tok:
        pad_token, eos_token, pad_token_id, all_special_ids = "<pad>", "<pad>", 0, [0]

        def __call__(self, texts: list[str], **options: Any) -> dict[str, torch.Tensor]:
            return {"input_ids": torch.tensor([[int(c) for c in text] for text in texts])}

        def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
            return [f"w{i}" for i in ids]

    result = hookscope.token_attribution(model, ["1234", "5678"], 4, tokenizer=Tok(), embeddings=embed, steps=4)
    assert result.tokens == [["w1", "w2", "w3", "w4"], ["w5", "w6", "w7", "w8"]]
    lines = result.table().splitlines()
    assert lines[0].split() == ["row", "token", "text", "score"] and len(lines) == 1 + 8 + 1
    assert lines[6].split() == ["1", "1", "w6", f"{float(result.scores[1][1]):+.4g}"]
    assert lines[-1].startswith("integrated gradients: f(x) = ") and "steps, delta = " in lines[-1]
    image = result.plot()
    assert image.mode == "RGB" and image.width == 720
    words = torch.cat(result.word_scores)
    end = (178, 24, 43) if float(words[words.abs().argmax()]) > 0 else (33, 102, 172)  # the largest |score|
    full = tuple(round(255 + (c - 255) * 0.85) for c in end)  # at full strength over white, as the HTML shades it
    assert full in {tuple(int(c) for c in pixel) for pixel in np.asarray(image).reshape(-1, 3)}
    with pytest.raises(hookscope.InputError, match="text needs tokenizer="):
        hookscope.token_attribution(model, "1234", 4, embeddings=embed)


def test_output_names_the_tensor_a_class_target_reads() -> None:
    embed, rest, _ = _toy()

    class Structured(torch.nn.Module):  # {"hidden": ..., "logits": ...}: the logits are not the first tensor
        def __init__(self) -> None:
            super().__init__()
            self.embed, self.rest = embed, rest

        def forward(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
            hidden = self.embed(ids)
            return {"hidden": hidden, "logits": self.rest(hidden)}

    model, ids = Structured(), torch.tensor([[1, 2, 3, 4]])
    by_hand = hookscope.token_attribution(model, ids, lambda out: out["logits"][:, 3], baseline="zeros", steps=4,
                                          embeddings=embed)  # fmt: skip
    by_class = hookscope.token_attribution(model, ids, 3, output="logits", baseline="zeros", steps=4, embeddings=embed)
    torch.testing.assert_close(by_class.attributions, by_hand.attributions, rtol=0, atol=0)
    assert by_class.value == by_hand.value
