"""The capture side: what runs inside the training process. The only subpackage that
imports TensorFlow (``callback``); ``schedule`` and ``sampler`` do not."""
