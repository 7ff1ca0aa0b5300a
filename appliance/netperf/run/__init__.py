"""Running a suite: preflight, the processes a step starts, what is sampled beside them, the runner itself."""
