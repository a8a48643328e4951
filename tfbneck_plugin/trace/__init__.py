"""The trace format and its primitives: the XSpace reader (``xspace``), the wire-format
decoder (``wire``, with the optional C scanner ``_wirescan``) and interval algebra
(``timeline``). Pure numpy and protobuf."""
