"""Explain an engine's difference from the exact reference by the engine's own sensor model:
what the model predicts, what it leaves, and which leftovers are anomalies (compare uses it).

- `lidar`: Gazebo's gpu_lidar (cube-map texels, global shutter) and the classes of what is left;
- `camera`: Gazebo's colour model and edge agreement of two images;
- `inputs`: the recorded run's world and trajectory, refused when they changed;
- `report`: the explanation's section of compare.md and its plot.
"""
