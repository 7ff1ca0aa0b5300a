"""The RPMs 'make rpm' builds: lint, file lists, dependencies, vendored libraries."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.pkg.conftest import run

pytestmark = pytest.mark.pkg

PREFIX = "/usr/lib64/hvnet"
RPMLINT_PAGE = ROOT / "docs" / "reference" / "rpmlint.md"  # every warning left, with its reason


def qp(rpm: Path, *args: str) -> list[str]:
    res = run(["rpm", "-qp", *args, str(rpm)])
    assert res.returncode == 0, res.stderr
    return res.stdout.splitlines()


def files(rpm: Path) -> set[str]:
    return set(qp(rpm, "-l"))


def test_rpmlint_reports_no_errors_and_only_documented_warnings(rpms: dict[str, Path]) -> None:
    res = run(["rpmlint", "-c", str(ROOT / "rpm" / "rpmlint.toml"), *map(str, rpms.values())], timeout=300)
    out = res.stdout + res.stderr
    assert " 0 errors" in out, out[-5000:]
    assert not re.search(r": E: ", out), out[-5000:]
    warnings = set(re.findall(r"^\S+: W: (\S+)", out, re.M))
    page = RPMLINT_PAGE.read_text(encoding="utf-8")
    undocumented = sorted(w for w in warnings if f"`{w}`" not in page)
    assert not undocumented, f"rpmlint warnings docs/reference/rpmlint.md does not explain: {undocumented}"


def test_hvnet_files(rpms: dict[str, Path]) -> None:
    got = files(rpms["hvnet"])
    for path in (
        "/usr/bin/hvnet",
        f"{PREFIX}/app/appliance/cli/main.py",
        f"{PREFIX}/app/tui/app.py",
        f"{PREFIX}/app/netperf-suites/quick.yaml",
        f"{PREFIX}/app/vlan-tests/topologies/seed-2010.yaml",
        f"{PREFIX}/app/policies/seed-2010.yaml",
        f"{PREFIX}/vendor/textual/__init__.py",
        f"{PREFIX}/vendor/rich/__init__.py",
        f"{PREFIX}/vendor/XenAPI/XenAPI.py",
        "/usr/lib/systemd/system/hvnet-agent.service",
        "/usr/share/licenses/hvnet/LICENSE",
        "/etc/pki/rpm-gpg/RPM-GPG-KEY-hvnet",
        "/usr/lib/systemd/system/hvnet-exporter.service",
        "/usr/share/hvnet/grafana/hvnet.json",
        "/usr/share/hvnet/prometheus/hvnet-rules.yml",
        f"{PREFIX}/vendor/prometheus_client/__init__.py",
        "/usr/lib/tmpfiles.d/hvnet.conf",
        "/etc/hvnet/policy.yaml",
        "/etc/hvnet/hvnet.conf",
        "/etc/logrotate.d/hvnet",
        "/usr/share/bash-completion/completions/hvnet",
        "/usr/share/zsh/site-functions/_hvnet",
        "/usr/share/man/man8/hvnet.8.gz",
        "/usr/share/man/man8/hvnet-apply.8.gz",
        "/usr/share/man/man8/hvnet-agent.8.gz",
        "/usr/share/man/man8/hvnet-exporter.8.gz",
        "/usr/share/man/man5/hvnet.conf.5.gz",
        "/usr/share/man/man5/hvnet-policy.5.gz",
        "/usr/share/man/man5/hvnet-suite.5.gz",
        "/usr/share/man/man5/hvnet-scenario.5.gz",
        "/usr/share/man/man5/hvnet-inventory.5.gz",
        f"{PREFIX}/vendor/shtab/__init__.py",
        "/var/log/hvnet",
        "/var/lib/hvnet",
        "/var/cache/hvnet",
    ):
        assert path in got, f"{path} is not in the hvnet RPM"
    assert not [f for f in got if f.startswith("/usr/share/man/man1/hvnet")], "hvnet's pages are in section 8 and 5"
    # the OS provides the OVS library, PyYAML and psutil; plotting is hvnet-plots'; nothing of the build
    # or of tests ships
    for lib in ("ovs", "yaml", "_yaml", "psutil", "matplotlib", "numpy", "PIL"):
        assert not [f for f in got if f.startswith(f"{PREFIX}/vendor/{lib}/")], lib
    plots = files(rpms["hvnet-plots"])
    for path in (f"{PREFIX}/vendor/matplotlib/__init__.py", f"{PREFIX}/vendor/numpy/__init__.py",
                 f"{PREFIX}/vendor/PIL/__init__.py", f"{PREFIX}/vendor/numpy.libs"):  # fmt: skip
        assert path in plots, f"{path} is not in hvnet-plots"
    assert not got & plots, sorted(got & plots)[:5]
    assert not [f for f in plots if not f.startswith(f"{PREFIX}/vendor/") and not f.startswith("/usr/share/doc/")]
    assert not [f for f in got if "/__pycache__" in f or "/.build-id" in f or f.startswith(f"{PREFIX}/app/tests")]
    assert not [f for f in got if f.startswith(f"{PREFIX}/vendor/numpy/") and "/tests/" in f]
    # sortedcontainers: neither imported by hvnet nor required by anything it pins
    assert not [f for f in got if f.startswith(f"{PREFIX}/vendor/sortedcontainers")]


def test_hvnet_config_files_and_modes(rpms: dict[str, Path]) -> None:
    rows = qp(rpms["hvnet"], "--qf", "[%{FILEMODES:perms} %{FILEFLAGS:fflags} %{FILENAMES}\n]")
    info = {r.split()[-1]: r.split()[:-1] for r in rows}
    assert info["/etc/hvnet/policy.yaml"][1] == "cn", "policy.yaml must be %config(noreplace)"
    assert info["/etc/logrotate.d/hvnet"][1] == "cn"
    assert info["/var/log/hvnet"][0] == "drwxr-x---"
    assert info["/etc/hvnet/hvnet.conf"][:2] == ["-rw-r--r--", "cn"], "hvnet.conf must be %config(noreplace)"
    assert info["/var/lib/hvnet"][0] == "drwx------"
    assert info["/usr/bin/hvnet"][0] == "-rwxr-xr-x"


def test_every_vendored_extension_exists_for_both_pythons(rpms: dict[str, Path]) -> None:
    exts: dict[str, set[str]] = {}
    for f in files(rpms["hvnet"]) | files(rpms["hvnet-plots"]):
        m = re.match(rf"{PREFIX}/vendor/(.+)\.cpython-(\d+)-x86_64-linux-gnu\.so$", f)
        if m:
            exts.setdefault(m.group(1), set()).add(m.group(2))
    assert len(exts) > 20, "expected the compiled modules of numpy, matplotlib, PyYAML, ..."
    lonely = {k: v for k, v in exts.items() if v != {"39", "311"}}
    assert not lonely, f"extension modules for one interpreter only: {lonely}"


def test_hvnet_dependencies(rpms: dict[str, Path]) -> None:
    requires = qp(rpms["hvnet"], "--requires")
    text = "\n".join(requires)
    assert "python3 >= 3.9" in requires
    for dep in ("iproute", "iproute-tc", "tcpdump", "logrotate", "/usr/bin/python3", "python3-pyyaml >= 5.4",
                "python3-psutil >= 5.8"):  # fmt: skip
        assert dep in requires, f"hvnet does not require {dep}"
    ovs = [r for r in requires if r.startswith("(openvswitch ")]
    assert ovs and " or openvswitch3.3 " in ovs[0], requires
    pyovs = [r for r in requires if r.startswith("(python3-openvswitch ")]
    assert pyovs and " or python3-openvswitch3.3 " in pyovs[0], requires
    # the vendored libraries' own shared objects neither need nor provide anything
    assert not re.search(r"openblas|gfortran|libjpeg|libyaml|\.so", text), text
    provides = qp(rpms["hvnet"], "--provides")
    assert not [p for p in provides if ".so" in p], provides
    assert any(p.startswith("hvnet = 0.1.0") for p in provides)
    assert set(qp(rpms["hvnet"], "--recommends")) == {"netperf", "ethtool", "iperf3"}
    assert qp(rpms["hvnet"], "--suggests") == ["hvnet-plots"]
    assert qp(rpms["hvnet"], "--qf", "%{ARCH}") == ["x86_64"]
    assert qp(rpms["hvnet"], "--qf", "%{URL}") != ["(none)"]
    assert any(r.startswith("hvnet(x86-64) = 0.1.0-") for r in qp(rpms["hvnet-plots"], "--requires"))


def bundled(rpm: Path) -> dict[str, str]:
    out = {}
    for p in qp(rpm, "--provides"):
        m = re.fullmatch(r"bundled\(python3dist\((\S+)\)\) = (\S+)", p)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def test_every_vendored_library_is_provided_as_bundled_at_its_locked_version(rpms: dict[str, Path]) -> None:
    lock = dict(re.findall(r"^([a-z0-9][a-z0-9._-]*)==(\S+)", (ROOT / "rpm" / "vendor.lock").read_text(), re.M))
    main, plots = bundled(rpms["hvnet"]), bundled(rpms["hvnet-plots"])
    assert not set(main) & set(plots)
    # PyYAML and psutil are EL9's (Requires), not bundled
    assert {**main, **plots} == {k: v for k, v in lock.items() if k not in ("pyyaml", "psutil")}
    assert {"matplotlib", "numpy", "pillow"} <= set(plots) and {"textual", "rich", "xenapi"} <= set(main)


def test_packages_are_signed_with_the_shipped_key(rpms: dict[str, Path], tmp_path: Path) -> None:
    key = next(iter(rpms.values())).parent / "RPM-GPG-KEY-hvnet"
    db = tmp_path / "db"
    db.mkdir()
    res = run(["rpm", "--root", str(db), "-K", *map(str, rpms.values())])
    assert res.returncode != 0 and "SIGNATURES NOT OK" in res.stdout, res.stdout + res.stderr  # no key: unverified
    res = run(["rpm", "--root", str(db), "--import", str(key)])
    assert res.returncode == 0, res.stderr
    res = run(["rpm", "--root", str(db), "-K", *map(str, rpms.values())])
    assert res.returncode == 0 and res.stdout.count("digests signatures OK") == len(rpms), res.stdout + res.stderr


def test_netperf_files_and_dependencies(rpms: dict[str, Path]) -> None:
    got = files(rpms["netperf"])
    for path in ("/usr/bin/netperf", "/usr/bin/netserver", "/usr/share/man/man1/netperf.1.gz"):
        assert path in got
    assert qp(rpms["netperf"], "--qf", "%{LICENSE}") == ["MIT"]
    # built on Debian 12 (glibc 2.36) but must install on EL9 (glibc 2.34)
    versions = re.findall(r"GLIBC_(\d+)\.(\d+)", "\n".join(qp(rpms["netperf"], "--requires")))
    assert versions and max((int(a), int(b)) for a, b in versions) <= (2, 34), versions


def test_vendor_lock_matches_pyproject() -> None:
    res = run([sys.executable, str(ROOT / "rpm" / "vendor.py"), "check"])
    assert res.returncode == 0, res.stdout + res.stderr


def test_launcher_refuses_an_old_python_clearly(installed_root: Path) -> None:
    launcher = installed_root / "usr" / "bin" / "hvnet"
    code = (
        "import sys; sys.version_info = (3, 6, 8, 'final', 0); "
        f"exec(compile(open({str(launcher)!r}).read(), {str(launcher)!r}, 'exec'), "
        f"{{'__file__': {str(launcher)!r}, '__name__': '__main__'}})"
    )
    res = run(["/usr/bin/python3", "-I", "-c", code])
    assert res.returncode == 4
    assert "needs Python 3.9 or newer" in res.stderr and "3.6" in res.stderr, res.stderr


def test_installed_hvnet_runs_with_its_vendored_libraries(installed_root: Path) -> None:
    prefix = installed_root / PREFIX.lstrip("/")
    code = (
        "import sys; "
        f"sys.path[:0] = [{str(prefix / 'app')!r}, {str(prefix / 'vendor')!r}]; "
        "import textual, rich, yaml, psutil, XenAPI, numpy, matplotlib; "
        "matplotlib.use('Agg'); import matplotlib.pyplot; import tui.app, appliance.cli.main, appliance.switch.names; "
        "assert yaml.__with_libyaml__; "
        "print('\\n'.join(m.__file__ for m in (textual, numpy, matplotlib, tui.app, yaml, psutil)))"
    )
    res = run(["/usr/bin/python3", "-I", "-B", "-c", code], timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    paths = res.stdout.split()
    for path in paths[:4]:
        assert path.startswith(str(prefix)), f"{path} was not imported from the installed prefix"
    for path in paths[4:]:  # the OS's PyYAML and psutil (EL9: python3-pyyaml, python3-psutil)
        assert path.startswith("/usr/lib/python3"), f"{path} is not the OS's"
    res = run([str(installed_root / "usr" / "bin" / "hvnet"), "--version"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "hvnet 0.1.0"
    # the completion the package installed is the one the installed hvnet generates (vendored shtab)
    res = run([str(installed_root / "usr" / "bin" / "hvnet"), "completion", "bash"])
    assert res.returncode == 0, res.stderr
    shipped = installed_root / "usr" / "share" / "bash-completion" / "completions" / "hvnet"
    assert res.stdout == shipped.read_text() and "_shtab_hvnet_mirror_add_option_strings" in res.stdout
    # bytecode lands in the root's /var/cache/hvnet, never beside the packaged files
    assert (installed_root / "var" / "cache" / "hvnet" / "pycache").is_dir()
    assert not list(prefix.rglob("__pycache__"))


def test_make_repo_builds_a_signed_yum_repository(rpms: dict[str, Path], gpg_home: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    argv = [str(ROOT / "rpm" / "make-repo"), str(next(iter(rpms.values())).parent), str(repo)]
    # the secret key must be the one the packages were signed with
    other = tmp_path / "other-gnupg"
    other.mkdir(mode=0o700)
    res = run(argv, env={**os.environ, "HVNET_GPG_HOME": str(other)})
    assert res.returncode == 1 and "whose secret key is not in" in res.stderr, res.stdout + res.stderr
    res = run(argv, env={**os.environ, "HVNET_GPG_HOME": str(gpg_home)})
    assert res.returncode == 0, res.stderr
    assert (repo / "repodata" / "repomd.xml").is_file()
    assert sorted(p.name for p in (repo / "Packages").iterdir()) == sorted(p.name for p in rpms.values())
    conf = (repo / "hvnet.repo").read_text()
    assert "baseurl=" in conf and "\ngpgcheck=1\n" in conf and "\nrepo_gpgcheck=1\n" in conf and "gpgkey=" in conf
    # the metadata's signature checks out against the published key alone
    keyring = tmp_path / "keyring.gpg"  # gpgv's keyring: the published key, dearmored (no agent, no home)
    res = run(["gpg", "--batch", "--dearmor", "-o", str(keyring), str(repo / "RPM-GPG-KEY-hvnet")])
    assert res.returncode == 0, res.stderr
    verify = [
        "gpgv",
        "--keyring",
        str(keyring),
        str(repo / "repodata/repomd.xml.asc"),
        str(repo / "repodata/repomd.xml"),
    ]
    assert run(verify).returncode == 0
    (repo / "repodata/repomd.xml").write_text((repo / "repodata/repomd.xml").read_text() + "<!-- -->")
    assert run(verify).returncode != 0, "a changed repomd.xml must fail the check"


def test_build_scripts_say_what_is_missing(tmp_path: Path) -> None:
    empty = tmp_path / "none"
    empty.mkdir()
    res = run([str(ROOT / "rpm" / "make-repo"), str(empty), str(tmp_path / "repo")])
    assert res.returncode == 1 and "no RPMs in" in res.stderr and "make rpm" in res.stderr
    # a PATH with the shell's basics only: rpmbuild and friends are named
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "dirname").symlink_to("/usr/bin/dirname")
    res = run(["/bin/bash", str(ROOT / "rpm" / "build-rpms")], env={"PATH": str(bindir)})
    assert res.returncode == 1, res.stdout + res.stderr
    assert "missing tools:" in res.stderr and "rpmbuild" in res.stderr and "apt-get install" in res.stderr


def python39() -> str | None:
    """An interpreter of EL9's Python version, if this host has one."""
    candidates = [Path("/usr/bin/python3.9"), *sorted(Path.home().glob(".pyenv/versions/3.9*/bin/python3.9"))]
    return next((str(p) for p in candidates if p.exists()), None)


def test_installed_hvnet_runs_under_python39_like_el9(installed_root: Path, tmp_path: Path) -> None:
    exe = python39()
    if exe is None:
        pytest.skip("no python3.9 on this host: the vendored cp39 modules could not be imported here")
    # the host's OVS library stands in for EL9's python3-openvswitch; EL9's own versions of PyYAML
    # and psutil (python3-pyyaml 5.4.1, python3-psutil 5.8.0), which the RPM requires, are those
    # .ci/setup-host installs for python3.9
    el9_site = Path(os.environ.get("HVNET_EL9_SITE", "/var/cache/hvnet/el9-site"))
    if not (el9_site / "yaml").is_dir() or not (el9_site / "psutil").is_dir():
        pytest.fail(f"no PyYAML 5.4.1 and psutil 5.8.0 for python3.9 in {el9_site}: run .ci/setup-host")
    shim = tmp_path / "os-site"
    shim.mkdir()
    (shim / "ovs").symlink_to("/usr/lib/python3/dist-packages/ovs")
    for entry in el9_site.iterdir():
        (shim / entry.name).symlink_to(entry)
    prefix = installed_root / PREFIX.lstrip("/")
    code = (
        "import sys; "
        f"sys.path[:0] = [{str(prefix / 'app')!r}, {str(prefix / 'vendor')!r}]; sys.path.append({str(shim)!r}); "
        "import textual, yaml, psutil, XenAPI, numpy, matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt; "
        "import tui.app, appliance.cli.main, appliance.switch.names, appliance.netperf.run.launch; assert yaml.__with_libyaml__; "
        "assert (yaml.__version__, psutil.__version__) == ('5.4.1', '5.8.0'); "
        # YAML the package ships, read by PyYAML 5.4.1 (marks, merge keys, errors as hvnet reports them)
        "from pathlib import Path; from appliance.policy import load; from appliance.endpoints.topology import load as topo; "
        f"assert [load(str(p)) for p in Path({str(prefix / 'app/policies')!r}).glob('*.yaml')]; "
        f"assert [topo(p) for p in Path({str(prefix / 'app/vlan-tests/topologies')!r}).glob('*.yaml')]; "
        f"fig = plt.figure(); plt.plot([1, 2], [3, 4]); fig.savefig({str(tmp_path / 'plot.png')!r}); "
        "sys.argv = ['hvnet', '--version']; sys.exit(appliance.cli.main.main())"
    )
    res = run([exe, "-I", "-B", "-c", code], timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "hvnet 0.1.0"
    assert (tmp_path / "plot.png").stat().st_size > 1000


def _saved_run(directory: Path) -> Path:
    """A run directory as 'hvnet suite run' leaves it (results.json only)."""
    import json

    from tests.unit.netperf.test_netperf_results import run_doc, step_doc

    directory.mkdir()
    doc = run_doc(step_doc("tcp-stream/default/m10000/c4", [1000.0, 1010.0, 990.0]))
    (directory / "results.json").write_text(json.dumps(doc))
    return directory


def test_suite_report_draws_plots_with_hvnet_plots_and_says_how_to_get_them_without(
    rpms: dict[str, Path], installed_root: Path, tmp_path: Path
) -> None:
    run_dir = _saved_run(tmp_path / "run-with")
    res = run([str(installed_root / "usr/bin/hvnet"), "suite", "report", str(run_dir)], timeout=120)
    assert res.returncode == 0 and "plot: " in res.stdout, res.stdout + res.stderr
    assert list((run_dir / "plots").glob("*.png"))
    # hvnet alone: the report's tables, and what to install for the plots
    root = tmp_path / "hvnet-only"
    res = run(["rpm", "--root", str(root), "--nodeps", "--noscripts", "-i", str(rpms["hvnet"])], timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    run_dir = _saved_run(tmp_path / "run-without")
    res = run([str(root / "usr/bin/hvnet"), "suite", "report", str(run_dir)], timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "tcp-stream" in res.stdout and "plot: " not in res.stdout, res.stdout
    assert "dnf install hvnet-plots" in res.stderr, res.stderr
    assert not (run_dir / "plots").exists()
