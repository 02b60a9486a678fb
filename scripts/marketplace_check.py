#!/usr/bin/env python3
"""Reproduces the Dify marketplace pre-check on a built .difypkg (stdlib only).

Steps, as the marketplace's pull-request workflow runs them:
 1. unzip the package into a fresh directory;
 2. manifest `author` must not contain `langgenius` or `dify`;
 3. the manifest icon (and icon_dark) must exist under _assets/, must not contain the
    template placeholder marker, and must not be the template's default SVG;
 4. the version must not already be published (needs the marketplace: reported, not checked);
 5. requirements.txt installs into a fresh venv; then `python3 -m main` starts in the
    unpacked directory with INSTALL_METHOD=aws_lambda (dify_plugin is not installed), and
    within 20 s a line containing `Serving Flask app` must appear on its stdout; 3 s later
    GET http://127.0.0.1:<port>/ must answer 200 or 404;
 6. re-packaging with the official CLI: its rules (struct validators, sizes, file-only
    zip) are checked by `stateful-tool package --check-only` on the unpacked directory.

Usage: marketplace_check.py PACKAGE.difypkg | --dir UNPACKED_DIR   [--bin path/to/stateful-tool]
Env for tests: MARKETPLACE_PORT (8080), MARKETPLACE_MARKER_TIMEOUT (20), MARKETPLACE_SETTLE (3).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import venv
import zipfile

MARKER = "Serving Flask app"
PLACEHOLDER = "DIFY_MARKETPLACE_TEMPLATE_ICON_DO_NOT_USE"
# The template's default icon, compared with all whitespace removed (as the marketplace does).
DEFAULT_ICON = (
    '<svg width="100" height="100" xmlns="http://www.w3.org/2000/svg">'
    '<path d="M20 20 V80 M20 20 H60 Q80 20 80 40 T60 60 H20" fill="none" stroke="black" stroke-width="5"/></svg>'
)


def squash(text):
    return re.sub(r"[\s\x00]", "", text)


def top_level(manifest_text, key):
    """A top-level scalar of manifest.yaml (no YAML library in a fresh venv)."""
    m = re.search(r"^" + re.escape(key) + r":[ \t]*(.*?)[ \t]*$", manifest_text, re.M)
    if not m:
        return ""
    return m.group(1).split(" #")[0].strip().strip("'\"")


class Check:
    def __init__(self):
        self.failures = []

    def result(self, name, ok, detail):
        print(f"[{'PASS' if ok else 'FAIL'}] {name}: {detail}", flush=True)
        if not ok:
            self.failures.append(name)


def unzip(pkg, dest):
    with zipfile.ZipFile(pkg) as z:
        for info in z.infolist():
            name = info.filename
            if name.endswith("/") or name.startswith("/") or ".." in name.split("/") or "\\" in name:
                raise SystemExit(f"package entry {name!r} is not a plain relative file name")
            z.extract(info, dest)


def check_author(check, manifest):
    author = top_level(manifest, "author")
    bad = [w for w in ("langgenius", "dify") if w in author.lower()]
    check.result("manifest author", bool(author) and not bad, f"author={author!r}" + (f" contains {bad}" if bad else ""))


def check_icons(check, root, manifest):
    for key in ("icon", "icon_dark"):
        name = top_level(manifest, key)
        if not name:
            if key == "icon":
                check.result("icon", False, "manifest.yaml declares no icon")
            continue
        path = os.path.join(root, "_assets", name)
        if not os.path.isfile(path):
            check.result(key, False, f"_assets/{name} not found")
            continue
        text = open(path, encoding="utf-8", errors="ignore").read()
        if PLACEHOLDER in text:
            check.result(key, False, f"_assets/{name} contains the template placeholder {PLACEHOLDER}")
        elif squash(text) == squash(DEFAULT_ICON):
            check.result(key, False, f"_assets/{name} is the template's default icon")
        elif not text.strip():
            check.result(key, False, f"_assets/{name} is empty")
        else:
            check.result(key, True, f"_assets/{name} ({len(text)} bytes)")


def run_plugin(check, root, port, marker_timeout, settle):
    req = os.path.join(root, "requirements.txt")
    python = sys.executable
    if os.path.exists(req):
        env_dir = tempfile.mkdtemp(prefix="mp-venv-")
        venv.EnvBuilder(with_pip=True).create(env_dir)
        python = os.path.join(env_dir, "bin", "python")
        pip = subprocess.run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "-r", req],
                             capture_output=True, text=True, timeout=300)
        check.result("requirements install", pip.returncode == 0, (pip.stderr or "ok").strip()[-300:])
        has_sdk = subprocess.run([python, "-c", "import dify_plugin"], capture_output=True).returncode == 0
    else:
        has_sdk = False
    env = dict(os.environ)
    if has_sdk:
        env.update(INSTALL_METHOD="serverless", SERVERLESS_HOST="0.0.0.0", SERVERLESS_PORT=str(port))
    else:
        env.update(INSTALL_METHOD="aws_lambda", AWS_LAMBDA_HOST="0.0.0.0", AWS_LAMBDA_PORT=str(port))
    proc = subprocess.Popen([python, "-m", "main"], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = threading.Event()
    lines = []

    def pump():
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if MARKER in line:
                seen.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        ok = seen.wait(marker_timeout)
        check.result("startup marker", ok, f"'{MARKER}' on stdout" if ok else
                     f"no '{MARKER}' line within {marker_timeout}s; output: {lines[-5:]}")
        if not ok:
            return
        time.sleep(settle)
        try:
            status = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).status
        except urllib.error.HTTPError as e:
            status = e.code
        except OSError as e:
            status = f"no answer ({e})"
        check.result("HTTP probe", status in (200, 404), f"GET http://127.0.0.1:{port}/ -> {status}")
    finally:
        proc.kill()
        proc.wait()


def check_repackage(check, root, binary):
    args = [binary, "package", "--check-only", "--source", root]
    for arch in ("amd64", "arm64"):
        b = os.path.join(root, "bin", f"stateful-tool-{arch}")
        if os.path.exists(b):
            args += ["--bin", f"{arch}={b}"]
    r = subprocess.run(args, capture_output=True, text=True)
    detail = (r.stdout + r.stderr).strip().splitlines()
    check.result("re-package rules", r.returncode == 0, detail[-1] if detail else "")
    if r.returncode != 0:
        print("\n".join(detail), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("package", nargs="?")
    ap.add_argument("--dir", help="an already unpacked package directory")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "stateful-tool"))
    a = ap.parse_args()
    port = int(os.environ.get("MARKETPLACE_PORT", "8080"))
    marker_timeout = float(os.environ.get("MARKETPLACE_MARKER_TIMEOUT", "20"))
    settle = float(os.environ.get("MARKETPLACE_SETTLE", "3"))
    check = Check()
    work = tempfile.mkdtemp(prefix="mp-check-")
    try:
        if a.dir:
            root = os.path.join(work, "plugin")
            shutil.copytree(a.dir, root)
        elif a.package:
            root = os.path.join(work, "plugin")
            unzip(a.package, root)
            check.result("unzip", True, f"{a.package} -> {root}")
        else:
            ap.error("give a .difypkg or --dir")
        manifest = open(os.path.join(root, "manifest.yaml"), encoding="utf-8").read()
        check_author(check, manifest)
        check_icons(check, root, manifest)
        print(f"[INFO] version {top_level(manifest, 'version')}: publication is checked by the marketplace itself "
              "(bump with `make bump VERSION=x.y.z`)", flush=True)
        run_plugin(check, root, port, marker_timeout, settle)
        check_repackage(check, root, os.path.abspath(a.bin))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if check.failures:
        print(f"marketplace pre-check FAILED: {', '.join(check.failures)}", flush=True)
        sys.exit(1)
    print("marketplace pre-check passed", flush=True)


if __name__ == "__main__":
    main()
