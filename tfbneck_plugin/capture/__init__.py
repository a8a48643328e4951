"""The capture side: what runs inside the training process, and the only subpackage that
imports TensorFlow (``callback``, ``window``; ``background`` only to write scalars).
``tracker`` (step counting), ``schedule`` and ``sampler`` need no TensorFlow."""
