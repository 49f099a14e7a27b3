"""Gazebo Harmonic (gz-sim 8) backend: SDF export (sdf.py), message decoding (decode.py), the
gz-transport session (transport.py) and the SensorBackend (backend.py).

Only backend.py/transport.py need Gazebo; sdf.py and decode.py are pure Python so they are
tested everywhere. Nothing is imported here, so importing the package never needs Gazebo.
"""
