"""QEMU guests: the probe image, the host-guest channel, libvirt daemons and domains."""
