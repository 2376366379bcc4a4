"""The packaged MiniLM fixtures, shared with the transformer tests."""

from tests.transformer.conftest import _minilm_loaded, minilm, minilm_dir, minilm_tokenizer  # noqa: F401
