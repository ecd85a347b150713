"""``operator spark-package``: what ``spark-submit`` needs to run the load-profile job on a cluster.

Two files: ``pulsar_lb.zip`` holds the package the job imports — ``pulsar_lb_operator/`` with its
``spark_jobs/`` and ``strategies/`` (the cost models' solve runs on the driver) and nothing of the
daemon — and a two-line launcher, the ``.py`` file ``spark-submit`` wants as its application:

    spark-submit --master spark://host:7077 --py-files pulsar_lb.zip pulsar_lb_job.py \\
        --history s3a://bucket/pulsar-lb/history --out s3a://bucket/pulsar-lb/profile

The driver's and the executors' Python need pyspark, numpy, pyarrow and pandas only; the executors run the fold's
arithmetic (``partition_fold``) from the zip, which ``--py-files`` ships to them.
"""

from __future__ import annotations

import zipfile
from importlib import resources
from pathlib import Path

PACKAGE = "pulsar_lb_operator"
INIT = '"""The part of pulsar-lb-operator the Spark job runs: spark_jobs/ and strategies/."""\n'
LAUNCHER = """\"\"\"Runs pulsar-lb-operator's load-profile job; spark-submit it with --py-files pulsar_lb.zip.\"\"\"

import sys

from pulsar_lb_operator.spark_jobs.load_profile import main

sys.exit(main())
"""


def _sources(package: str) -> list[tuple[str, bytes]]:
    """(path inside the package, bytes) of every .py file of an imported package, sub-packages included."""
    root = resources.files(package)
    out = []

    def walk(node, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.is_dir() and child.name != "__pycache__":
                walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith(".py"):
                out.append((prefix + child.name, child.read_bytes()))

    walk(root, "")
    return out


def build(out: str | Path) -> tuple[Path, Path]:
    """Write the zip at ``out`` and the launcher beside it (``<stem>_job.py``); returns both paths."""
    archive = Path(out)
    if archive.suffix != ".zip":
        raise ValueError(f"{archive}: the package is a .zip file (e.g. --out pulsar_lb.zip)")
    archive.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{PACKAGE}/__init__.py", INIT)
        for folder in ("spark_jobs", "strategies"):
            for name, data in _sources(f"{PACKAGE}.{folder}"):
                zf.writestr(f"{PACKAGE}/{folder}/{name}", data)
    launcher = archive.with_name(f"{archive.stem}_job.py")
    launcher.write_text(LAUNCHER, encoding="utf-8")
    return archive, launcher
