"""Dataset export (`simconform export`): a run's published lidar and camera data with its ground
truth, in formats other tools read. dataset.py claims the folder and dispatches; source.py reads
the run (clouds deskewed with the true motion); boxes.py the world's objects as 3D boxes;
kitti.py and nuscenes.py write the layouts."""
