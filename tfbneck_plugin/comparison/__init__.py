"""``tfbneck compare``: two runs side by side, and whether a change made training faster.

``compare`` (the command and :func:`tfbneck_plugin.compare`), ``evidence`` (the timings a
comparison rests on and the test that fits them), ``changes`` (which recommended fix the
candidate shows, and what the baseline predicted for it), ``ops`` (the same at op level).
No TensorFlow here.
"""
