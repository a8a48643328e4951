"""The analysis of one session: from an XSpace to a verdict. Pure numpy, no TensorFlow."""
