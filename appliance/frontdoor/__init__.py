"""Where front ends turn flags and settings into the objects the services take.

:mod:`.hosts` builds the :class:`~appliance.switch.host.Host` (local, over SSH, or a lab host); :mod:`.guests`
chooses where a suite or isolation check finds its endpoints (lab, probes).  Only front ends import it.
"""
