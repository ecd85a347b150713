"""benchmarks/serving.py at a small size: both servers measured in one run, the table printed, nothing left."""

import re
import sys

import pytest

from pulsar_lb_operator.benchmarks import serving


def test_the_serving_benchmark_compares_two_installations_in_one_run(capsys):
    args = ["--brokers", "3", "--bundles", "30", "--rounds", "2", "--repeat", "2", "--concurrency", "2"]
    assert serving.main([*args, "--baseline-python", sys.executable]) == 0
    out = capsys.readouterr()
    rows = {line.split(" | ")[0].strip("| "): line for line in out.out.splitlines() if line.startswith("| ")}
    assert set(serving.WORKLOADS) <= set(rows)
    for workload in serving.WORKLOADS:
        figures = re.findall(r"\| ([\d,.]+)×? ", rows[workload] + " ")
        assert len(figures) == 6 and all(float(f.replace(",", "")) > 0 for f in figures), rows[workload]
    assert out.err.count("3 brokers served") == 2  # the baseline and this installation, each in its own process


def test_a_baseline_that_does_not_start_is_one_clear_error():
    with pytest.raises(RuntimeError, match="the simulator did not start"):
        serving.main(["--brokers", "2", "--bundles", "2", "--baseline-python", "/bin/false"])


def test_sizes_below_one_are_refused(capsys):
    with pytest.raises(SystemExit) as exited:
        serving.main(["--rounds", "0"])
    assert exited.value.code == 2 and "--rounds must be at least 1" in capsys.readouterr().err
