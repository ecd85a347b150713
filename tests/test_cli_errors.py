"""The command line a user meets: every mistake is one line with the fix and exit 2 (1 for the cluster's own
refusals), never a traceback; ``--version``; an example in every ``--help``; and a "No action" that says why."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from pulsar_lb_operator import cli, hints
from pulsar_lb_operator.adminapi.errors import Unauthorized
from pulsar_lb_operator.run.settings import OperatorSettings, resolve
from pulsar_lb_operator.simulator.cluster import SimulatedCluster
from pulsar_lb_operator.simulator.http import serve
from pulsar_lb_operator.simulator.scenario import load_scenario
from tests.builders import free_port, operator_script

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "unbalanced-after-restart.json"
TOKEN = "s3cr3t-super-user-token"
USER_TOKEN = "s3cr3t-plain-user-token"


def run(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def one_line(err: str) -> str:
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("operator: ")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def listening():
    """A port some other program already listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def secured(monkeypatch, tmp_path):
    """A simulated cluster that wants a super-user's token."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PULSAR_LB_TOKEN", raising=False)
    scenario = load_scenario("demo")
    with serve(
        lambda allocate: SimulatedCluster(scenario, allocate, int(time.time() * 1000)),
        token=TOKEN,
        user_token=USER_TOKEN,
    ) as sim:
        yield sim


# -- ports -------------------------------------------------------------------------------------------------


def test_simulate_on_a_port_in_use_is_one_line_with_the_fix(listening, capsys):
    code, out, err = run(capsys, "simulate", "demo", "--port", str(listening))
    line = one_line(err)
    assert code == 2 and out == ""
    assert f":{listening}" in line and "in use" in line and "leave --port out" in line


@pytest.mark.parametrize("port", ["99999", "0", "-1", "http"])
def test_simulate_on_a_port_that_is_no_port_is_refused(port, capsys):
    code, _, err = run(capsys, "simulate", "demo", "--port", port)
    line = one_line(err)
    assert code == 2 and "--port" in line and ("1 to 65535" in line or "not a port number" in line)


def test_run_with_its_metrics_port_in_use_exits_2_with_one_line_and_no_traceback(listening, tmp_path):
    """The real process: it must also end (no thread left behind) after saying so."""
    result = subprocess.run(
        [
            operator_script(),
            "run",
            "--admin-url",
            f"http://127.0.0.1:{free_port()}",
            "--cluster",
            "sim",
            "--set",
            f"metricsPort={listening}",
            "--set",
            f"stateFile={tmp_path / 'state.json'}",
            "--set",
            "historyUri=",
            "--set",
            "profileUri=",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "PULSAR_LB_LOG_LEVEL": "error"},
    )
    line = one_line(result.stderr)
    assert result.returncode == 2
    assert line.startswith(f"operator: error: metricsPort: 127.0.0.1:{listening} is already in use")
    assert "--set metricsPort=N" in line


def test_metrics_listen_on_loopback_for_local_runs_and_on_every_interface_in_the_image():
    assert OperatorSettings().metricsHost == "127.0.0.1"
    assert resolve({}, {}, {})[0].metricsHost == "127.0.0.1"
    assert resolve({}, {"PULSAR_LB_METRICS_HOST": "0.0.0.0"}, {})[0].metricsHost == "0.0.0.0"
    assert "PULSAR_LB_METRICS_HOST=0.0.0.0" in (ROOT / "Dockerfile").read_text()  # the chart sets it in settings


# -- files -------------------------------------------------------------------------------------------------


def test_unreadable_files_are_one_line_with_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cases = [
        (
            ["rebalance", "--snapshot", "missing.json"],
            f"No such file or directory: check the path (relative to {tmp_path})",
        ),
        (["rebalance", "--snapshot", str(tmp_path)], "Is a directory: give the file, not a directory"),
        (["rebalance", "--snapshot", str(EXAMPLE), "--config", str(tmp_path)], "give the file, not a directory"),
        (
            ["rebalance", "--admin-url", "http://127.0.0.1:9", "--cluster", "c", "--token-file", "/no/such/token"],
            "tokenFile: cannot read '/no/such/token': No such file or directory: check the path",
        ),
        (
            ["rebalance", "--admin-url", "https://127.0.0.1:9", "--cluster", "c", "--set", "caBundle=/no/ca.pem"],
            "caBundle: cannot read '/no/ca.pem': No such file or directory: check the path",
        ),
        (["simulate", "demo", "--request-log", "/no/such/dir/requests.jsonl"], "create its directory '/no/such/dir'"),
    ]
    for argv, message in cases:
        code, _, err = run(capsys, *argv)
        assert code == 2 and message in one_line(err), (argv, err)


def test_a_state_path_that_cannot_be_created_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = ["rebalance", "--admin-url", "http://127.0.0.1:9", "--cluster", "c", "--state", str(blocker / "s.json")]
    code, _, err = run(capsys, *argv)
    line = one_line(err)
    assert code == 2 and "cannot create the state lock" in line and "--set stateFile=PATH" in line


def test_a_bug_is_still_one_line_unless_the_traceback_is_asked_for(monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("unexpected")

    monkeypatch.setattr(cli, "cmd_rehearse", broken)
    code, _, err = run(capsys, "rehearse", "--quick")
    assert code == 1 and "internal error: RuntimeError: unexpected" in one_line(err)
    monkeypatch.setenv("PULSAR_LB_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        cli.main(["rehearse", "--quick"])


# -- options -----------------------------------------------------------------------------------------------


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.strip() == "operator 0.1.0"
    result = subprocess.run([operator_script(), "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "operator 0.1.0"


@pytest.mark.parametrize("minutes", ["-5", "0", "nan", "soon"])
def test_demo_refuses_minutes_that_are_not_positive(minutes, capsys):
    code, out, err = run(capsys, "demo", "--minutes", minutes)
    assert code == 2 and out == "" and "--minutes" in one_line(err)


def test_every_command_has_an_example_in_its_help():
    parser = cli.build_parser()
    [commands] = [a for a in parser._actions if a.dest == "command"]
    assert {"rebalance", "snapshot", "run", "aggregate", "demo", "simulate", "rehearse", "benchmark"} <= set(
        commands.choices
    )
    assert "example: operator demo" in parser.format_help()
    for name, command in commands.choices.items():
        text = command.format_help()
        assert "example" in text.lower() and f"operator {name}" in text.split("xample", 1)[1], name


# -- the cluster says no -----------------------------------------------------------------------------------


def test_a_401_without_a_token_says_so_not_an_html_page(secured, capsys):
    code, _, err = run(capsys, "rebalance", "--admin-url", secured.admin_url)
    line = one_line(err)
    assert code == 1 and "<html" not in err.lower()
    assert "401 Unauthorized" in line and "token is missing, wrong, expired" in line
    assert "no token was sent" in line and "PULSAR_LB_TOKEN" in line


def test_a_401_names_the_token_file_or_variable_never_the_token(secured, tmp_path, monkeypatch, capsys):
    token_file = tmp_path / "token"
    token_file.write_text("wrong-" + TOKEN)
    code, _, err = run(capsys, "rebalance", "--admin-url", secured.admin_url, "--token-file", str(token_file))
    line = one_line(err)
    assert code == 1 and f"read from tokenFile '{token_file}'" in line and TOKEN not in err
    monkeypatch.setenv("OPS_JWT", "wrong-" + TOKEN)
    code, _, err = run(
        capsys, "rebalance", "--admin-url", secured.admin_url, "--cluster", "demo", "--set", "tokenEnv=OPS_JWT"
    )
    line = one_line(err)
    assert code == 1 and "read from the environment variable OPS_JWT" in line and TOKEN not in err
    assert "<html" not in err.lower()


def test_a_valid_token_of_a_plain_role_is_told_it_needs_a_super_user(secured, monkeypatch, capsys):
    monkeypatch.setenv("PULSAR_LB_TOKEN", USER_TOKEN)
    code, _, err = run(capsys, "rebalance", "--admin-url", secured.admin_url)
    line = one_line(err)
    assert code == 1 and "Pulsar says" in line and "superUserRoles" in line and USER_TOKEN not in err


def test_with_the_right_token_the_same_command_works(secured, monkeypatch, capsys):
    monkeypatch.setenv("PULSAR_LB_TOKEN", TOKEN)
    code, out, _ = run(capsys, "rebalance", "--admin-url", secured.admin_url)
    assert code == 0 and "Plan (dry run)" in out


def test_a_cluster_the_admin_api_does_not_list_is_the_users_mistake_before_anything_is_asked(
    secured, monkeypatch, capsys
):
    """A misspelt name would otherwise come back as the brokers' 404 (exit 1, the cluster's fault)."""
    monkeypatch.setenv("PULSAR_LB_TOKEN", TOKEN)
    for argv in (["rebalance", "--cluster", "nosuch"], ["snapshot", "--set", "cluster=nosuch", "--out", "snap.json"]):
        code, out, err = run(capsys, *argv, "--admin-url", secured.admin_url)
        line = one_line(err)
        assert code == 2 and out == "", argv
        assert "cluster 'nosuch'" in line and "lists clusters ['sim']" in line and "--cluster" in line
        assert not [r.path for r in secured.requests if r.path.startswith("/admin/v2/brokers/")], argv
    code, out, _ = run(capsys, "rebalance", "--cluster", "sim", "--admin-url", secured.admin_url)
    assert code == 0 and "Plan (dry run)" in out


def test_the_daemon_logs_the_same_meaning(monkeypatch):
    settings = OperatorSettings(tokenFile="/pulsar/tokens/admin/token")
    html = Unauthorized("http://b:8080/admin/v2/clusters", "HTTP 401: <html><body>Authentication required", 401)
    assert "tokenFile '/pulsar/tokens/admin/token'" in hints.admin_auth(html, settings.auth().token_source())
    assert hints.admin_auth(RuntimeError("x"), settings.auth().token_source()) is None


# -- "No action" -------------------------------------------------------------------------------------------


def test_no_action_while_avgshedder_counts_its_hits_says_so(tmp_path, capsys):
    state = tmp_path / "state.json"
    argv = ["rebalance", "--snapshot", str(EXAMPLE), "--state", str(state)]
    code, out, _ = run(capsys, *argv, "--set", "loadBalancerAutoBundleSplitEnabled=false")
    assert code == 0
    assert "No action yet: AvgShedder is counting hits on broker-0" in out and "1 of 2 hits" in out
    assert "loadBalancerAvgShedderHitCountHighThreshold" in out
    assert "within the strategy's thresholds" not in out
    code, out, _ = run(capsys, *argv, "--set", "loadBalancerAutoBundleSplitEnabled=false")
    assert code == 0 and "No action" not in out and "unload" in out  # the second hit acts


def test_a_split_alone_still_says_the_unloads_wait_for_their_hits(capsys):
    code, out, _ = run(capsys, "rebalance", "--snapshot", str(EXAMPLE))
    assert code == 0 and "1  split" in out and "No unload yet: AvgShedder is counting hits" in out


def test_a_balanced_cluster_is_still_within_the_thresholds(tmp_path, capsys):
    code, out, _ = run(
        capsys,
        "rebalance",
        "--snapshot",
        str(EXAMPLE),
        "--set",
        "loadBalancerAvgShedderLowThreshold=90",
        "--set",
        "loadBalancerAvgShedderHighThreshold=95",
        "--set",
        "loadBalancerAutoBundleSplitEnabled=false",
    )
    assert code == 0 and "No action: the cluster is within the strategy's thresholds." in out


def test_the_console_script_never_prints_a_traceback_for_these(tmp_path):
    for argv in (
        ["demo", "--minutes", "-5"],
        ["simulate", "demo", "--port", "99999"],
        ["rebalance", "--snapshot", "x"],
    ):
        result = subprocess.run([operator_script(), *argv], capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("maxUnloadPerCycle", "maxUnloadsPerCycle"),
        ("loadbalancerSheddingIntervalMinute", "loadBalancerSheddingIntervalMinutes"),
    ],
)
def test_a_misspelt_key_names_the_key_it_was_probably_meant_to_be(capsys, typo, meant):
    """Our keys and Pulsar's alike: one line, the suggestion, exit 2; a key like nothing known gets no guess."""
    code, _, err = run(capsys, "rebalance", "--snapshot", str(EXAMPLE), "--set", f"{typo}=3")
    assert code == 2 and one_line(err).endswith(f"unknown configuration key {typo!r} (did you mean {meant}?)")
    code, _, err = run(capsys, "rebalance", "--snapshot", str(EXAMPLE), "--set", "zzz=3")
    assert code == 2 and one_line(err).endswith("unknown configuration key 'zzz'")


def test_a_listening_address_that_is_not_this_machines_is_named_as_the_host_not_the_port():
    import errno
    import socket

    from pulsar_lb_operator import hints

    fix = "set another with --set metricsPort=N"
    unresolved = hints.port_in_use("metricsPort", "nosuch.invalid", 8090, socket.gaierror(-2, "Name unknown"), fix)
    foreign = hints.port_in_use("metricsPort", "10.9.9.9", 8090, OSError(errno.EADDRNOTAVAIL, "Cannot assign"), fix)
    busy = hints.port_in_use("metricsPort", "0.0.0.0", 8090, OSError(errno.EADDRINUSE, "in use"), fix)
    assert "nosuch.invalid is no address of this machine" in unresolved and fix not in unresolved
    assert "10.9.9.9 is no address of this machine" in foreign and fix not in foreign
    assert "already in use" in busy and fix in busy
