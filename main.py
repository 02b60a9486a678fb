"""Launcher shim for the native stateful_tool plugin.

The Dify plugin daemon runs `.venv/bin/python -m main` in the extracted plugin
directory. This module immediately replaces the Python process with the bundled
native binary `bin/stateful-tool-<arch>` (via os.execv, never a child process):
the binary keeps the PID the daemon started and watches, the stdin/stdout/stderr
pipes, the working directory and the environment (INSTALL_METHOD etc.).

Rules kept here:
- stdout belongs to the plugin protocol: this shim never writes to it; every
  message goes to stderr (the daemon logs stderr lines).
- The daemon extracts every file with mode 0644, so the exec bits of the binary
  are restored before the exec (the change persists across restarts).
- Python 3.8+ and the standard library only (the package has no dependencies).

Test hook: if the environment variable STATEFUL_TOOL_SHIM_MACHINE is set, its
value is used instead of platform.machine(), so tests can simulate another
architecture (e.g. STATEFUL_TOOL_SHIM_MACHINE=sparc64). It is not set in
production.
"""

import os
import platform
import stat
import sys

BINARY_PREFIX = "stateful-tool-"
MACHINE_OVERRIDE_ENV = "STATEFUL_TOOL_SHIM_MACHINE"

# platform.machine() value (lower-cased) -> architecture suffix of the binary.
ARCH_BY_MACHINE = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
}


def _fail(message):
    """Writes one diagnostic to stderr and exits with status 1."""
    sys.stderr.write("stateful_tool shim: " + message + "\n")
    sys.stderr.flush()
    sys.exit(1)


def _carried_arches(bin_dir):
    """Architectures the package carries, from the names in bin/."""
    try:
        names = os.listdir(bin_dir)
    except OSError:
        return []
    return sorted(
        name[len(BINARY_PREFIX):]
        for name in names
        if name.startswith(BINARY_PREFIX) and len(name) > len(BINARY_PREFIX)
    )


def _describe(arches):
    return ", ".join(arches) if arches else "none"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    bin_dir = os.path.join(here, "bin")
    machine = os.environ.get(MACHINE_OVERRIDE_ENV) or platform.machine()
    arch = ARCH_BY_MACHINE.get(machine.lower())
    if arch is None:
        _fail(
            "unsupported machine %r: this plugin runs on amd64 (x86_64) and "
            "arm64 (aarch64); the package carries binaries for: %s (in %s)"
            % (machine, _describe(_carried_arches(bin_dir)), bin_dir)
        )

    exe = os.path.join(bin_dir, BINARY_PREFIX + arch)
    if not os.path.isfile(exe):
        _fail(
            "no binary for machine %r (%s): %s is not in the package; it carries "
            "binaries for: %s. Install a package that includes it."
            % (machine, arch, exe, _describe(_carried_arches(bin_dir)))
        )

    try:
        mode = stat.S_IMODE(os.stat(exe).st_mode)
        wanted = mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
        if mode != wanted:
            # The daemon extracts every file with mode 0644.
            os.chmod(exe, wanted)
    except OSError as err:
        _fail(
            "cannot make %s executable (%s). The plugin working directory "
            "must be writable by the daemon user and must allow executing "
            "files (not mounted read-only or noexec)." % (exe, err)
        )

    argv = [exe, "serve"] + sys.argv[1:]
    try:
        os.execv(exe, argv)
    except OSError as err:
        _fail(
            "cannot execute %s (%s). The plugin working directory must allow "
            "executing files (not mounted noexec), and the binary must match "
            "this machine (%s)." % (exe, err, machine)
        )


if __name__ == "__main__":
    main()
