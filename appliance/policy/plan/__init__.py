"""The policy's pure part: the desired-state model, its grammar and file format, intents, and the planner.

Nothing here opens a connection or starts a program: given a policy and a :class:`~.state.State`, it decides.
"""
