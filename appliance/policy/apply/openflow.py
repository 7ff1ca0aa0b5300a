"""Ingress policing with OpenFlow meters, for switches where tc policing does not work.

OVS implements ``ingress_policing_rate`` with the kernel's tc police action;
on kernels without it (and on userspace/DPDK datapaths) OVS merely logs a
warning and the limit is silently not enforced.  A meter per VIF plus one
flow ``in_port=VIF actions=meter:N,NORMAL`` polices on every datapath.

Meters and flows live outside OVSDB and vanish when ovs-vswitchd restarts,
so hvnet treats them as *derived* state: the desired meters are recorded on
the Interface (``external_ids:hvnet-police-*``) inside the policy
transaction, and :func:`sync` makes the OpenFlow tables match that record.
Flows carry hvnet's cookie; a meter is hvnet's when one of those flows uses
it.  Nothing else on the bridge is touched.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.core import ovsfeatures
from appliance.core.errors import HvnetError
from appliance.core.runner import CommandRunner, LocalRunner
from appliance.policy.apply import ofchannel
from appliance.policy.plan import pipeline
from appliance.switch.counters import Counters, parse_ofctl_ports
from appliance.switch.host import daemon_ctl, daemon_pid

if TYPE_CHECKING:
    from appliance.switch.host import Host
from appliance.policy.plan.state import State

COOKIE = 0x68766E6574  # "hvnet"
PRIORITY = 100
log = logging.getLogger("hvnet.policy")
# ovs-ofctl prints ASCII numbers of at most 20 digits (64 bits).  \d would also match other
# scripts' digits and unbounded runs, and int() refuses numbers of more than 4,300 digits.
_N = r"([0-9]{1,20})\b"
_METER_ACTION = re.compile(rf"meter:{_N}")
_METER = re.compile(rf"meter={_N}\s+(.*?)bands=\s*type=drop\s+rate={_N}(?:\s+burst_size={_N})?", re.S)
_METER_STATS = re.compile(rf"meter:{_N}\s.*?bands:\s*0:\s*packet_count:{_N}\s+byte_count:{_N}", re.S)


@dataclass(frozen=True)
class Wanted:
    """One VIF's meter as the OVSDB record asks for it."""

    port: str
    ofport: int
    rate_kbps: int
    burst_kbit: int


@dataclass
class Installed:
    """hvnet's flows and every meter, as ``ovs-ofctl`` dumps them."""

    flows: dict[int, int] = field(default_factory=dict)  # in_port -> meter id
    meters: dict[int, tuple[int, int]] = field(default_factory=dict)  # id -> (rate kbit/s, burst kbit)
    foreign_flows: list[str] = field(default_factory=list)
    band_drops: dict[int, int] = field(default_factory=dict)  # id -> packets dropped by the band
    pipeline: set[pipeline.Flow] = field(default_factory=set)  # every flow with hvnet's cookie
    groups: dict[int, str] = field(default_factory=dict)  # hvnet's groups as dump-groups prints them
    default_flow: bool = False  # the switch's own priority=0 actions=NORMAL flow in table 0
    tap_counts: dict[int, tuple[int, int]] = field(default_factory=dict)  # TAP table -> (packets, bytes)


@dataclass
class SyncResult:
    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    pipeline: bool = False  # hvnet's flows and groups were replaced (one bundle)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.modified or self.removed or self.pipeline)


def wanted(state: State, bridge: str) -> dict[int, Wanted]:
    """Meters the OVSDB record asks for on ``bridge``, by OpenFlow port number."""
    out = {}
    for p in state.ports.values():
        if p.bridge == bridge and p.police.meter_rate_kbps and p.ofport and p.ofport > 0:
            out[p.ofport] = Wanted(p.name, p.ofport, p.police.meter_rate_kbps, p.police.meter_burst_kbit or 0)
    return out


_FLOW_FLAGS = {"reset_counts", "send_flow_rem", "check_overlap", "no_packet_counts", "no_byte_counts"}
_FLOW_META = {"duration", "n_packets", "n_bytes", "idle_age", "hard_age", "idle_timeout", "hard_timeout", "importance"}


def parse_flow(line: str) -> tuple[int, int, int, list[str], str] | None:
    """One ``dump-flows`` line -> (cookie, table, priority, match fields, actions); None when it is no flow.

    A flow whose cookie, table or priority is not a number raises ValueError:
    hvnet cannot tell whose it is (:func:`parse_flows` counts it as foreign).
    """
    if "actions=" not in line:
        return None
    head, actions = line.strip().split("actions=", 1)
    cookie, table, priority, match = 0, 0, 32768, []
    for token in (t for t in re.split(r"[,\s]+", head) if t):
        key, _, value = token.partition("=")
        if key == "cookie":
            cookie = _number(value, 16)
        elif key == "table":
            table = _number(value, 10)
        elif key == "priority":
            priority = _number(value, 10)
        elif key not in _FLOW_META and token not in _FLOW_FLAGS:
            match.append(token)
    return cookie, table, priority, match, actions.strip()


def _number(text: str, base: int) -> int:
    """An ASCII number as ovs-ofctl prints it, else ValueError (int() also takes '١٢', which ofctl never prints)."""
    digits = text[2:] if base == 16 and text[:2].lower() == "0x" else text
    if not digits.isascii() or not digits.isalnum() or len(digits) > 20:
        raise ValueError(f"not a base-{base} number: {text!r}")
    return int(digits, base)


def parse_flows(text: str) -> tuple[dict[int, int], list[str]]:
    """hvnet's flows (in_port -> meter) and the other flows (besides the default NORMAL one).

    A line that looks like a flow but cannot be read is reported as foreign:
    hvnet must not install meters next to flows it does not understand.
    """
    ours: dict[int, int] = {}
    foreign: list[str] = []
    for line in text.splitlines():
        try:
            flow = parse_flow(line)
        except ValueError:
            foreign.append(line.strip())
            continue
        if flow is None:
            continue
        cookie, table, priority, match, actions = flow
        if cookie == COOKIE:
            in_port = next((m[8:] for m in match if m.startswith("in_port=")), None)
            meter = _METER_ACTION.search(actions)
            if in_port is not None and re.fullmatch(_N, in_port) and meter:
                ours[int(in_port)] = int(meter.group(1))
            continue
        if table == 0 and priority == 0 and not match and actions == "NORMAL":
            continue
        foreign.append(line.strip())
    return ours, foreign


def parse_meters(text: str) -> dict[int, tuple[int, int]]:
    """meter id -> (rate, burst) of its drop band; meters with other bands map to (0, 0)."""
    out = {}
    for block in re.split(r"(?=\bmeter=[0-9])", text):
        head = re.match(rf"meter={_N}", block)
        if head is None:
            continue
        m = _METER.match(block)
        out[int(head.group(1))] = (int(m.group(3)), int(m.group(4) or 0)) if m else (0, 0)
    return out


def parse_meter_features(text: str) -> int | None:
    """``max_meter`` of ``ovs-ofctl meter-features``: how many meters the switch's datapath runs (0: none)."""
    m = re.search(rf"\bmax_meter:{_N}", text)
    return int(m.group(1)) if m else None


def parse_meter_stats(text: str) -> dict[int, int]:
    return {int(m.group(1)): int(m.group(2)) for m in _METER_STATS.finditer(text)}


class OpenFlow:
    """ovs-ofctl against a bridge's management socket in ovs-vswitchd's run directory."""

    def __init__(self, rundir: str | Path, runner: CommandRunner | None = None) -> None:
        self.rundir = Path(rundir)
        self.runner: CommandRunner = runner or LocalRunner()
        self._forwarded: set[str] = set()  # bridges whose management socket is forwarded over SSH

    @staticmethod
    def for_host(host: Host) -> OpenFlow | None:
        """Where the host's OVS run directory is known (a unix-socket database: the socket's directory)."""
        if host.ovs_rundir is None:
            return None
        return OpenFlow(host.ovs_rundir, host.runner)

    def available(self, bridge: str) -> bool:
        return self.runner.exists(str(self.rundir / f"{bridge}.mgmt"))

    def _switch(self, bridge: str) -> str:
        return f"unix:{self.rundir / (bridge + '.mgmt')}"

    def _ofctl(self, *args: str, stdin: str | None = None) -> str:
        return self.runner.run(["ovs-ofctl", "-O", "OpenFlow13", *args], input_text=stdin, timeout=30).stdout

    def meter_bands(self, bridge: str) -> dict[int, tuple[int, int]]:
        """Every meter's drop band (rate kbit/s, burst kbit), asked in OpenFlow 1.5: an OVN integration
        bridge's controller may leave 1.3 off its protocols."""
        out = self.runner.run(["ovs-ofctl", "-O", "OpenFlow15", "dump-meters", self._switch(bridge)], timeout=30)
        return parse_meters(out.stdout)

    def port_counters(self, bridge: str) -> dict[str, Counters]:
        """Every port's counters as OVS counted them (drops included), by port name."""
        return parse_ofctl_ports(self._ofctl("--names", "dump-ports", self._switch(bridge)))

    def vswitchd_pid(self) -> int | None:
        return daemon_pid(self.rundir, "ovs-vswitchd", self.runner)

    def purge_datapath(self) -> bool:
        """Drop cached datapath flows so every packet meets the new VLAN/mirror configuration.

        After a VLAN or mirror change, flows already in the datapath were seen
        to keep forwarding the old way (and a new mirror to get no copies)
        even after ``revalidator/wait``; a purge costs one upcall per active
        flow.  Returns False when ovs-vswitchd's control socket is not here.
        """
        ctl = daemon_ctl(self.rundir, "ovs-vswitchd", self.runner)
        if ctl is None:
            return False
        for command in ("revalidator/purge", "revalidator/wait"):
            self.runner.run(["ovs-appctl", "-t", ctl, command], check=False, timeout=30)
        return True

    def read(self, bridge: str, *, stats: bool = False) -> Installed:
        """hvnet's flows, groups and meters on ``bridge`` (three ovs-ofctl runs; four with meter stats)."""
        sw = self._switch(bridge)
        flows_text = self._ofctl("--no-names", "dump-flows", sw)
        flows, foreign = parse_flows(flows_text)
        inst = Installed(flows=flows, meters=parse_meters(self._ofctl("dump-meters", sw)), foreign_flows=foreign)
        inst.pipeline, inst.default_flow = parse_pipeline(flows_text)
        inst.tap_counts = parse_tap_counts(flows_text)
        inst.groups = parse_groups(self._ofctl("dump-groups", sw))
        if stats:
            inst.band_drops = parse_meter_stats(self._ofctl("meter-stats", sw))
        return inst

    def drifted(self, bridge: str, want: dict[int, Wanted], state: State | None = None) -> bool:
        """Whether the meters, flows or groups on ``bridge`` differ from what ``want`` and the TAPs ask."""
        inst = self.read(bridge)
        todo = diff(inst, want)
        if todo.changed:
            return True
        pipe = pipeline.build(state or State(), bridge, _meter_ids(inst, todo, want))
        return _bundle(inst, pipe) is not None

    def sync(self, bridge: str, want: dict[int, Wanted], state: State | None = None) -> SyncResult:
        """Make hvnet's meters, flows and groups on ``bridge`` exactly ``want`` and the TAPs in ``state``.

        Meters cannot be bundled (OpenFlow bundles carry flow and group mods,
        and ovs-ofctl 3.1 takes one meter per run), so the order is what makes
        the change safe: new and changed meters first -- a new meter is used
        by no flow until the swap; then every flow and group of hvnet's
        replaced in one bundle (OpenFlow 1.4's, which OVS also speaks in 1.3) (all or nothing: a packet sees the
        old pipeline or the new one); then the meters no flow uses any more
        are deleted.  A bundle the switch refuses leaves the old flows in
        place, and the meters just added are taken away again.
        """
        inst = self.read(bridge)
        pipe_state = state or State()
        has_taps = bool(pipe_state.bridges.get(bridge) and pipe_state.bridges[bridge].taps)
        if (want or has_taps) and inst.foreign_flows:
            raise HvnetError(
                f"bridge {bridge} has OpenFlow flows not made by hvnet ({len(inst.foreign_flows)}, e.g. "
                f"{inst.foreign_flows[0]!r}); meter policing and TAPs would bypass them",
                hint="use mechanism: tc for this bridge's VIFs and mirrors instead of TAPs, or remove the flows",
            )
        todo = diff(inst, want)
        pipe = pipeline.build(pipe_state, bridge, _meter_ids(inst, todo, want))
        self._meter_mods(bridge, [*_mods(ofchannel.OFPMC_MODIFY, todo.modify), *_mods(ofchannel.OFPMC_ADD, todo.add)])
        bundle = _bundle(inst, pipe)
        if bundle is not None:
            try:
                self.apply_bundle(bridge, bundle)
            except HvnetError:
                self._undo_meters(bridge, inst, todo)
                raise
        gone = [m for _, m in todo.remove]
        self._meter_mods(bridge, [ofchannel.MeterMod(ofchannel.OFPMC_DELETE, m) for m in gone])
        return SyncResult(
            added=[w.port for _, w in todo.add],
            modified=[w.port for _, w in todo.modify],
            removed=[ofport for ofport, _ in todo.remove],
            pipeline=bundle is not None,
        )

    def drifted_any(self, state: State) -> bool:
        """Whether any bridge's meters/flows differ from what ``state`` (the OVSDB record) wants."""
        for br in state.bridges:
            want = wanted(state, br)
            if _too_old(state, br, want):
                return True
            if _never_piped(state, br, want):
                continue
            if not self.available(br):
                if want or state.bridges[br].taps:
                    return True
                continue
            if self.drifted(br, want, state):
                return True
        return False

    def sync_bridges(self, state: State, bridges: set[str] | None = None) -> dict[str, dict[str, Any]]:
        """Make meters/flows match ``state`` on ``bridges`` (all when None); what each sync changed."""
        out: dict[str, dict[str, Any]] = {}
        for br in sorted(bridges or state.bridges):
            if br not in state.bridges:
                continue
            want = wanted(state, br)
            if (why := _too_old(state, br, want)) is not None:
                raise HvnetError(
                    f"cannot install meters or TAPs on {br}: {why}",
                    hint="police with mechanism: tc and mirror instead of TAPs on this switch",
                )
            if _never_piped(state, br, want):
                continue
            if not self.available(br):
                if want or state.bridges[br].taps:
                    raise HvnetError(
                        f"cannot install meters or TAPs on {br}: no OpenFlow management socket in {self.rundir}",
                        hint="is ovs-vswitchd running on this host?",
                    )
                continue
            res = self.sync(br, want, state)
            out[br] = {
                "added": res.added,
                "modified": res.modified,
                "removed_ofports": res.removed,
                "pipeline": res.pipeline,
            }
        return out

    def apply_bundle(self, bridge: str, text: str) -> None:
        """Flow and group mods (``ovs-ofctl bundle`` lines) as one atomic bundle: all applied, or none."""
        res = self.runner.run(
            ["ovs-ofctl", "-O", "OpenFlow13", "bundle", self._switch(bridge), "-"],
            input_text=text,
            check=False,
            timeout=60,
        )
        if res.returncode != 0:
            raise HvnetError(
                f"the switch refused hvnet's OpenFlow pipeline on {bridge}; the previous flows stay: "
                + " ".join(res.stderr.split())[:600]
            )

    def _meter_mods(self, bridge: str, mods: list[ofchannel.MeterMod]) -> None:
        """Meter mods in one OpenFlow session (a forwarded socket on a remote host); refusals raise."""
        if not mods:
            return
        failed = ofchannel.Channel(self._socket_path(bridge)).meter_mods(mods)
        if failed:
            mod, why = next(iter(failed.items()))
            raise HvnetError(
                f"the switch refused {len(failed)} of {len(mods)} meter changes on {bridge} "
                f"(meter {mod.meter_id}: {why}){self._no_meters(bridge)}"
            )

    def _no_meters(self, bridge: str) -> str:
        """Why a refusal may be the datapath's: OVS offers no meters where its datapath cannot run them
        (an older kernel datapath), and refuses every meter id then."""
        try:
            most = parse_meter_features(self._ofctl("meter-features", self._switch(bridge)))
        except HvnetError:
            return ""
        if most != 0:
            return ""
        return (
            f"; {bridge}'s datapath has no meters (ovs-ofctl meter-features: max_meter 0): "
            "use mechanism tc where its kernel polices"
        )

    def _undo_meters(self, bridge: str, inst: Installed, todo: MeterDiff) -> None:
        """After a refused bundle: the meters added taken away, the modified ones put back (best effort)."""
        undo = [ofchannel.MeterMod(ofchannel.OFPMC_DELETE, m) for m, _ in todo.add]
        for meter, _ in todo.modify:
            rate, burst = inst.meters.get(meter, (0, 0))
            undo.append(ofchannel.MeterMod(ofchannel.OFPMC_MODIFY, meter, rate, burst))
        try:
            self._meter_mods(bridge, undo)
        except HvnetError as exc:
            log.error("could not undo meter changes on %s: %s", bridge, exc)

    def _socket_path(self, bridge: str) -> str:
        """The bridge's management socket as this process can open it: here, or forwarded over SSH."""
        remote = str(self.rundir / f"{bridge}.mgmt")
        if self.runner.local:
            return remote
        session = getattr(self.runner, "session", None)
        if session is None:
            raise HvnetError(f"no way to reach {remote} on {self.runner}: OpenFlow meters need a local or SSH host")
        local = session.work_dir / f"of-{bridge}.sock"
        if bridge not in self._forwarded:
            session.forward_unix(local, remote)
            self._forwarded.add(bridge)
        return str(local)


def _mods(command: int, items: list[tuple[int, Wanted]]) -> list[ofchannel.MeterMod]:
    return [ofchannel.MeterMod(command, meter, w.rate_kbps, w.burst_kbit) for meter, w in items]


def _meter_ids(inst: Installed, todo: MeterDiff, want: dict[int, Wanted]) -> dict[int, int]:
    """ofport -> meter id once ``todo`` is done: the kept ones and the new ones."""
    out = {ofport: meter for ofport, meter in inst.flows.items() if ofport in want}
    for meter, w in todo.add:
        out[w.ofport] = meter
    return out


def _bundle(inst: Installed, pipe: pipeline.Pipeline) -> str | None:
    """The bundle that turns what is installed into ``pipe``; None when they are already the same.

    hvnet's groups are deleted and re-added (a group id is hvnet's by its
    range), hvnet's flows deleted by cookie and added; the switch's default
    NORMAL flow is replaced by hvnet's table-0 catch-all when the pipeline
    comes, and comes back when it goes.
    """
    same_groups = inst.groups == pipe.groups
    if inst.pipeline == pipe.flows and same_groups and inst.default_flow == pipe.empty:
        return None
    lines = [f"group delete group_id={g}" for g in sorted(inst.groups)]
    lines.append(f"flow delete cookie={COOKIE:#x}/-1")
    lines += [f"group add {text}" for _, text in sorted(pipe.groups.items())]
    lines += [
        f"flow add {f.text(COOKIE)}" for f in sorted(pipe.flows, key=lambda f: (f.table, -f.priority, sorted(f.match)))
    ]
    if pipe.empty and not inst.default_flow:
        lines.append("flow add table=0,priority=0,actions=NORMAL")
    # (hvnet's own table-0 priority-0 flow, added above, replaces the default one: same match, same priority)
    return "\n".join(lines) + "\n"


def parse_pipeline(text: str) -> tuple[set[pipeline.Flow], bool]:
    """hvnet's flows as :class:`pipeline.Flow` and whether the switch's default NORMAL flow is there."""
    flows: set[pipeline.Flow] = set()
    default = False
    for line in text.splitlines():
        try:
            flow = parse_flow(line)
        except ValueError:
            continue
        if flow is None:
            continue
        cookie, table, priority, match, actions = flow
        if cookie == COOKIE:
            flows.add(pipeline.Flow(table, priority, frozenset(match), actions))
        elif table == 0 and priority == 0 and not match and actions == "NORMAL":
            default = True
    return flows, default


_COUNTS = re.compile(rf"n_packets={_N}, n_bytes={_N}")


def parse_tap_counts(text: str) -> dict[int, tuple[int, int]]:
    """Per TAP table: (packets, bytes) its copy flows matched (the pass-on flow at priority 0 left out)."""
    out: dict[int, tuple[int, int]] = {}
    for line in text.splitlines():
        try:
            flow = parse_flow(line)
        except ValueError:
            continue
        m = _COUNTS.search(line)
        if flow is None or m is None or flow[0] != COOKIE or flow[2] == 0:
            continue
        if pipeline.TAP_TABLE0 <= flow[1] < pipeline.NORMAL_TABLE:
            p, b = out.get(flow[1], (0, 0))
            out[flow[1]] = (p + int(m.group(1)), b + int(m.group(2)))
    return out


_GROUP = re.compile(rf"^\s*group_id={_N},(.*)$")


def parse_groups(text: str) -> dict[int, str]:
    """hvnet's groups (ids in its range), each as ``dump-groups`` prints it."""
    out = {}
    for line in text.splitlines():
        m = _GROUP.match(line)
        if m is None:
            continue
        gid = int(m.group(1))
        if pipeline.GROUP_BASE <= gid < pipeline.GROUP_BASE + 256:
            out[gid] = line.strip()
    return out


@dataclass
class MeterDiff:
    """What :meth:`OpenFlow.sync` must do: (ofport, meter) to remove, (meter, Wanted) to modify/add."""

    remove: list[tuple[int, int]] = field(default_factory=list)
    modify: list[tuple[int, Wanted]] = field(default_factory=list)
    add: list[tuple[int, Wanted]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.remove or self.modify or self.add)


def diff(inst: Installed, want: dict[int, Wanted]) -> MeterDiff:
    """Compare installed meters/flows with the wanted ones; new meters get the port's number if free."""
    out = MeterDiff()
    meters = dict(inst.meters)
    for ofport, meter in sorted(inst.flows.items()):
        if ofport not in want:
            out.remove.append((ofport, meter))
            meters.pop(meter, None)
    used = set(meters)
    for ofport, w in sorted(want.items()):
        meter = inst.flows.get(ofport)
        if meter is not None and meter in meters:
            if meters[meter] != (w.rate_kbps, w.burst_kbit):
                out.modify.append((meter, w))
            continue
        meter = ofport if ofport not in used else _lowest_free(used)
        used.add(meter)
        out.add.append((meter, w))
    return out


def _meter_spec(w: Wanted) -> str:
    return f"kbps,burst,stats,bands=type=drop,rate={w.rate_kbps},burst_size={w.burst_kbit}"


def _lowest_free(used: set[int]) -> int:
    i = 1
    while i in used:
        i += 1
    return i


def _too_old(state: State, bridge: str, want: dict[int, Wanted]) -> str | None:
    """Why hvnet's pipeline cannot be on this switch although ``bridge`` asks for meters or TAPs (an OVS older
    than ``ovs-ofctl --no-names``, with which hvnet reads its pipeline back), or None."""
    if not (want or state.bridges[bridge].taps):
        return None
    return ovsfeatures.missing("ofctl-names", state.ovs_version)


def _never_piped(state: State, bridge: str, want: dict[int, Wanted]) -> bool:
    """A bridge that asks for nothing on a switch too old for hvnet's pipeline: hvnet never installed one there
    (the planner refuses meters and TAPs first), so there is nothing to read back or take away -- and asking
    would fail on ``--no-names`` on every apply of a VLAN-only policy (a XCP-ng 8.2 dom0's OVS 2.5)."""
    return (
        not (want or state.bridges[bridge].taps) and ovsfeatures.missing("ofctl-names", state.ovs_version) is not None
    )
