#!/usr/bin/env python3
"""The Python libraries hvnet's RPM carries in its private prefix.

Enterprise Linux does not ship textual, rich and friends (and ships older
PyYAML/psutil), so the RPM brings the exact versions hvnet is tested with,
in %{_libdir}/hvnet/vendor, where nothing else looks.  One tree serves two
interpreters: EL9's python3.9 and python3.11 (the build host's, on which the
scratch-root test runs the installed hvnet).  Extension modules carry their
ABI in the file name (``_yaml.cpython-39-x86_64-linux-gnu.so`` next to
``_yaml.cpython-311-x86_64-linux-gnu.so``) and psutil is abi3, so the wheels
for both interpreters are unpacked into the same directory.

    vendor.py lock   [--lock FILE]                 resolve pyproject's pins for 3.9 (the oldest
                                                   target) and write the lock: every package,
                                                   exact version, sha256 of every wheel
    vendor.py check  [--lock FILE]                 the lock's top-level pins are pyproject's
    vendor.py build  --cache DIR --out TARBALL     download (once, hash-checked) and merge

Runs under a Python that has pip (build-rpms makes a venv for it); the
environment markers of every requirement are evaluated for each target
interpreter, so a python3.9-only dependency (importlib-resources) is in.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

# pip's own copy of 'packaging': the venv that runs this needs nothing but pip
from pip._vendor.packaging.requirements import Requirement
from pip._vendor.packaging.utils import canonicalize_name
from pip._vendor.packaging.version import Version

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LOCK = HERE / "vendor.lock"

# Target interpreters: (version, ABI tag).  3.9 is EL9's python3, 3.11 Debian 12's.
PYTHONS = (("3.9", "cp39"), ("3.11", "cp311"))
# manylinux tags up to glibc 2.28 (EL8 and newer, Debian 10 and newer); pip does
# not widen a --platform to older manylinux tags by itself.
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_12_x86_64",
    "manylinux2010_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
)
# Dropped from the vendored tree: test suites ("tests" below the top, tens of MB
# for numpy), console-script wrappers (their shebang is the build host's
# interpreter), type stubs, and what only compiling against numpy needs.
DROP_TOP = {"bin"}
DROP_DIRS = {"numpy/_core/include", "numpy/_core/lib", "numpy/random/lib", "numpy/random/_examples"}
DROP_SUFFIXES = (".pyi", ".a")
# Build-information modules that record the interpreter a wheel was built for;
# they differ between the wheels and are informational only: the first
# (python3.9) copy is kept.
BUILD_INFO = {"numpy/__config__.py", "contourpy/util/_build_config.py"}


class VendorError(Exception):
    pass


def die(msg: str) -> None:
    print(f"vendor: ERROR: {msg}", file=sys.stderr)
    raise SystemExit(1)


def say(msg: str) -> None:
    print(f"vendor: {msg}", flush=True)


def pyproject_pins() -> dict[str, str]:
    """name -> exact version of [project].dependencies (every one must be ==)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib

        deps = tomllib.loads(text)["project"]["dependencies"]
    except ModuleNotFoundError:  # python < 3.11: the list is simple enough to read
        block = re.search(r"^dependencies\s*=\s*\[(.*?)^\]", text, re.S | re.M)
        if not block:
            raise VendorError("pyproject.toml: no [project] dependencies list") from None
        deps = re.findall(r'^\s*"([^"]+)"', block.group(1), re.M)
    pins = {}
    for d in deps:
        req = Requirement(d)
        spec = list(req.specifier)
        if len(spec) != 1 or spec[0].operator != "==":
            raise VendorError(f"pyproject.toml: {d!r} is not an exact pin (name==version)")
        pins[canonicalize_name(req.name)] = spec[0].version
    return pins


def marker_env(pyver: str, extra: str = "") -> dict[str, str]:
    return {
        "python_version": pyver,
        "python_full_version": pyver + ".0",
        "implementation_name": "cpython",
        "implementation_version": pyver + ".0",
        "platform_python_implementation": "CPython",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "sys_platform": "linux",
        "os_name": "posix",
        "platform_release": "",
        "platform_version": "",
        "extra": extra,
    }


def wheel_meta(path: Path) -> tuple[str, str, list[str], str]:
    """(canonical name, version, Requires-Dist lines, Requires-Python) of a wheel."""
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        msg = email.parser.Parser().parsestr(z.read(name).decode("utf-8"))
    return (
        canonicalize_name(msg["Name"]),
        msg["Version"],
        msg.get_all("Requires-Dist") or [],
        msg.get("Requires-Python") or "",
    )


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise VendorError(f"pip {args[0]} failed:\n{r.stdout[-2000:]}{r.stderr[-3000:]}")


def target_args(pyver: str, abi: str) -> list[str]:
    out = ["--only-binary=:all:", "--python-version", pyver, "--implementation", "cp"]
    for a in (abi, "abi3", "none"):
        out += ["--abi", a]
    for p in PLATFORMS:
        out += ["--platform", p]
    return out


def closure_problems(wheels: dict[str, tuple[str, list[str], str]], roots: list[str], pyver: str) -> list[str]:
    """What the set of wheels lacks for ``roots`` on python ``pyver`` (markers and extras honoured)."""
    problems = []
    for name, line, dep in _requirements(wheels, roots, pyver):
        if dep not in wheels:
            problems.append(f"{name} needs {line!r} on python {pyver}; it is not in the set")
        elif not Requirement(line).specifier.contains(Version(wheels[dep][0]), prereleases=True):
            problems.append(f"{name} {wheels[name][0]} needs {line!r}; the set has {dep} {wheels[dep][0]}")
    return problems


def _requirements(
    wheels: dict[str, tuple[str, list[str], str]], roots: list[str], pyver: str
) -> list[tuple[str, str, str]]:
    """(requiring package, Requires-Dist line, required name) for everything ``roots``
    pull in on python ``pyver``, as far as the set's wheels say."""
    out = []
    seen: set[tuple[str, str]] = set()
    todo = [(r, "") for r in roots]
    while todo:
        name, extra = todo.pop()
        if (name, extra) in seen or name not in wheels:
            continue
        seen.add((name, extra))
        for line in wheels[name][1]:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(marker_env(pyver, extra)):
                continue
            dep = canonicalize_name(req.name)
            out.append((name, line, dep))
            todo.append((dep, ""))
            todo.extend((dep, e) for e in req.extras)
    return out


def scan(directory: Path) -> dict[str, tuple[str, list[str], str]]:
    out = {}
    for w in sorted(directory.glob("*.whl")):
        name, version, requires, rp = wheel_meta(w)
        out[name] = (version, requires, rp)
    return out


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# -- lock --------------------------------------------------------------------------


def cmd_lock(args: argparse.Namespace) -> None:
    pins = pyproject_pins()
    roots = sorted(pins)
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {}
        for _pyver, abi in PYTHONS:
            d = Path(tmp) / abi
            d.mkdir()
            dirs[abi] = d
        # Resolve on the oldest target.  pip evaluates markers for the running
        # interpreter, so add what the target's markers want and repeat.
        oldest, oldest_abi = PYTHONS[0]
        reqs = [f"{n}=={v}" for n, v in pins.items()]
        for _ in range(10):
            pip("download", "-q", "-d", str(dirs[oldest_abi]), *target_args(oldest, oldest_abi), *reqs)
            wheels = scan(dirs[oldest_abi])
            reqs = sorted(
                {
                    str(Requirement(line)).split(";")[0]
                    for _, line, dep in _requirements(wheels, roots, oldest)
                    if dep not in wheels
                }
            )
            if not reqs:
                break
        else:
            raise VendorError("dependency resolution did not converge")
        problems = closure_problems(wheels, roots, oldest)
        if problems:
            raise VendorError("resolution for python " + oldest + ":\n  " + "\n  ".join(problems))
        chosen = {n: v[0] for n, v in wheels.items()}
        for n, v in pins.items():
            if chosen.get(n) != v:
                raise VendorError(f"{n}: resolved {chosen.get(n)} but pyproject pins {v}")
        # The same versions for every other target.
        for pyver, abi in PYTHONS[1:]:
            pip(
                "download",
                "-q",
                "--no-deps",
                "-d",
                str(dirs[abi]),
                *target_args(pyver, abi),
                *[f"{n}=={v}" for n, v in sorted(chosen.items())],
            )
            problems = closure_problems(scan(dirs[abi]), roots, pyver)
            if problems:
                raise VendorError(f"the python {oldest} set does not work on {pyver}:\n  " + "\n  ".join(problems))
        hashes: dict[str, set[str]] = {n: set() for n in chosen}
        for d in dirs.values():
            for w in d.glob("*.whl"):
                hashes[wheel_meta(w)[0]].add(sha256(w))
    lines = [
        "# The Python libraries vendored into hvnet's RPM: every package, its exact version and the",
        "# sha256 of each wheel used (one per target python, or one for pure/abi3 wheels).",
        "# Generated by 'rpm/vendor.py lock' from pyproject.toml's pins; do not edit by hand.",
        "# Targets: " + ", ".join(f"python{p} ({a})" for p, a in PYTHONS),
        "# pyproject.toml pins: " + " ".join(sorted(pins)),
    ]
    for n in sorted(chosen):
        lines.append(f"{n}=={chosen[n]}")
        lines.extend(f"    --hash=sha256:{h}" for h in sorted(hashes[n]))
    text = "\n".join(_join_continuations(lines)) + "\n"
    Path(args.lock).write_text(text, encoding="utf-8")
    say(f"wrote {args.lock}: {len(chosen)} packages")


def _join_continuations(lines: list[str]) -> list[str]:
    """requirements.txt syntax: 'pkg==1 \\' + indented '--hash=...' lines."""
    out: list[str] = []
    for i, line in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        out.append(line + (" \\" if nxt.startswith("    --hash") and not line.startswith("#") else ""))
    return out


def read_lock(path: Path) -> tuple[dict[str, str], set[str]]:
    """(name -> version, names pinned in pyproject) from the lock file."""
    versions: dict[str, str] = {}
    top: set[str] = set()
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("# pyproject.toml pins:"):
            top.update(line.split(":", 1)[1].split())
        if not line or line.startswith("#") or line.startswith("--hash"):
            continue
        req = Requirement(line.replace("\\", "").strip())
        versions[canonicalize_name(req.name)] = next(iter(req.specifier)).version
    return versions, top


def cmd_check(args: argparse.Namespace) -> None:
    pins = pyproject_pins()
    versions, top = read_lock(Path(args.lock))
    bad = [f"{n}: pyproject {v}, lock {versions.get(n)}" for n, v in pins.items() if versions.get(n) != v]
    bad += [f"{n}: marked as a pyproject pin in the lock but not in pyproject.toml" for n in top - set(pins)]
    if bad:
        die("the lock does not match pyproject.toml (run: rpm/vendor.py lock):\n  " + "\n  ".join(bad))
    say(f"lock matches pyproject.toml ({len(pins)} pins, {len(versions)} packages)")


# -- build ---------------------------------------------------------------------------


def cmd_build(args: argparse.Namespace) -> None:
    lock = Path(args.lock)
    pins = pyproject_pins()
    versions, _ = read_lock(lock)
    for n, v in pins.items():
        if versions.get(n) != v:
            raise VendorError(f"{lock} pins {n} {versions.get(n)}, pyproject.toml {v}: run 'rpm/vendor.py lock'")
    key = hashlib.sha256(lock.read_bytes() + Path(__file__).read_bytes()).hexdigest()[:16]
    cache = Path(args.cache)
    out = Path(args.out)
    cached_tar = cache / f"vendor-{key}.tar.gz"
    if cached_tar.exists():
        say(f"using the cached vendor tree {cached_tar.name}")
    else:
        trees = []
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            for pyver, abi in PYTHONS:
                wheels_dir = cache / "wheels" / abi
                wheels_dir.mkdir(parents=True, exist_ok=True)
                stamp = wheels_dir / f".complete-{hashlib.sha256(lock.read_bytes()).hexdigest()[:16]}"
                if not stamp.exists():
                    say(f"downloading wheels for python {pyver} (hash-checked against {lock.name})")
                    pip(
                        "download",
                        "-q",
                        "--no-deps",
                        "--require-hashes",
                        "-r",
                        str(lock),
                        "-d",
                        str(wheels_dir),
                        *target_args(pyver, abi),
                    )
                    stamp.touch()
                wanted = _wanted_wheels(wheels_dir, versions)
                problems = closure_problems(scan_files(wanted), sorted(pins), pyver)
                if problems:
                    raise VendorError(f"python {pyver}: " + "; ".join(problems))
                tree = Path(tmp) / abi
                pip(
                    "install",
                    "-q",
                    "--no-deps",
                    "--no-index",
                    "--no-compile",
                    "--target",
                    str(tree),
                    *target_args(pyver, abi),
                    *[str(w) for w in wanted],
                )
                trees.append(tree)
            merged = Path(tmp) / "vendor"
            conflicts = merge(trees, merged)
            if conflicts:
                raise VendorError("files differ between the interpreters' wheels:\n  " + "\n  ".join(conflicts[:20]))
            unpaired = check_extensions(merged)
            if unpaired:
                raise VendorError("extension modules built for one interpreter only:\n  " + "\n  ".join(unpaired))
            part = cached_tar.with_suffix(".part")
            with tarfile.open(part, "w:gz", compresslevel=3) as tar:
                tar.add(merged, arcname="vendor", filter=_normalise)
            part.rename(cached_tar)
            say(f"vendor tree cached as {cached_tar.name}")
        for old in cache.glob("vendor-*.tar.gz"):
            if old != cached_tar:
                old.unlink()
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cached_tar, out)


def scan_files(files: list[Path]) -> dict[str, tuple[str, list[str], str]]:
    out = {}
    for w in files:
        name, version, requires, rp = wheel_meta(w)
        out[name] = (version, requires, rp)
    return out


def _wanted_wheels(wheels_dir: Path, versions: dict[str, str]) -> list[Path]:
    """The cached wheel of each locked package (the cache may hold older versions too)."""
    found: dict[str, Path] = {}
    for w in wheels_dir.glob("*.whl"):
        dist, ver = w.name.split("-")[:2]
        name = canonicalize_name(dist)
        if versions.get(name) == ver or (name in versions and Version(ver) == Version(versions[name])):
            found[name] = w
    missing = sorted(set(versions) - set(found))
    if missing:
        raise VendorError(f"wheels missing from {wheels_dir}: {', '.join(missing)} (delete its .complete-* stamp)")
    return [found[n] for n in sorted(found)]


def merge(trees: list[Path], dest: Path) -> list[str]:
    """Copy every tree into ``dest``; identical files once, differing files reported."""
    conflicts = []
    for tree in trees:
        for src in sorted(tree.rglob("*")):
            rel = src.relative_to(tree)
            parts = rel.parts
            if (
                parts[0] in DROP_TOP
                or "tests" in parts[1:]
                or "__pycache__" in parts
                or rel.name.endswith(DROP_SUFFIXES)
                or any(rel.as_posix() == d or rel.as_posix().startswith(d + "/") for d in DROP_DIRS)
            ):
                continue
            target = dest / rel
            if src.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            if target.exists():
                if target.read_bytes() == _library_bytes(src):
                    continue
                if ".dist-info" in parts[0] or rel.as_posix() in BUILD_INFO:
                    continue  # RECORD lists the other interpreter's files; the first tree's is kept
                conflicts.append(f"{rel} ({tree.name})")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(_library_bytes(src))
            shared = src.suffix == ".so" or ".so." in src.name
            target.chmod(0o755 if shared else 0o644)
    return conflicts


def _library_bytes(path: Path) -> bytes:
    """A vendored file's content as packaged: a module's '#!' line (never used:
    nothing runs vendored modules as scripts) becomes a plain comment, keeping
    line numbers.  Files are installed 0644, shared objects 0755."""
    data = path.read_bytes()
    if path.suffix in (".py", ".pyx") and data.startswith(b"#!"):
        return b"# " + data[2:]
    return data


_EXT = re.compile(r"^(?P<base>.+)\.cpython-(?P<abi>\d+)-x86_64-linux-gnu\.so$")


def check_extensions(tree: Path) -> list[str]:
    """Every cpython-XY extension must exist for each target interpreter."""
    abis = {a.removeprefix("cp") for _, a in PYTHONS}
    by_base: dict[str, set[str]] = {}
    for so in tree.rglob("*.so"):
        m = _EXT.match(so.name)
        if m:
            by_base.setdefault(str(so.parent / m.group("base")), set()).add(m.group("abi"))
    return [f"{Path(b).relative_to(tree)}: {sorted(a)}" for b, a in sorted(by_base.items()) if a != abis]


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = (info.mode | 0o644) & 0o755 if not info.isdir() else 0o755
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lock", default=str(LOCK))
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("lock")
    sub.add_parser("check")
    b = sub.add_parser("build")
    b.add_argument("--cache", required=True)
    b.add_argument("--out", required=True)
    args = ap.parse_args()
    os.umask(0o022)
    try:
        {"lock": cmd_lock, "check": cmd_check, "build": cmd_build}[args.cmd](args)
    except VendorError as e:
        die(str(e))


if __name__ == "__main__":
    main()
