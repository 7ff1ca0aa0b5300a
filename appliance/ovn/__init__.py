"""OVN pools: what the northbound and southbound databases say about a pool's logical network."""
