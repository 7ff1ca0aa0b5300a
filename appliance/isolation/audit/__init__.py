"""``hvnet isolation audit``: who hears whom among a host's real VIFs, by probes injected on the switch.

:mod:`.plan` is pure; :mod:`.trace` and :mod:`.traffic` are the two methods; :mod:`.capture` and :mod:`.remote`
listen on the host-side devices; :mod:`.inject` builds the frames.
"""
