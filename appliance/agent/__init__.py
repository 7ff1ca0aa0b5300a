"""Front end: ``hvnet agent``, the daemon that keeps a policy in force (signals, systemd, the SSH link)."""
