#!/usr/bin/env python3
"""The corpus: real GPU software as people install it, slimmed and checked.

Fetches pinned wheels (PyPI, `pip download --no-deps`) and Debian trixie
packages (`apt-get download` from a private package list; this machine's
apt sources are not touched), unpacks them under the cache, finds every
file that holds GPU code (`offload-probe --json`), slims each for sm_80,
sm_90, gfx90a and gfx1100 (`offload-probe slim --output`), and checks every
result with tools this project did not write:

  readelf -hlSW     reads the result without a warning
  nm -D / nm        the same dynamic symbols (archives and objects: nm)
  strip             `strip --strip-unneeded` works on a copy
  dlopen            loads as the original does (the same error, or none),
                    its directory on LD_LIBRARY_PATH
  cuobjdump         NVIDIA: lists the result's images; the device's cubins
                    are counted before and after
  roc-obj-ls        AMD: lists the result's code objects; the device's
                    are counted before and after

and prints one line per file and device: compacted / holes / whole /
other-gpus / refused, the sizes, the reason, and any check that failed.
Exit status 1 when a check failed or a file was refused.

Usage: .ci/corpus.py [--only NAME ...] [--devices sm_90,...] [--probe PATH]
Runs outside CI (gigabytes of downloads): its table is in BENCHMARKS.md.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# (name, kind, spec): kind is "wheel" (pip requirement) or "deb" (Debian
# trixie package=version). Versions pinned: the table must be repeatable.
CORPUS = [
    ("torch", "wheel", "torch==2.15.0"),
    ("vllm", "wheel", "vllm==0.33.0"),
    ("jax-cuda12-plugin", "wheel", "jax-cuda12-plugin==0.12.0.1"),
    ("jax-cuda12-pjrt", "wheel", "jax-cuda12-pjrt==0.12.0.1"),
    ("cudnn-cu12", "wheel", "nvidia-cudnn-cu12==9.28.0.42"),
    ("cusparselt-cu12", "wheel", "nvidia-cusparselt-cu12==0.8.1"),
    ("nvshmem-cu13", "wheel", "nvidia-nvshmem-cu13==3.8.0"),
    ("cufft-cu12", "wheel", "nvidia-cufft-cu12==11.4.1.4"),
    ("cublas-cu12", "wheel", "nvidia-cublas-cu12==12.9.3.13"),
    ("nccl-cu13", "wheel", "nvidia-nccl-cu13==2.32.3"),
    ("cupy-rocm-7-0", "wheel", "cupy-rocm-7-0==14.2.0"),
    ("rocsparse", "deb", "librocsparse0=5.7.1-6"),
    ("rocblas", "deb", "librocblas0=5.5.1+dfsg-7"),
    ("rocsolver", "deb", "librocsolver0=5.5.1-7"),
    ("rocfft", "deb", "librocfft0=6.1.2-1"),
    ("rccl", "deb", "librccl1=5.4.3-3+b1"),
]

DEVICES = ["sm_80", "sm_90", "gfx90a", "gfx1100"]


def cache_dir() -> Path:
    root = os.environ.get("OFFLOAD_LOADER_CACHE") or os.path.expanduser(
        "~/.cache/offload-loader"
    )
    return Path(root) / "corpus"


def fetch(name: str, kind: str, spec: str) -> Path:
    """The unpacked tree of one corpus entry (downloaded once)."""
    dest = cache_dir() / name
    stamp = dest.with_suffix(".stamp")
    if stamp.is_file() and stamp.read_text() == spec and dest.is_dir():
        return dest
    work = Path(tempfile.mkdtemp(prefix=f"corpus-{name}-"))
    try:
        if kind == "wheel":
            # The wheel for this Python, else for CPython 3.12 on Linux
            # x86-64 (jax's plugins are built for 3.12 and later only).
            pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                   "-d", str(work), spec]
            if subprocess.run(pip).returncode != 0:
                platforms = []
                for tag in ("manylinux_2_28", "manylinux_2_27", "manylinux_2_17",
                            "manylinux2014"):
                    platforms += ["--platform", f"{tag}_x86_64"]
                subprocess.run(pip + ["--only-binary=:all:", "--python-version", "3.12"]
                               + platforms, check=True)
            (archive,) = list(work.glob("*.whl"))
            shutil.rmtree(dest, ignore_errors=True)
            with zipfile.ZipFile(archive) as z:
                z.extractall(dest)
            for member in dest.rglob("*"):
                if member.is_file() and (".so" in member.name or member.suffix == ".a"):
                    member.chmod(0o755)
        else:
            lists = work / "lists"
            (lists / "partial").mkdir(parents=True)
            (work / "cache" / "archives" / "partial").mkdir(parents=True)
            (work / "sources.list").write_text(
                "deb http://deb.debian.org/debian trixie main\n"
            )
            apt = ["apt-get", "-q",
                   "-o", f"Dir::Etc::SourceList={work / 'sources.list'}",
                   "-o", "Dir::Etc::SourceParts=/dev/null",
                   "-o", f"Dir::State::Lists={lists}",
                   "-o", f"Dir::Cache={work / 'cache'}",
                   "-o", "Debug::NoLocking=1"]
            subprocess.run(apt + ["update"], check=True, stdout=subprocess.DEVNULL)
            subprocess.run(apt + ["download", spec], check=True, cwd=work,
                           stdout=subprocess.DEVNULL)
            (deb,) = list(work.glob("*.deb"))
            shutil.rmtree(dest, ignore_errors=True)
            subprocess.run(["dpkg", "-x", str(deb), str(dest)], check=True)
        stamp.write_text(spec)
        return dest
    finally:
        shutil.rmtree(work, ignore_errors=True)


def gpu_files(probe: str, tree: Path) -> list:
    """The regular files under `tree` that hold GPU code, by the probe."""
    out = subprocess.run([probe, str(tree), "--json"], capture_output=True, text=True)
    report = json.loads(out.stdout)
    files = set()
    for o in report.get("objects", []):
        # Reported under a name that may be a symbolic link: the file.
        path = Path(o["path"]).resolve()
        if o.get("containers") and path.is_file():
            files.add(path)
    return sorted(files)


def tool(*names):
    for n in names:
        found = shutil.which(n)
        if found:
            return found
    return None


def cuobjdump() -> str:
    found = tool("cuobjdump")
    if found:
        return found
    cached = Path(os.path.expanduser("~/.cache/offload-loader/cuda13/nvidia/cu13/bin/cuobjdump"))
    return str(cached) if cached.is_file() else None


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def device_images(path: Path, device: str) -> int:
    """How many images for `device` the vendor's tool lists in `path`
    (-1: the tool failed on it)."""
    if device.startswith("sm_"):
        cuobj = cuobjdump()
        if not cuobj:
            return -1
        r = run([cuobj, "--list-elf", str(path)])
        if r.returncode != 0 and "does not contain device code" not in r.stderr:
            return -1
        return sum(1 for l in r.stdout.splitlines()
                   if f".{device}." in l or f".{device}a." in l or f".{device}f." in l)
    r = run(["roc-obj-ls", str(path)])
    if r.returncode != 0:
        return -1
    # "N  hipv4-amdgcn-amd-amdhsa--gfx1100  file://...": the entry's ID.
    ids = [l.split()[1] for l in r.stdout.splitlines() if len(l.split()) > 2]
    return sum(1 for i in ids if i.endswith(f"--{device}") or f"--{device}:" in i)


def symbols(path: Path) -> str:
    dynamic = path.suffix not in (".a", ".o")
    r = run(["nm", "-D" if dynamic else "-A", str(path)])
    return r.stdout if dynamic else "\n".join(
        l.split(":", 1)[-1] for l in r.stdout.splitlines())


DLOPEN = ("import ctypes, sys\n"
          "try:\n    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)\n    print('ok')\n"
          "except OSError as e:\n    print(str(e).replace(sys.argv[1], 'FILE'))\n")


def loads(path: Path, libdir: Path) -> str:
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    r = run([sys.executable, "-c", DLOPEN, str(path)], env=env)
    return r.stdout.strip() or r.stderr.strip()[-200:]


def checks(original: Path, result: Path, device: str) -> list:
    """The checks that failed on `result` (the slimmed `original`)."""
    failed = []
    r = run(["readelf", "-hlSW", str(result)])
    if r.returncode != 0 or "Warning" in r.stderr or "Error" in r.stderr:
        failed.append("readelf: " + r.stderr.strip()[:120])
    if symbols(original) != symbols(result):
        failed.append("nm: the symbols differ")
    with tempfile.TemporaryDirectory() as t:
        copy = Path(t) / result.name
        shutil.copy(result, copy)
        r = run(["strip", "--strip-unneeded", str(copy)])
        if r.returncode != 0:
            failed.append("strip: " + r.stderr.strip()[:120])
    if ".so" in original.name:
        a, b = loads(original, original.parent), loads(result, original.parent)
        if a != b:
            failed.append(f"dlopen: {a!r} became {b!r}")
    before, after = device_images(original, device), device_images(result, device)
    if after < 0 <= before:
        failed.append("the vendor's tool cannot list the result")
    return failed, (before, after)


def slim(probe: str, path: Path, device: str, out: Path) -> dict:
    r = run([probe, "slim", str(path), "--device", device, "--output", str(out),
             "--json"], env=dict(os.environ, OFFLOAD_LOADER_DEVICES=""))
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        return {"files": [{"error": (r.stderr or r.stdout)[:200], "before": 0, "after": 0}]}


def mib(n: int) -> str:
    return f"{n / 1048576:.1f}"


def line(probe: str, path: Path, device: str, tree: Path) -> tuple:
    with tempfile.TemporaryDirectory(dir=cache_dir()) as t:
        out = Path(t)
        report = slim(probe, path, device, out)
        f = (report.get("files") or [{}])[0]
        before, after = f.get("before", 0), f.get("after", 0)
        holes = sum(h.get("bytes", 0) for h in f.get("holes") or [])
        result = out / path.name
        if f.get("error"):
            return "refused", before, after, f["error"][:160], []
        if f.get("other_gpus"):
            return "other-gpus", before, 0, "GPU code for other GPUs only", []
        if not f.get("written"):
            left = "; ".join(f"{s['section']}: {s['reason']}" for s in f.get("sections_left") or [])
            return "whole", before, before, left or "nothing here for this device to remove", []
        failed, counts = checks(path, result, device)
        status = "compacted" if after < before else "holes"
        why = "; ".join(h.get("reason", "") for h in f.get("holes") or [])[:160]
        if holes and after < before:
            status = "compacted+holes"
        extra = (f"{device} images {counts[0]} -> {counts[1]}"
                 if counts[0] >= 0 else f"no {device} images")
        return status, before, after, (why + " " if why else "") + extra, failed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[],
                    help="corpus entries to run (default: all): " +
                         ", ".join(n for n, _, _ in CORPUS))
    ap.add_argument("--devices", default=",".join(DEVICES))
    ap.add_argument("--probe", default=str(Path(__file__).resolve().parent.parent
                                           / "target/release/offload-probe"))
    args = ap.parse_args()
    devices = args.devices.split(",")
    cache_dir().mkdir(parents=True, exist_ok=True)
    bad = 0
    print("| entry | file | device | outcome | MiB before | MiB after | reason, images | failed checks |")
    print("|---|---|---|---|---|---|---|---|")
    for name, kind, spec in CORPUS:
        if args.only and name not in args.only:
            continue
        try:
            tree = fetch(name, kind, spec)
        except (subprocess.CalledProcessError, ValueError, OSError) as e:
            bad += 1
            print(f"| {name} | {spec} | | fetch failed | | | {e} | |", flush=True)
            continue
        for path in gpu_files(args.probe, tree):
            for device in devices:
                status, before, after, why, failed = line(args.probe, path, device, tree)
                bad += status == "refused" or bool(failed)
                print(f"| {name} | {path.relative_to(tree.resolve())} | {device} | {status} | "
                      f"{mib(before)} | {mib(after)} | {why} | {'; '.join(failed)} |",
                      flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
