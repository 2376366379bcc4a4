"""Compare representations: how alike two models' (or one model's) layers are, and where two models part.

``hookscope.compare.cka(model_a, model_b, loader)`` gives a ``Similarity`` (linear CKA or RSA,
layers x layers, streamed over a loader or two stores); ``hookscope.compare.divergence(model_a,
model_b, x)`` a ``Divergence`` (per site: relative error, cosine, max |difference| and where).
Beside them: ``hookscope.compare.hsic`` and ``.rdm`` (the maths), ``.sources`` (models and stores
batch by batch), ``.similarity``, ``.numerics`` (``divergence``) and ``.views`` (tables, pictures, notebook views).
"""

from __future__ import annotations

from . import views  # noqa: F401  (registers the tables, pictures and notebook views of the results)
from .numerics import Divergence, Site, divergence
from .similarity import Similarity, cka

__all__ = ["Divergence", "Similarity", "Site", "cka", "divergence"]
