"""Text on the command line: minilm and hf:PATH models, sentences and .txt files, one-line errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hookscope.cli import main
from hookscope.cli.text_inputs import read_texts
from hookscope.errors import InputError
from tests.transformer.conftest import minilm_dir  # noqa: F401  (the fixture)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_text_specs(tmp_path: Path) -> None:
    lines = tmp_path / "lines.txt"
    lines.write_text("First line.\n\n  Second line.  \n", encoding="utf-8")
    assert read_texts(["The cat sat."]) == ["The cat sat."]
    several = read_texts([str(lines), "A sentence.txt here"])
    assert several == ["First line.", "Second line.", "A sentence.txt here"]
    with pytest.raises(InputError, match=r"text file 'missing.txt' does not exist; quote a sentence"):
        read_texts(["missing.txt"])
    (tmp_path / "empty.txt").write_text("\n \n", encoding="utf-8")
    with pytest.raises(InputError, match="holds no text"):
        read_texts([str(tmp_path / "empty.txt")])
    (tmp_path / "latin.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(InputError, match="is not UTF-8 text"):
        read_texts([str(tmp_path / "latin.txt")])
    with pytest.raises(InputError, match="no text given"):
        read_texts([])


def test_report_minilm_on_a_sentence(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "report"
    code, printed, err = run(capsys, "report", "minilm", "The cat sat on the mat.", "--select", "encoder.layer.*",
                             "--out", str(out))  # fmt: skip
    assert code == 0, err
    assert printed.strip() == str(out / "index.html")
    html = (out / "index.html").read_text(encoding="utf-8")
    assert html.count("attention.self</h3>") == 0 and html.count('class="card" id="att-') == 6
    assert "minilm on The cat sat on the mat." in html and "<li>[CLS]</li>" in html
    assert "Loading weights" not in err


@pytest.mark.parametrize(
    ("options", "named"),
    [(["--grads"], "--grads"), (["--cam", "gradcam"], "--cam"), (["--kinds", "output"], "--kinds"),
     (["--target", "3", "--top-k", "2"], "--target, --top-k"), (["--ablate", "encoder:zero"], "--ablate"),
     (["--size", "64"], "--size")],
)  # fmt: skip
def test_image_report_options_with_a_text_model_are_an_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, options: list[str], named: str
) -> None:
    out = tmp_path / "report"
    with pytest.raises(SystemExit) as exit_:
        main(["report", "minilm", "The cat sat.", *options, "--out", str(out)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"error: {named}: an option of the image report" in err, err
    assert "hookscope.token_attribution" in err.splitlines()[-1] and not out.exists()


def test_hf_folder_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path, minilm_dir: Path) -> None:  # noqa: F811
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=30522, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16)  # fmt: skip
    folder = tmp_path / "tiny-bert"
    transformers.BertModel(config).save_pretrained(folder)
    capsys.readouterr()  # its progress bar
    cases = [
        (str(tmp_path / "nowhere"), r"'hf:.*nowhere': '.*nowhere' does not exist; hf:PATH takes a folder"),
        (str(tmp_path), r"is not a Hugging Face model folder \(it has no config.json\)"),
        (str(folder), r"has no tokenizer \(tokenizer.json, tokenizer_config.json, vocab.txt, ...\); save it beside"),
    ]
    for path, message in cases:
        code, _, err = run(capsys, "report", f"hf:{path}", "hello", "--out", str(tmp_path / "r"))
        assert code == 1 and len(err.strip().splitlines()) == 1 and re.search(message, err), err
    transformers.AutoTokenizer.from_pretrained(str(minilm_dir)).save_pretrained(folder)
    code, _, err = run(capsys, "report", f"hf:{folder}", "hello world", "a second line", "--out", str(tmp_path / "r"))
    assert code == 0, err
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert "2 sequences" in page and "encoder.layer.0.attention.self" in page


def test_unknown_model_names_hf(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "report", "minilmm", "hi", "--out", str(tmp_path / "r"))
    assert code == 1 and "did you mean 'minilm'?" in err and "hf:PATH" in err


def test_list_minilm_on_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "list", "minilm", "--input", "Hello world")
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["encoder.layer.0"][1:] == ["BertLayer", "1,774,464", "(1,", "4,", "384)"]  # [CLS] hello world [SEP]
