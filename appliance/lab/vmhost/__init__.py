"""A kernel-datapath hypervisor for the lab: a QEMU VM running Open vSwitch on the kernel datapath."""
