"""Service verbs on an OVN pool (``hvnet --pool NAME``): its logical network, policy, history, mirrors,
tunnels and isolation."""
