"""Command-line tools (python -m torch_fl.tools.<name>)."""
