"""The version of hookscope, in a module of its own so that any module can import it at the top."""

__version__ = "0.1.0"
