"""Saved runs as text, HTML and plots."""
