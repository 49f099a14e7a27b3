"""ROS 2 bags: the messages simconform writes and reads, and the bag writer."""
