"""Is the map faithful? Deletion, insertion, ROAD and confidence change for any saliency map.

``hookscope.faithfulness(model, x, maps, target=...)`` (``measure``) perturbs the input where a
map says it matters and measures what the model's score does, beside a random control (and, for
images, an edge detector's map). ``perturb`` holds the maths of deletion and insertion, ``road`` the
noisy linear imputation of ROAD, ``result`` the ``Faithfulness`` result and ``views`` its table,
picture, notebook view and report section. This file re-exports nothing.
"""
