"""The LeNet chapter's workload (placeholder while the package is built)."""
