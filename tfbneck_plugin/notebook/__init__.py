"""The diagnosis as self-contained HTML for notebooks (Jupyter, Colab, saved HTML).

``session`` (one session report: verdict card, breakdown chart, tf.data stages, fixes),
``ops`` (its top-ops table), ``fleet`` (the fleet report). No TensorFlow here.
"""
