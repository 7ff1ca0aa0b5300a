"""The host and what is on its switch, read: the :class:`~.host.Host`, the switch's rows as every reader reads
them (:mod:`.reader`), the VIF read model on them (:mod:`.inventory`), counters and rates, one-shot snapshots,
sFlow/IPFIX settings, and VM names (libvirt, XAPI, the lab).
"""
