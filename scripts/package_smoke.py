#!/usr/bin/env python3
"""Starts a built package the way the daemon does, and checks the first answers.

Usage: scripts/package_smoke.py dist/stateful_{tool,trigger}-<version>[.signed].difypkg

The package is extracted with every file 0644 (the daemon's extraction drops exec bits),
then `python3 -m main` runs in it with INSTALL_METHOD=local: the shim must restore the
binary's exec bit and exec it, the binary must write its heartbeat first and answer a
credential validation against a KV container started here from the release build
(STATEFUL_TOOL_BIN, default target/release/stateful-tool; tool package), or a webhook sent
while the subscription is being built (trigger package: 200, no event, nothing claimed).
"""
import contextlib
import os
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUEST = (
    '{"session_id":"pkg-smoke","conversation_id":null,"message_id":null,"app_id":null,"endpoint_id":null,'
    '"context":null,"event":"request","data":{"action":"validate_tool_credentials","credentials":'
    '{"kv_url":"KV_URL"},"provider":"stateful_tool","type":"tool","user_id":"ci"}}\n'
)

# A builder-phase dispatch (bare endpoint id, no properties): answered without a store.
TRIGGER_REQUEST = (
    '{"session_id":"pkg-smoke","conversation_id":null,"message_id":null,"app_id":null,"endpoint_id":null,'
    '"context":null,"event":"request","data":{"action":"dispatch_trigger_event","credential_type":"unauthorized",'
    '"credentials":{},"provider":"stateful_trigger","raw_http_request":"'
    + b"POST /triggers/plugin/e HTTP/1.1\r\nX-Github-Delivery: smoke\r\n\r\n{}".hex()
    + '","subscription":{"endpoint":"e","expires_at":-1,"parameters":{},"properties":{}},"type":"trigger","user_id":""}}\n'
)


@contextlib.contextmanager
def kv_container():
    """A KV container on a free loopback port and a scratch directory; yields its URL."""
    binary = os.environ.get("STATEFUL_TOOL_BIN", os.path.join(ROOT, "target/release/stateful-tool"))
    with tempfile.TemporaryDirectory() as data:
        server = subprocess.Popen(
            [binary, "kv", "serve", "--listen", "127.0.0.1:0", "--data", data, "--durability", "none"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            for line in server.stdout:
                if "listening on " in line:
                    yield line.split("listening on ", 1)[1].split()[0]
                    break
            else:
                raise SystemExit(f"{binary} kv serve printed no 'listening on' line")
        finally:
            server.kill()
            server.wait()


def main(pkg: str) -> None:
    with tempfile.TemporaryDirectory() as d, kv_container() as kv_url:
        with zipfile.ZipFile(pkg) as z:
            trigger = b"\n  triggers:" in z.read("manifest.yaml")
            for info in z.infolist():
                assert not info.filename.endswith("/"), f"directory entry {info.filename}"
                z.extract(info, d)
                os.chmod(os.path.join(d, info.filename), 0o644)
        env = dict(os.environ, INSTALL_METHOD="local")
        out = subprocess.run(
            [sys.executable, "-m", "main"],
            cwd=d,
            input=TRIGGER_REQUEST if trigger else REQUEST.replace("KV_URL", kv_url),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        lines = out.stdout.splitlines()
        assert out.returncode == 0, (out.returncode, out.stderr)
        assert lines and '"heartbeat"' in lines[0], lines[:3]
        answer = '"events":[]' if trigger else '"result":true'
        assert any(answer in line for line in lines), lines
        what = "builder dispatch" if trigger else "validate"
        print(f"shim + binary from the package: heartbeat first, {what} answered ({len(lines)} lines)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
