"""Downstream proof: what a sensor model's errors do to the systems it feeds (localization)."""
