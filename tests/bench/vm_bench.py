"""Probe guest benchmark: boot-to-ready time of the probe image, plain QEMU under TCG.

"Ready" is the agent's hello arriving through the multiplexer: the moment
hvnet can run a command in the guest.  Median of three boots, one after
another, with one virtio NIC on QEMU's user-mode network (no host set-up); the
guest's own uptime at hello is shown beside it, which separates QEMU's
start-up from the guest's boot.  The cached-image lookup (what ``lab up``
pays every time) and one command's round trip through gexec are shown too.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance.vm.gexec import gexec_argv  # noqa: E402
from appliance.vm.image import DEFAULT_CACHE, build_image  # noqa: E402
from tests.vm import plainqemu  # noqa: E402

BOOTS = 3


def bench_boot() -> list[str]:
    if shutil.which("qemu-system-x86_64") is None:
        return ["probe guest boot: not measured (qemu-system-x86_64 is not installed)"]
    image = build_image(DEFAULT_CACHE)
    lookup = build_image(DEFAULT_CACHE).seconds
    ready, uptime, gexec = [], [], []
    with tempfile.TemporaryDirectory(prefix="hvi-bench-") as tmp:
        for i in range(BOOTS):
            g = plainqemu.boot(image, Path(tmp), f"bench{i}", ip="10.0.2.15/24", tap="user")
            try:
                ready.append(g.ready_s)
                uptime.append(g.boot_s)
                start = time.perf_counter()
                subprocess.run(gexec_argv(str(g.sock), ["true"]), check=True, stdin=subprocess.DEVNULL, timeout=60)
                gexec.append(time.perf_counter() - start)
            finally:
                plainqemu.stop(g)
    size = (image.kernel.stat().st_size + image.initrd.stat().st_size) / 1e6
    return [
        f"probe guest, plain QEMU under TCG (median of {BOOTS} boots; image {image.digest[:12]}, {size:.1f} MB)",
        f"  QEMU start -> agent ready     {statistics.median(ready):6.2f} s   "
        f"(all: {', '.join(f'{t:.2f}' for t in ready)})",
        f"  guest uptime at ready         {statistics.median(uptime):6.2f} s",
        f"  cached image lookup           {lookup * 1000:6.0f} ms",
        f"  gexec round trip ('true')     {statistics.median(gexec) * 1000:6.0f} ms",
    ]


if __name__ == "__main__":
    for line in bench_boot():
        print(line)
