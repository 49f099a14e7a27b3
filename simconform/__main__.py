"""`python -m simconform`: the `simconform` command (simconform/launch.py)."""

from simconform.launch import main

main()
