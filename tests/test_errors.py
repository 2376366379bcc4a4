"""One error tree: a user's mistake in any public function is the one hookscope class for that mistake.

Each case makes the mistake through the public API (``hookscope.__all__``) on a tiny model and
checks the exact class, and for a wrong name that the message names the closest right one. The
oracle is the mistake itself: the name is misspelled by one letter, so the right name is known.
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hookscope
import hookscope.errors
from hookscope.graph.overlay import overlay_of
from hookscope.zoo import lenet

D = torch.float64
ERRORS = [c for c in vars(hookscope.errors).values() if inspect.isclass(c) and c.__module__ == "hookscope.errors"]


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    layers = OrderedDict(fc1=nn.Linear(4, 6), act=nn.ReLU(), fc2=nn.Linear(6, 3))
    return nn.Sequential(layers).to(D)


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> tuple[nn.Module, Any, Path]:
    """A watch of 4 steps, logged every 2 (steps 0 and 2), written to a store."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tmp_path_factory.mktemp("watch") / "run.hookscope"
    with hookscope.watch(model, opt, every=2, out=out) as w:
        for _ in range(4):
            loss = F.mse_loss(model(torch.randn(5, 4, dtype=D)), torch.zeros(5, 3, dtype=D))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, w, out


@pytest.fixture(scope="module")
def sweep() -> Any:
    model = mlp().eval()
    clean, corrupt = torch.randn(2, 4, dtype=D), torch.randn(2, 4, dtype=D)
    return hookscope.patch_sweep(model, clean, corrupt, select=["fc1", "act"], target=lambda out: out[:, 0])


@pytest.fixture(scope="module")
def token_sweep() -> Any:
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh()).to(D).eval()
    clean, corrupt = torch.randn(1, 3, 4, dtype=D), torch.randn(1, 3, 4, dtype=D)
    return hookscope.patch_sweep(model, clean, corrupt, select="0", target=lambda out: out[:, -1].sum())


def captured() -> hookscope.Capture:
    model = mlp()
    with hookscope.capture(model, ["fc1", "fc2"]) as cap:
        model(torch.randn(2, 4, dtype=D))
    return cap


# -- the tree --------------------------------------------------------------------------------------
def test_every_error_and_warning_class_is_exported_from_hookscope() -> None:
    assert len(ERRORS) >= 20  # the tree: 18 errors and 5 warnings when this test was written
    for cls in ERRORS:
        assert cls.__name__ in hookscope.__all__, cls
        assert getattr(hookscope, cls.__name__) is cls
    exported = [getattr(hookscope, n) for n in hookscope.__all__]
    assert {c for c in exported if inspect.isclass(c) and issubclass(c, BaseException)} == set(ERRORS)


def test_every_warning_derives_from_hookscope_warning_and_every_error_from_hookscope_error() -> None:
    warning_classes = [c for c in ERRORS if issubclass(c, Warning)]
    assert {c.__name__ for c in warning_classes} >= {
        "CaptureWarning",
        "StoreWarning",
        "EditWarning",
        "NonFiniteWarning",
    }
    for cls in warning_classes:
        assert issubclass(cls, hookscope.HookscopeWarning) and issubclass(cls, UserWarning), cls
    for cls in set(ERRORS) - set(warning_classes):
        assert issubclass(cls, hookscope.HookscopeError), cls
    with warnings.catch_warnings():  # one filter silences every hookscope warning
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=hookscope.HookscopeWarning)
        for cls in warning_classes:
            warnings.warn("quiet", cls, stacklevel=1)


# -- wrong names: NotCapturedError, a KeyError, naming the closest name ----------------------------
def wrong_names(
    watched: tuple[nn.Module, Any, Path], sweep: Any, tmp_path: Path
) -> Iterator[tuple[str, Callable[[], Any], str]]:
    """(what, the mistake, the name the message must offer)."""
    _, w, out = watched
    cap = captured()
    run = hookscope.save(cap, tmp_path / "cap.hookscope")
    yield "capture site", lambda: cap["fc_1"], "'fc1'"
    yield "store site", lambda: run["fc_1"], "'fc1'"
    yield "watched module", lambda: w.history("fc_1"), "'fc1'"
    yield "store history", lambda: hookscope.load(out).history("fc_1"), "'fc1'"
    yield "history column", lambda: w.history("fc1")["grad_nrom"], "'grad_norm'"
    yield "sweep site", lambda: sweep.fraction("fc_1"), "'fc1'"


def test_a_wrong_name_is_not_captured_and_names_the_closest(
    watched: tuple[nn.Module, Any, Path], sweep: Any, tmp_path: Path
) -> None:
    cases = list(wrong_names(watched, sweep, tmp_path))
    assert len(cases) == 6
    for what, mistake, closest in cases:
        with pytest.raises(hookscope.NotCapturedError, match=f"closest: {closest}") as info:
            mistake()
        assert type(info.value) is hookscope.NotCapturedError, what
        assert isinstance(info.value, KeyError), what
        assert "\n" not in str(info.value), what  # one line


def test_a_step_that_was_not_logged_names_the_nearest_logged_steps(watched: tuple[nn.Module, Any, Path]) -> None:
    history = watched[1].history("fc1")
    assert history.steps == [0, 2]
    with pytest.raises(hookscope.NotCapturedError, match=r"step 1 was not logged for 'fc1' .*nearest: 0, 2\)"):
        history.row(1)
    with pytest.raises(KeyError, match=r"step 7 was not logged .*steps 0\.\.2; nearest: 2\)"):
        history.row(7)
    assert history.row(2)["step"] == 2.0


def test_a_token_site_needs_a_position_in_range(token_sweep: Any) -> None:
    assert token_sweep.fraction("0", 2) == pytest.approx(1.0, abs=1e-12)  # the last token carries the metric
    assert token_sweep.fraction("0", -3) == pytest.approx(0.0, abs=1e-12)  # the first, counted from the end
    with pytest.raises(hookscope.NotCapturedError, match=r"'0' was patched per position, got no position; .*0 to 2"):
        token_sweep.fraction("0")
    with pytest.raises(hookscope.NotCapturedError, match=r"got position=3; pass position= \(0 to 2\)"):
        token_sweep.fraction("0", 3)


def test_a_wrong_key_is_not_captured() -> None:
    cap = captured()
    assert cap["fc1"].calls[0].keys("output") == ["out"]
    with pytest.raises(hookscope.NotCapturedError, match=r"out\[1\]"):
        cap["fc1"].calls[0].get("output", "out[1]")
    model, x, y = mlp().eval(), torch.randn(2, 4, dtype=D), torch.randn(2, 4, dtype=D)
    with pytest.raises(hookscope.NotCapturedError, match=r"site 'fc1' returns out, not key='ot'; closest: 'out'"):
        hookscope.patch_sweep(model, x, y, select="fc1", target=lambda out: out.sum(), key="ot")


def test_an_unknown_split_of_the_digits_is_an_option_error() -> None:
    with pytest.raises(hookscope.OptionError, match=r"got 'tset'; closest: 'test'") as info:
        lenet.digits("tset")
    assert type(info.value) is hookscope.OptionError


# -- kinds: an unknown or unaccepted kind is an OptionError in every function -------------------------
def kind_mistakes(kinds: Any, tmp_path: Path) -> list[tuple[str, Callable[[], Any]]]:
    model, x = mlp(), torch.randn(2, 4, dtype=D)
    return [
        ("capture", lambda: hookscope.capture(model, "fc1", kinds=kinds)),
        ("extract", lambda: hookscope.extract(model, [x], out=tmp_path / "e", kinds=kinds, progress=False)),
        ("build_report", lambda: hookscope.build_report(model, x, kinds=kinds, grads=True)),
        ("show", lambda: hookscope.show(captured(), kinds=kinds)),
    ]


def test_a_misspelled_kind_is_an_option_error_with_the_closest_kind_everywhere(tmp_path: Path) -> None:
    for where, mistake in kind_mistakes(("outptu",), tmp_path):
        with pytest.raises(hookscope.OptionError, match=r"'outptu'.*closest: 'output'") as info:
            mistake()
        assert type(info.value) is hookscope.OptionError, where
    assert not (tmp_path / "e").exists()


def test_a_kind_a_function_does_not_take_is_an_option_error_without_a_false_hint(tmp_path: Path) -> None:
    for where, mistake in kind_mistakes(("param_grad",), tmp_path)[1:]:  # capture takes param_grad
        with pytest.raises(hookscope.OptionError, match=r"got 'param_grad'") as info:
            mistake()
        assert "closest" not in str(info.value), where


# -- an output that exists: OutputExistsError (a StoreError and a FileExistsError) ----------------------
def test_a_folder_holding_a_file_hookscope_did_not_write_is_refused_by_every_writer_even_with_force(
    tmp_path: Path,
) -> None:
    """One gate (base.files.new_output): force replaces only what hookscope wrote, so the user's kept.txt
    is named and nothing is touched; and the refusal does not offer force, which would not help."""
    model, x = mlp(), torch.randn(2, 4, dtype=D)
    report = hookscope.build_report(model, x)
    writers: list[tuple[str, Callable[[Path, bool], Any]]] = [
        ("save", lambda out, force: hookscope.save(captured(), out, force=force)),
        ("extract", lambda out, force: hookscope.extract(model, [x], out=out, select="fc1", progress=False,
                                                         force=force)),
        ("watch", lambda out, force: hookscope.watch(model, out=out, force=force).__enter__()),
        ("write_report", lambda out, force: hookscope.write_report(report, out, force=force)),
    ]  # fmt: skip
    for name, write in writers:
        out = tmp_path / name
        out.mkdir()
        (out / "kept.txt").write_text("mine")
        for force in (False, True):
            with pytest.raises(
                hookscope.OutputExistsError, match=r"holds 1 file hookscope did not write \(kept\.txt\)"
            ) as info:
                write(out, force)
            assert isinstance(info.value, hookscope.StoreError) and isinstance(info.value, FileExistsError), name
            assert "force" not in str(info.value), name  # force would not be allowed: not offered
            assert [p.name for p in out.iterdir()] == ["kept.txt"], name  # untouched
            assert (out / "kept.txt").read_bytes() == b"mine", name
    assert hookscope.find_hooks(model) == []


# -- other mistakes, one class each --------------------------------------------------------------
def test_text_without_a_tokenizer_is_an_input_error() -> None:
    for text in ("a cat", ["a cat", "a dog"]):
        with pytest.raises(hookscope.InputError, match="text needs tokenizer=") as info:
            hookscope.attention(nn.Linear(2, 2), text)
        assert type(info.value) is hookscope.InputError


def test_a_bad_option_of_patch_sweep_is_an_option_error() -> None:
    model, x, y = mlp().eval(), torch.randn(2, 4, dtype=D), torch.randn(2, 4, dtype=D)
    for copies in (0, 2.5, True):
        with pytest.raises(hookscope.OptionError, match=rf"batch_size= is the number .*got {copies!r}"):
            hookscope.patch_sweep(model, x, y, select="fc1", target=lambda out: out.sum(), batch_size=copies)  # type: ignore[arg-type]
    with pytest.raises(hookscope.OptionError, match=r"positions=True needs an output of shape \(B, T, \.\.\.\)"):
        hookscope.patch_sweep(model, x[0], y[0], select="fc1", target=lambda out: out.sum(), positions=True)
    two = (
        nn.Sequential(Pair()).to(D).eval()
    )  # returns (a (B, T) mean, the (B, T, D) input): not the hidden states first
    with pytest.raises(hookscope.OptionError, match=r"site '0' returns out\[0\], .*pass key= to name the one"):
        hookscope.patch_sweep(two, x[:, None], y[:, None], select="0", target=lambda out: out[1].sum())


class Pair(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.mean(-1), 2 * x


# -- two things compared that differ: MismatchError, never ModelError (which is "cannot load") ----------
def test_two_models_or_stores_that_differ_are_a_mismatch_error(tmp_path: Path) -> None:
    a, x = mlp(), torch.randn(4, 4, dtype=D)
    b = nn.Sequential(OrderedDict(fc1=nn.Linear(4, 6), act=nn.ReLU(), fc3=nn.Linear(6, 3))).to(D)
    with pytest.raises(hookscope.MismatchError, match=r"only in A 1 \('fc2'\); only in B 1 \('fc3'\)") as info:
        hookscope.compare.divergence(a, b, x)
    assert not isinstance(info.value, hookscope.ModelError) and isinstance(info.value, ValueError)
    wide = mlp()
    wide.fc2 = nn.Linear(6, 5).to(D)
    with pytest.raises(hookscope.MismatchError, match=r"'fc2' call 0 out: \(4, 3\) in A, \(4, 5\) in B"):
        hookscope.compare.divergence(a, wide, x)
    one = hookscope.extract(a, [x], out=tmp_path / "one", select="fc1", progress=False)
    two = hookscope.extract(a, [x, x], out=tmp_path / "two", select="fc1", progress=False)
    with pytest.raises(hookscope.MismatchError, match=r"the stores hold other batches \(1 batches 0\.\.0 and 2"):
        hookscope.compare.cka(one, two)
    assert hookscope.find_hooks(a) == []


# -- a source of the wrong kind: InputError in every function --------------------------------------
def test_a_source_of_the_wrong_kind_is_an_input_error_everywhere(tmp_path: Path) -> None:
    model, x = mlp(), torch.randn(4, 4, dtype=D)
    store = hookscope.extract(model, [x], out=tmp_path / "s", select="fc1", progress=False)
    mistakes: list[tuple[str, Callable[[], Any]]] = [
        ("cka", lambda: hookscope.compare.cka(store, model)),
        ("export datasets", lambda: hookscope.export(model, tmp_path / "hf", format="datasets")),
        ("overlay", lambda: overlay_of(42)),  # what export(format="model-explorer") reads
    ]
    for where, mistake in mistakes:
        with pytest.raises(hookscope.InputError) as info:
            mistake()
        assert type(info.value) is hookscope.InputError, where
    assert not (tmp_path / "hf").exists()


# -- what a store does not hold: NotCapturedError; a glob of its sites matching none: SelectionError ------
def test_what_a_store_does_not_hold_is_not_captured_everywhere(tmp_path: Path) -> None:
    model, x = mlp(), torch.randn(4, 4, dtype=D)
    store = hookscope.extract(model, [x], out=tmp_path / "s", select="fc1", progress=False)
    not_held: list[tuple[str, Callable[[], Any]]] = [
        ("dataset kind", lambda: hookscope.StoreDataset(store, "fc1", kind="grad_output")),
        ("training report", lambda: hookscope.build_training_report(store)),
        ("store site", lambda: store["fc2"]),
    ]
    for where, mistake in not_held:
        with pytest.raises(hookscope.NotCapturedError) as info:
            mistake()
        assert type(info.value) is hookscope.NotCapturedError, where
    no_match: list[tuple[str, Callable[[], Any]]] = [
        ("dataset select", lambda: hookscope.StoreDataset(store, "fc9*")),
        ("cka select", lambda: hookscope.compare.cka(store, store, select="fc9*")),
    ]
    for where, mistake in no_match:
        with pytest.raises(hookscope.SelectionError, match=r"fc9\*") as info:
            mistake()
        assert type(info.value) is hookscope.SelectionError, where


# -- a warning is silenced by its class, never by its text -------------------------------------------
def test_a_compiled_model_warns_a_compiled_warning_that_its_class_silences() -> None:
    model, x = torch.compile(mlp()), torch.randn(2, 4, dtype=D)  # runs eagerly in the block: nothing compiles
    note = r"'Sequential' is compiled; inside this capture"
    with pytest.warns(hookscope.CompiledWarning, match=note) as seen, hookscope.capture(model, "fc1"):
        model(x)
    assert [type(w.message) for w in seen] == [hookscope.CompiledWarning]
    assert issubclass(hookscope.CompiledWarning, hookscope.CaptureWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", hookscope.CompiledWarning)
        with hookscope.capture(model, "fc1"):
            model(x)
    source = Path(hookscope.__file__).parent
    for path in source.rglob("*.py"):  # no filter of hookscope's own matches a message's text
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"filterwarnings\(\s*\"ignore\",\s*\"", text), path
