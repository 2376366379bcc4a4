"""Training-time diagnostics: watch statistics while a model trains, and find the first non-finite value where it is born."""
