"""Benchmarks of the eTR+ lakehouse: ratios measured side by side in one run (`python -m bench --help`).

Not shipped in the wheel (pyproject's package discovery includes `etr_assets*` only); importable from the repo root.
"""
