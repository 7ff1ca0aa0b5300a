"""The service API: the one verb set the CLI, the console and the agent call.

Front ends parse, call a verb here and render; none of them owns a workflow.
Each verb takes the :class:`~appliance.switch.host.Host` the front door built.
Submodules hold one capability each: :mod:`.engine` (the policy engine a
front end works with), :mod:`.policy` (plan/apply/verify/export, one VIF's
edit from the CLI or the Edit VIF form, QoS, sFlow/IPFIX), :mod:`.confirm`
(confirm-within, commit, rollback), :mod:`.mirrors`, :mod:`.suites` (netperf
suites: load, overrides, run handle, runs, reports), :mod:`.isolation`
(scenario checks).  The lab is above this layer: a front end hands its guests
in as a :class:`~appliance.endpoints.guests.GuestSource`.
"""
