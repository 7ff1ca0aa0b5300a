"""Code that runs inside the probe guest (standard library only)."""
