"""The host and what is on its switch, read: the :class:`~.host.Host`, the VIF read model (:mod:`.inventory`),
counters and rates, one-shot snapshots, sFlow/IPFIX settings, and VM names (libvirt, XAPI, the lab).
"""
