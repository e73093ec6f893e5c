"""The book's data: the corpora its small and medium configs train on, the full datasets' file layouts, and the
manifests whose content hash keys every stored feature built from a dataset.

Not part of the library (``lib``): a researcher brings their own data. See book/design.md, "Three parts".
"""
