"""The scripts a VM host image runs: its initramfs, and its init on the root disk.

The VM has no systemd (the image is debootstrap's minbase plus what
:data:`appliance.lab.vmhost.image.PACKAGES` pulls in): :data:`INIT` is PID 1
and does exactly what a hypervisor needs here -- the configuration the lab
wrote for this VM (a tar archive on the second disk, see
:func:`appliance.lab.vmhost.boot.config_archive`), the management link found
by its MAC and renamed ``mgmt0``, the kernel modules the datapath needs,
``ovsdb-server`` + ``ovs-vswitchd`` (kernel datapath, the default), and sshd
with the lab's host key and authorized key.  What could not be done is
written to ``/run/hvnet/status`` (the lab reads it over SSH and refuses a VM
missing a module); when the VM cannot be reached at all it powers off, so
QEMU exits at once and the lab shows the console instead of waiting.

This file's text is an input of the image's digest: editing it rebuilds the image.
"""

from __future__ import annotations

# busybox sh, in the initramfs: the block drivers, the root disk, switch_root.
INITRAMFS_INIT = r"""#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
fail() { echo "hvnet-vmhost initramfs: $*"; poweroff -f; }
while read -r m; do
    insmod "/lib/modules/$m.ko" || echo "hvnet-vmhost initramfs: insmod $m failed"
done < /etc/modules
n=0
while [ ! -b /dev/vda ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
mount -t ext4 /dev/vda /newroot || fail "cannot mount the root disk /dev/vda"
[ -x /newroot/usr/lib/hvnet/init ] || fail "the root disk has no /usr/lib/hvnet/init"
umount /dev /sys /proc
exec switch_root /newroot /usr/lib/hvnet/init
"""

# dash, PID 1 on the root disk.  Values from host.conf are never evaluated, only used as arguments.
INIT = r"""#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
say() { echo "hvnet-vmhost: $*"; }
fail() { say "$*"; echo o > /proc/sysrq-trigger; sleep 10; }
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
ln -sfn /proc/self/fd /dev/fd
say "init at $(cut -d' ' -f1 /proc/uptime) s"
STATUS=/run/hvnet/status
CONF=/run/hvnet/config
mkdir -p "$CONF"
: > "$STATUS"
n=0
while [ ! -b /dev/vdb ] && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
tar -xf /dev/vdb -C "$CONF" || fail "cannot read the configuration disk /dev/vdb"
NAME=vmhost MAC= ADDR= MODULES=
while IFS='=' read -r key value; do
    case "$key" in
        hostname) NAME=$value ;;
        mac) MAC=$value ;;
        address) ADDR=$value ;;
        modules) MODULES=$value ;;
    esac
done < "$CONF/host.conf"
hostname "$NAME"
echo "$NAME" > /etc/hostname
printf '127.0.0.1 localhost\n127.0.1.1 %s\n::1 localhost\n' "$NAME" > /etc/hosts
set -f  # the module list is split into words, never globbed
for m in virtio_net $MODULES; do
    modprobe "$m" || echo "module $m: not loaded" >> "$STATUS"
done
set +f
# openvswitch.ko brings conntrack, which then tracks every guest namespace's connections too. The table is
# sized by memory (4096 entries for 512 MB): a TCP_CRR step fills it with TIME_WAIT entries and the next
# step's sends fail with EPERM. A hypervisor has far more memory than this VM: size it as one would.
CT=/proc/sys/net/netfilter/nf_conntrack_max
[ -w "$CT" ] && echo 262144 > "$CT"
DEV=
n=0
while [ -z "$DEV" ] && [ $n -lt 100 ]; do
    for d in /sys/class/net/*; do
        [ "$(cat "$d/address" 2>/dev/null)" = "$MAC" ] && DEV=${d##*/}
    done
    [ -n "$DEV" ] || { sleep 0.1; n=$((n + 1)); }
done
[ -n "$DEV" ] || fail "no interface has the management MAC $MAC"
ip link set lo up
ip link set "$DEV" name mgmt0
ip addr add "$ADDR" dev mgmt0 || fail "cannot put $ADDR on mgmt0"
ip link set mgmt0 up
# Debian's /etc/openvswitch/conf.db is a symlink into /var/lib/openvswitch: create the file it names.
DB=$(readlink -f /etc/openvswitch/conf.db)
mkdir -p /run/openvswitch /var/log/openvswitch "${DB%/*}"
[ -s "$DB" ] || ovsdb-tool create "$DB" /usr/share/openvswitch/vswitch.ovsschema
ovsdb-server "$DB" --remote=punix:/run/openvswitch/db.sock \
    --remote=db:Open_vSwitch,Open_vSwitch,manager_options --pidfile --detach --log-file \
    || echo "ovsdb-server: not started" >> "$STATUS"
ovs-vsctl --no-wait init
ovs-vswitchd --pidfile --detach --log-file || echo "ovs-vswitchd: not started" >> "$STATUS"
say "ovs at $(cut -d' ' -f1 /proc/uptime) s"
rm -rf /etc/hvnet/ssh
mkdir -p /etc/hvnet /run/sshd /root
cp -r "$CONF/ssh" /etc/hvnet/ssh
chmod 700 /etc/hvnet/ssh
chmod 600 /etc/hvnet/ssh/host_key
/usr/sbin/sshd -f /etc/hvnet/ssh/sshd_config -E /var/log/hvnet-sshd.log || fail "sshd did not start"
say "ready at $(cut -d' ' -f1 /proc/uptime) s: $(cat "$STATUS" | tr '\n' ';')"
# PID 1 stays, reaping whatever is reparented to it while it waits.
while :; do
    sleep 60 &
    wait
done
"""
