"""Plumbing that knows nothing of VIFs: errors and exit codes, value rules, YAML with positions, settings,
running programs (locally and over SSH), the OVSDB connection, rendering, safe directories.

Nothing here imports any other hvnet package.
"""
