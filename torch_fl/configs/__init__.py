"""Routing tables shipped with torch_fl."""
