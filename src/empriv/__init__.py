"""empriv: a lab for the empirical privacy of differentially private fine-tuning of language models."""

__version__ = "0.1.0"
