"""``operator rebalance --snapshot``: output formats, the state file, and bad input (one line, exit 2)."""

import json
import math
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from pulsar_lb_operator import cli
from tests.builders import broker_report, operator_script, snapshot_doc, stats

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "unbalanced-after-restart.json"


def run(*args, capsys):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_stdlib_operator_still_works_from_the_repo_root_and_installed():
    code = "import operator, sys; assert operator.itemgetter(1)([0, 7]) == 7; import pulsar_lb_operator; print('ok')"
    for flags in ([], ["-S"]):  # -S: no site, so the repo root comes before the stdlib on sys.path
        env = {**os.environ, "PYTHONPATH": ""}
        if flags:  # without site-packages the installed package is not importable; only stdlib matters
            code_s = "import operator; assert operator.itemgetter(1)([0, 7]) == 7; print('ok')"
            result = subprocess.run(
                [sys.executable, *flags, "-c", code_s], cwd=ROOT, env=env, capture_output=True, text=True
            )
        else:
            result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "ok"


def test_console_script_runs_the_example_as_json():
    result = subprocess.run(
        [
            operator_script(),
            "rebalance",
            "--snapshot",
            str(EXAMPLE),
            "--strategy",
            "AvgShedder",
            "--output",
            "json",
            "--set",
            "loadBalancerAvgShedderHitCountHighThreshold=1",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)  # stdout is exactly one JSON object
    unloads = [a for a in plan["actions"] if a["type"] == "unload"]
    assert unloads and all(set(a) == {"type", "bundle", "source", "destination", "reason"} for a in unloads)
    assert {a["destination"] for a in unloads} == {"broker-3.broker.pulsar.svc.cluster.local:8080"}
    splits = [a for a in plan["actions"] if a["type"] == "split"]
    assert splits == [
        {
            "type": "split",
            "bundle": "acme/orders/0x60000000_0x80000000",
            "source": "broker-0.broker.pulsar.svc.cluster.local:8080",
            "algorithm": "range_equally_divide",
            "boundaries": ["0x70000000"],
            "unload": True,
            "reason": splits[0]["reason"],
        }
    ]
    assert "33000/s > 30000/s" in splits[0]["reason"]


def test_state_file_makes_repeated_calls_consecutive_cycles(tmp_path, capsys):
    state = tmp_path / "state.json"
    args = ["rebalance", "--snapshot", str(EXAMPLE), "--state", str(state), "--output", "json"]
    code, out, _ = run(*args, capsys=capsys)
    first = json.loads(out)
    assert code == 0 and not [a for a in first["actions"] if a["type"] == "unload"]  # 1st high hit
    assert json.loads(state.read_text())["avgHitsHigh"]
    code, out, _ = run(*args, capsys=capsys)
    second = json.loads(out)
    moved = [a for a in second["actions"] if a["type"] == "unload"]
    assert len(moved) == 5
    after = {b["broker"]: b for b in second["brokers"]}
    spread_before = max(b["usageBefore"] for b in after.values()) - min(b["usageBefore"] for b in after.values())
    spread_after = max(b["usageAfter"] for b in after.values()) - min(b["usageAfter"] for b in after.values())
    assert spread_after < spread_before / 4
    # Third call: the moved bundles are in their grace period and the counters were reset.
    _, out, _ = run(*args, capsys=capsys)
    assert not {a["bundle"] for a in json.loads(out)["actions"] if a["type"] == "unload"} & {a["bundle"] for a in moved}


def test_table_output_for_people(capsys):
    code, out, _ = run(
        "rebalance", "--snapshot", str(EXAMPLE), "--set", "loadBalancerAvgShedderHitCountHighThreshold=1", capsys=capsys
    )
    assert code == 0
    assert "Plan (dry run): shedding AvgShedder, placement AvgShedder" in out
    assert "1  unload  public/default/0xf0000000_0xffffffff" in out
    assert "spread (max − min): 60.7 → 6.9 points" in out


def test_every_strategy_and_placement_plans_the_example(capsys):
    for shedding in cli.SHEDDING:
        for placement in cli.PLACEMENT:
            code, out, err = run(
                "rebalance",
                "--snapshot",
                str(EXAMPLE),
                "--strategy",
                shedding,
                "--placement",
                placement,
                "--output",
                "json",
                capsys=capsys,
            )
            assert code == 0, err
            plan = json.loads(out)
            assert plan["shedding"] == shedding
            for action in plan["actions"]:
                if action["type"] == "unload":
                    assert action["destination"] != action["source"]


def test_full_class_names_are_accepted(capsys):
    code, out, _ = run(
        "rebalance",
        "--snapshot",
        str(EXAMPLE),
        "--output",
        "json",
        "--strategy",
        "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder",
        capsys=capsys,
    )
    plan = json.loads(out)
    assert code == 0 and plan["shedding"] == "ThresholdShedder" and plan["placement"] == "LeastLongTermMessageRate"


def test_config_file_in_yaml_and_toml(tmp_path, capsys):
    yaml_file = tmp_path / "lb.yaml"
    yaml_file.write_text("loadBalancerAvgShedderHitCountHighThreshold: 1\nloadBalancerAutoBundleSplitEnabled: false\n")
    toml_file = tmp_path / "lb.toml"
    toml_file.write_text(
        "loadBalancerAvgShedderHitCountHighThreshold = 1\nloadBalancerAutoBundleSplitEnabled = false\n"
    )
    for config in (yaml_file, toml_file):
        code, out, _ = run(
            "rebalance", "--snapshot", str(EXAMPLE), "--config", str(config), "--output", "json", capsys=capsys
        )
        types = [a["type"] for a in json.loads(out)["actions"]]
        assert code == 0 and types == ["unload"] * 5


def _bad_snapshot(tmp_path, mutate):
    doc = json.loads(EXAMPLE.read_text())
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    return path


FIRST = "broker-0.broker.pulsar.svc.cluster.local:8080"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["brokers"][FIRST].pop("cpu"), f"snapshot.brokers['{FIRST}'].cpu: missing"),
        (lambda d: d["brokers"][FIRST]["cpu"].update(usage="high"), "cpu.usage: expected a number, got string"),
        (lambda d: d["brokers"][FIRST]["memory"].update(usage=math.nan), "memory.usage: expected a finite number"),
        (lambda d: d["brokers"][FIRST]["bandwidthIn"].update(usage=-5), "bandwidthIn.usage: must not be negative"),
        (lambda d: d["brokers"][FIRST].update(msgRateIn=None), "msgRateIn: expected a number, got null"),
        (lambda d: d["brokers"][FIRST].update(bundles="x"), "bundles: expected a list, got string"),
        (lambda d: d["brokers"][FIRST].update(loadReportType="LoadReport"), "unsupported report type 'LoadReport'"),
        (lambda d: d.update(format="v2"), "snapshot.format: expected 'pulsar-lb-snapshot/1'"),
        (lambda d: d.pop("takenAt"), "snapshot.takenAt: missing"),
        (
            lambda d: d["namespaces"]["acme/orders"].update(boundaries=["0x00000000", "0x80000000"]),
            "boundaries must start at 0x00000000 and end at 0xffffffff",
        ),
        (lambda d: d["brokers"][FIRST]["lastStats"].update({"not-a-bundle": {}}), "invalid bundle name 'not-a-bundle'"),
    ],
)
def test_bad_snapshot_is_one_line_and_exit_2(tmp_path, capsys, mutate, message):
    code, out, err = run("rebalance", "--snapshot", str(_bad_snapshot(tmp_path, mutate)), capsys=capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("operator: error: ") and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--strategy", "FancyShedder"], "unknown shedding strategy 'FancyShedder' (known: AvgShedder,"),
        (["--placement", "Nearest"], "unknown placement strategy 'Nearest'"),
        (["--set", "loadBalancerNoSuchKey=1"], "unknown configuration key 'loadBalancerNoSuchKey'"),
        (["--set", "maxUnloadPercentage=lots"], "maxUnloadPercentage: invalid value 'lots' (expected float)"),
        (["--set", "maxUnloadPercentage=1.5"], "maxUnloadPercentage: 1.5 is out of range ((0, 1])"),
        (["--set", "lowerBoundarySheddingEnabled=maybe"], "lowerBoundarySheddingEnabled: invalid value 'maybe'"),
        (["--set", "novalue"], "expected key=value, got 'novalue'"),
        (["--output", "xml"], "invalid choice: 'xml'"),
        (["--no-dry-run"], "--no-dry-run: a live cycle's, not --snapshot's (offline, always a dry run)"),
        (["--admin-url", "http://b:8080", "--reset-state"], "--admin-url, --reset-state: a live cycle's"),
        (["--token-file", "/nonexistent"], "--token-file: a live cycle's"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(capsys, args, message):
    code, out, err = run("rebalance", "--snapshot", str(EXAMPLE), *args, capsys=capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err


def test_unreadable_and_malformed_files(tmp_path, capsys):
    code, _, err = run("rebalance", "--snapshot", str(tmp_path / "missing.json"), capsys=capsys)
    assert code == 2 and "cannot read snapshot" in err and "No such file" in err
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    code, _, err = run("rebalance", "--snapshot", str(garbage), capsys=capsys)
    assert code == 2 and "is not valid JSON" in err
    bad_state = tmp_path / "state.json"
    bad_state.write_text(json.dumps({"format": "something-else"}))
    code, _, err = run("rebalance", "--snapshot", str(EXAMPLE), "--state", str(bad_state), capsys=capsys)
    assert code == 2 and "not a pulsar-lb-state/1 document" in err
    bad_config = tmp_path / "lb.yaml"
    bad_config.write_text("- a list\n- not a mapping\n")
    code, _, err = run("rebalance", "--snapshot", str(EXAMPLE), "--config", str(bad_config), capsys=capsys)
    assert code == 2 and "must hold a mapping" in err


def test_missing_snapshot_argument_is_a_usage_error(capsys):
    code, _, err = run("rebalance", capsys=capsys)
    assert code == 2 and "--snapshot" in err and err.count("\n") == 1


def test_split_algorithm_choice_through_the_cli(tmp_path, capsys):
    hot = "t/ns/0x00000000_0xffffffff"
    topics = {hot: {f"persistent://t/ns/p-{i}": {"msgRateIn": 9000.0, "msgRateOut": 9000.0} for i in range(4)}}
    doc = snapshot_doc(
        {
            "a:8080": broker_report(bundles={hot: stats(36000, 36000, topics=4)}),
            "b:8080": broker_report(bundles={"t/ns2/0x00000000_0xffffffff": stats(1, 1)}),
        },
        topics=topics,
    )
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(doc))
    code, out, _ = run(
        "rebalance",
        "--snapshot",
        str(path),
        "--output",
        "json",
        "--set",
        "defaultNamespaceBundleSplitAlgorithm=flow_or_qps_equally_divide",
        capsys=capsys,
    )
    [split] = json.loads(out)["actions"]
    # four topics of 18000 msg/s; any two pass the 30000 limit, so each topic gets its own bundle
    assert code == 0 and split["algorithm"] == "flow_or_qps_equally_divide" and len(split["boundaries"]) == 3
    hashes = sorted(zlib.crc32(t.encode()) for t in topics[hot])
    cuts = [int(b, 16) for b in split["boundaries"]]
    assert all(lo < cut <= hi for lo, cut, hi in zip(hashes, cuts, hashes[1:]))
