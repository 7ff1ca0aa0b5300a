"""A capture as ``list`` and ``show`` present it, on this machine or on a host over SSH."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.capture.record import CaptureRecord
from appliance.core.documents import CAPTURE_SHOW


@dataclass(frozen=True)
class CaptureView:
    """A capture as ``list`` and ``show`` present it: its record and the figures as of now."""

    record: CaptureRecord
    state: str  # the record's, or "dead" when its processes are gone behind hvnet's back
    reason: str | None
    packets: int | None  # captured so far (tcpdump's count, or the pcaps' records)
    dropped: int | None  # tcpdump's drops so far (None: not known)
    seconds: float | None  # how long it has run (or ran)
    bytes: int  # the pcaps' size

    @property
    def rate_pps(self) -> float | None:
        if self.packets is None or not self.seconds:
            return None
        return self.packets / self.seconds

    def body(self) -> dict[str, Any]:
        """The record (current version, without its name and version) and the figures as of now."""
        record = {k: v for k, v in self.record.to_json().items() if k not in ("schema", "version")}
        return {**record, "state": self.state, "reason": self.reason, "packets": self.packets,
                "dropped_packets": self.dropped, "elapsed_s": self.seconds, "bytes": self.bytes,
                "rate_packets_per_s": self.rate_pps}  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """Document ``hvnet.capture.show`` (``capture show --json``, ``capture stop --json``)."""
        return CAPTURE_SHOW.stamp(self.body())
