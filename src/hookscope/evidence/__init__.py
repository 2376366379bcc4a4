"""Evidence bundles: a folder an assistant (or a person) reads to debug one wrong prediction or one training alert.

``bundle.py`` reads and validates a bundle against the JSON Schemas shipped in ``schemas/``
(``hookscope.evidence.prediction.v1``, ``hookscope.evidence.alert.v1``); ``prediction.py`` writes the
wrong-prediction bundle (``hookscope.explain_prediction``), ``facts.py`` gathers its numbers; ``result.py``
holds ``Evidence``, a bundle read back; ``views.py`` its faces and its section of a report page. The alert
bundle is written by the training room (``hookscope.train.alert_bundle``), which sits below this one.
"""
