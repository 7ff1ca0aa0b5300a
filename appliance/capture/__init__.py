"""Packet captures hvnet runs and keeps: what to capture (:mod:`.spec`), what a capture
recorded (:mod:`.record`), how complete it was (:mod:`.completeness`), how much
disk it may take and must leave free (:mod:`.disk`) and the detached process
that runs one (:mod:`.supervise`).

The workflows (start, stop, list) are :mod:`appliance.services.captures`.
"""
