"""``tfbneck watch``: step 1 of the method (watch the system) for any running process.

``monitor`` (the command: samples, the triage line, its record), ``panel`` (the live
terminal panel), ``capture`` (from the system view to a trace, through the process's
profiler server). No TensorFlow here.
"""
