"""``tfbneck``, the command line: ``main`` (the parser and the ``analyze``, ``compare`` and
``fleet`` commands; ``python -m tfbneck_plugin.cli`` runs it), ``trigger`` (``tfbneck
trigger``). ``tfbneck watch``'s own options live with it (:mod:`tfbneck_plugin.watch.monitor`).
"""
