"""Ray's wheel without what a local cluster of actors never loads, small enough to carry to a machine
without network, and still an ordinary wheel that pip installs.

    python bench/slim_ray.py ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl --out .whl

Writes OUT/<the same file name> and prints the sizes. Ray 2.60's wheel is 76 MiB (201 MiB unpacked): the
Java jars (33 MiB), the dashboard's web UI build, the libraries (RLlib, Tune, Train, Serve, Data, LLM,
AIR, workflows), tests and Cython sources; and its three native programs (`_raylet.so`, `raylet`,
`gcs_server`, 116 MiB) carry their symbol tables. `ray.init(include_dashboard=False)` with actors
starts the GCS, the raylet, the runtime-env agent, the dashboard's agent and a headless minimal
dashboard process, a log monitor and the autoscaler's monitor, and none of them imports what DROPPED
names (traced with an audit hook on every file those processes open). So the slim wheel:
- leaves out DROPPED (and every `tests/` folder, `.pyx`/`.pxd`/`.pxi`/`.pyi`);
- strips the ELF files' symbol tables (`strip --strip-unneeded`: the dynamic symbols that loading needs
  stay; crash stack traces lose function names);
- compresses every member with LZMA (zip method 14, which Python's zipfile, and so pip, reads) instead
  of deflate, which takes the native programs from 34 to 20 MiB;
- rewrites RECORD (new hashes and sizes) and drops the console scripts of the removed libraries.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

DROPPED = ("ray/jars/", "ray/dashboard/client/", "ray/rllib/", "ray/tune/", "ray/train/", "ray/serve/",
           "ray/data/", "ray/llm/", "ray/air/", "ray/workflow/", "ray/includes/", "ray/util/dask/",
           "ray/util/joblib/", "ray/util/lightgbm/", "ray/util/xgboost/", "ray/util/horovod/", "ray/util/spark/",
           "ray/util/sgd/", "ray/setup-dev.py")
DROPPED_SUFFIXES = (".pyx", ".pxd", ".pxi", ".pyi")
DROPPED_SCRIPTS = ("serve", "tune", "rllib")  # console scripts whose packages are gone
ELF_MAGIC = b"\x7fELF"


def dropped(name: str) -> bool:
    return name.startswith(DROPPED) or name.endswith(DROPPED_SUFFIXES) or "/tests/" in name


def stripped(data: bytes, strip: str | None) -> bytes:
    """The ELF file without its symbol table (unchanged where `strip` is missing or fails)."""
    if strip is None or not data.startswith(ELF_MAGIC):
        return data
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "elf"
        path.write_bytes(data)
        if subprocess.run([strip, "--strip-unneeded", str(path)], capture_output=True).returncode != 0:
            return data
        return path.read_bytes()


def without_scripts(entry_points: str) -> str:
    return "".join(line for line in entry_points.splitlines(keepends=True)
                   if line.split("=")[0].strip() not in DROPPED_SCRIPTS)


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def slim(wheel: Path, out_dir: Path, strip: bool = True) -> dict:
    """Write the slim copy of `wheel` into out_dir; the sizes before and after."""
    strip_tool = shutil.which("strip") if strip else None
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / wheel.name
    if target.resolve() == wheel.resolve():
        raise SystemExit(f"slim_ray: {wheel} would overwrite itself; give another --out folder")
    kept = removed = unpacked = 0
    records = []
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_LZMA) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        for info in src.infolist():
            name = info.filename
            if name == record_name or info.is_dir():
                continue
            if dropped(name):
                removed += info.file_size
                continue
            data = src.read(name)
            if name.endswith(".dist-info/entry_points.txt"):
                data = without_scripts(data.decode()).encode()
            data = stripped(data, strip_tool)
            member = zipfile.ZipInfo(name, date_time=info.date_time)
            member.external_attr = info.external_attr  # keeps the programs executable
            member.compress_type = zipfile.ZIP_LZMA
            dst.writestr(member, data)
            records.append(record_line(name, data))
            kept += info.file_size
            unpacked += len(data)
        records.append(f"{record_name},,\n")
        dst.writestr(zipfile.ZipInfo(record_name, date_time=(2020, 1, 1, 0, 0, 0)), "".join(records))
    return {"wheel": str(target), "original_mib": round(wheel.stat().st_size / 2**20, 1),
            "slim_mib": round(target.stat().st_size / 2**20, 1), "dropped_unpacked_mib": round(removed / 2**20, 1),
            "kept_unpacked_mib": round(unpacked / 2**20, 1), "stripped": strip_tool is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("wheel", type=Path, help="Ray's wheel, as pip downloaded it")
    parser.add_argument("--out", type=Path, default=Path(".whl"), help="folder for the slim wheel (default .whl)")
    parser.add_argument("--no-strip", action="store_true", help="keep the native programs' symbol tables")
    args = parser.parse_args()
    if not args.wheel.is_file() or not args.wheel.name.startswith("ray-") or args.wheel.suffix != ".whl":
        print(f"slim_ray: {args.wheel} is not a Ray wheel file (ray-VERSION-...whl)", file=sys.stderr)
        sys.exit(2)
    sizes = slim(args.wheel, args.out, strip=not args.no_strip)
    print(f"{sizes['wheel']}: {sizes['slim_mib']} MiB (the original {sizes['original_mib']} MiB); "
          f"{sizes['dropped_unpacked_mib']} MiB of files left out, {sizes['kept_unpacked_mib']} MiB installed"
          + ("" if sizes["stripped"] else "; not stripped (no `strip` program)"))


if __name__ == "__main__":
    main()
