"""The packaged MiniLM fixtures of the transformer tests, for the token maps."""

from tests.transformer.conftest import _minilm_loaded, minilm, minilm_dir, minilm_tokenizer

__all__ = ["_minilm_loaded", "minilm", "minilm_dir", "minilm_tokenizer"]
