"""The report's text renderings: ``report`` (the JSON contract's wrapper and its table, CSV
and Markdown), ``op_table`` (``tfbneck analyze --ops``), ``console`` (writing them to a
standard output that may be closed, full or narrow). No TensorFlow here.
"""
