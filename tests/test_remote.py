"""Remote logdirs: a real S3-compatible server (moto) on 127.0.0.1, read through s3:// URLs."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import DEMO_LOGS, tfbneck_cmd

pytest.importorskip("s3fs", reason="s3fs is not installed (pip install 'tfbneck-plugin[remote]')")
boto3 = pytest.importorskip("boto3", reason="boto3 is not installed")
BUCKET = "fleet-logs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_env(endpoint, creds=True):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL_S3=endpoint, AWS_DEFAULT_REGION="us-east-1",
               AWS_EC2_METADATA_DISABLED="true",  # never look for credentials off this machine
               AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_CONFIG_FILE="/nonexistent")
    if creds:
        env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    return env


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on loopback holding demo_logs under s3://fleet-logs/logs/."""
    moto = os.path.join(os.path.dirname(sys.executable), "moto_server")
    if not os.path.exists(moto):
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    if not os.path.exists(os.path.join(DEMO_LOGS, "EXPECTED.json")):
        pytest.skip("demo_logs/ has not been generated")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([moto, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        for d, _, files in os.walk(DEMO_LOGS):
            for f in files:
                full = os.path.join(d, f)
                key = "logs/" + os.path.relpath(full, DEMO_LOGS).replace(os.sep, "/")
                client.upload_file(full, BUCKET, key)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def local_report():
    r = subprocess.run(tfbneck_cmd() + ["analyze", DEMO_LOGS, "--format", "json"], capture_output=True, text=True,
                       timeout=120)
    return {s["run"]: s for s in json.loads(r.stdout)["sessions"]}


def test_cli_reads_an_s3_logdir(s3):
    r = subprocess.run(tfbneck_cmd() + ["analyze", f"s3://{BUCKET}/logs", "--format", "json"], capture_output=True,
                       text=True, timeout=180, env=s3_env(s3))
    assert r.returncode == 0, r.stderr
    remote = {s["run"]: s for s in json.loads(r.stdout)["sessions"]}
    local = local_report()
    assert set(remote) == set(local) and remote
    for run, s in remote.items():
        assert s["path"].startswith(f"s3://{BUCKET}/logs/{run}/plugins/profile/")
        for key in ("bottleneck", "cause", "breakdown_pct", "steps", "input_pipeline", "system_metrics"):
            assert s[key] == local[run][key], (run, key)


def test_s3_errors_are_one_line(s3):
    r = subprocess.run(tfbneck_cmd() + ["analyze", f"s3://{BUCKET}/nothing-here"], capture_output=True, text=True,
                       timeout=120, env=s3_env(s3))
    assert r.returncode == 2 and "no such file or directory" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(tfbneck_cmd() + ["analyze", f"s3://{BUCKET}/logs"], capture_output=True, text=True,
                       timeout=120, env=s3_env(s3, creds=False))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "cannot list" in r.stderr and "Credentials" in r.stderr
    r = subprocess.run(tfbneck_cmd() + ["analyze", "nosuchscheme://bucket/logs"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "unknown URL scheme" in r.stderr


def test_tensorboard_plugin_reads_an_s3_logdir(s3):
    """tensorboard --logdir s3://...: the Bottleneck routes list and diagnose the sessions."""
    import urllib.parse
    import tempfile
    from plugin_helpers import TensorBoard, tensorboard_command
    local = local_report()
    env = {k: v for k, v in s3_env(s3).items() if k.startswith("AWS_")}
    # TensorBoard's own loader reads gs:// but not s3:// (that needs tensorflow-io): point
    # the tab at the bucket with its own flag and give TensorBoard an empty local logdir.
    empty = tempfile.mkdtemp(prefix="tfbneck-empty-")
    launcher = tensorboard_command() + ["--bottleneck_logdir", f"s3://{BUCKET}/logs"]
    with TensorBoard(empty, env=env, launcher=launcher) as tb:
        deadline = time.time() + 60
        runs = set()
        while time.time() < deadline:
            status, _, body = tb.get("sessions")
            if status == 200:
                listing = json.loads(body)
                items = listing.get("sessions", listing) if isinstance(listing, dict) else listing
                runs = {s["run"] for s in items}
                if runs == set(local):
                    break
            time.sleep(0.5)
        assert runs == set(local)
        for s in items:
            q = urllib.parse.urlencode({"run": s["run"], "session": s["session"]})
            for _ in range(120):
                status, headers, body = tb.get(f"report?{q}")
                if status == 200:
                    break
                time.sleep(0.5)
            assert status == 200, body
            report = json.loads(body)["sessions"][0]  # the CLI's JSON contract
            assert report["bottleneck"] == local[s["run"]]["bottleneck"]
            assert report["breakdown_pct"] == local[s["run"]]["breakdown_pct"]
