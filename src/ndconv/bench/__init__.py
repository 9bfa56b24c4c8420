"""The benchmark: model-derived suites, the PyTorch baseline, timing, the roofline and reports."""
