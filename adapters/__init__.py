"""Simulator backends behind one SensorBackend interface; `--backend NAME` picks one.

Adding a backend is one module plus one entry in `simconform.registry.BACKENDS`; entries are
imported lazily so a missing engine only matters when its backend is chosen.
"""
