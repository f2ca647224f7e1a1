"""Private adaptations in training: DPZero (black-box prompt tuning) and DP-Flat (flatness-aware DP training).

Library modules not yet used by the pipeline (docs/adaptations.md). They live outside ``empriv.train`` on purpose: the
training stages depend on that whole package directory, so a module added there makes every training run stale.
"""
