"""`python -m simconform.cli`: the same entry point as the `simconform` script."""

from simconform.cli import main

main()
