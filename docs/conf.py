"""The hvnet manual: Sphinx with MyST markdown, HTML and man pages (``make docs``).

The per-command pages (hvnet-VERB(8)) are sphinx-argparse's ``argparse`` directive over hvnet's
own parser, and the tables of hvnet(8) and hvnet.conf(5) come from the code (``_ext/hvnet_manual.py``),
so the pages follow the program; the prose is in the pages themselves.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE / "_ext")]  # hvnet itself (its parser, its tables), our extension

from hvnet_manual import public_verbs  # noqa: E402

from appliance import __version__  # noqa: E402
from appliance.cli.main import build_parser  # noqa: E402

project = "hvnet"
author = "hvnet maintainers"
version = release = __version__
# A package build sets SOURCE_DATE_EPOCH: the pages' date is then the commit's, not the build's.
today = time.strftime("%Y-%m-%d", time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))))
copyright = f"{today[:4]}, {author}"

extensions = ["myst_parser", "sphinxarg.ext", "hvnet_manual"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "**/.*"]
myst_heading_anchors = 3
html_theme = "alabaster"
html_title = f"hvnet {__version__}"

# -- man pages ---------------------------------------------------------------------------------------
# Section 8: hvnet runs as root on a hypervisor.  Section 5: the files hvnet reads.
# Each verb's page is reference/man/8/hvnet-VERB.md (tests/unit/docs checks there is one per verb).
FORMATS = (
    ("hvnet.conf", "hvnet's settings file"),
    ("hvnet-policy", "the policy file: VLANs, limits and mirrors of VIFs"),
    ("hvnet-suite", "the netperf suite file"),
    ("hvnet-scenario", "the isolation check's scenario file"),
    ("hvnet-inventory", "the inventory of hypervisors, groups and OVN pools"),
)
man_pages = [
    ("reference/man/8/hvnet", "hvnet", "host networking for XenServer and KVM hypervisors on Open vSwitch",
     [author], 8),
    *(("reference/man/8/hvnet-" + verb, "hvnet-" + verb, text.split(";")[0], [author], 8)
      for verb, text in public_verbs(build_parser())),
    *(("reference/man/5/" + name, name, text, [author], 5) for name, text in FORMATS),
]  # fmt: skip
man_show_urls = False
