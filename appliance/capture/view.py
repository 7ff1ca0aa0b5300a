"""A capture as ``list`` and ``show`` present it, on this machine or on a host over SSH."""

from __future__ import annotations

from dataclasses import dataclass

from appliance.capture.record import CaptureRecord


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
