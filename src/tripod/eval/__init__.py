"""Evaluation: success rates on held-out games with confidence intervals."""
