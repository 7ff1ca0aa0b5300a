"""ARP/VLAN isolation checks: who hears whom, against what the configuration promises.

* :mod:`.model`    -- VLAN forwarding rules and the expected matrix (pure);
* :mod:`.scenario` -- scenario files (YAML), validated whole;
* :mod:`.trace`    -- the switch-logic method (``ofproto/trace``), parser pure;
* :mod:`.pcap`     -- reading captures (pure);
* :mod:`.traffic`  -- the traffic method: captures + ARP probes in the guests;
* :mod:`.check`    -- runs a scenario and compares, :mod:`.report` prints it.
"""
