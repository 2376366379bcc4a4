"""One self-contained HTML page: ``views`` (what the page shows, as plain data), ``build``
(a report of a model and an input), ``from_store`` (a report of a store, without the model),
``html`` (the page, rendered and written), ``templates/``. This file re-exports nothing.
"""
