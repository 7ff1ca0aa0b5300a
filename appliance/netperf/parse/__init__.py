"""The generators' command lines and what their output means: netperf's omni selectors, iperf3's JSON."""
