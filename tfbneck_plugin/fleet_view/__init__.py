"""The fleet view: many runs at once (``tfbneck fleet``, :func:`tfbneck_plugin.fleet`).

``report`` (where the time of many runs goes and which fix recovers most), ``render`` (its
table, Markdown, CSV and JSON), ``beam`` (the same analysis as an Apache Beam pipeline,
``tfbneck analyze --runner beam``). No TensorFlow here.
"""
