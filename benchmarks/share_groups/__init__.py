"""Share groups (KIP-932) on a skewed load: ``python -m benchmarks.share_groups``."""
