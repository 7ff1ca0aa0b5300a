"""hvnet: the host networking engine for XenServer and KVM hypervisors.

Layers, top to bottom (enforced by the import-linter contracts in ``make lint``):

* front ends -- :mod:`appliance.cli.main` (``hvnet``) and the :mod:`tui` console --
  build a :class:`~appliance.switch.host.Host` at the front door, parse, call a
  service verb and render;
* :mod:`appliance.lab` -- the built-in lab, beside the product;
* :mod:`appliance.services` -- the one verb set every front end calls;
* the engine -- inventory, policy, netperf, isolation;
* the core -- OVSDB, targets, the Host and its command runner, bounded YAML.

Importing this package loads nothing else, so each verb loads only what it uses.
"""

from __future__ import annotations

__version__ = "0.1.0"
