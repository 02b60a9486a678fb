//! The launcher shim `main.py`, run the way the daemon runs it: `python -m main` in a
//! directory laid out like an extracted package (every file mode 0644).
//!
//! Only what the shim guarantees is asserted: it replaces itself with
//! `bin/stateful-tool-<arch> serve` (same PID, exec bit restored, argv and environment
//! passed on, nothing of its own on stdout), and it fails clearly (exit 1, message on
//! stderr) when it cannot. What `serve` does afterwards is tested elsewhere.
//!
//! Set `PYTHON` to test another interpreter (default `python3`).

#![cfg(target_os = "linux")]

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

const MACHINE_OVERRIDE_ENV: &str = "STATEFUL_TOOL_SHIM_MACHINE";
const SHIM_PREFIX: &str = "stateful_tool shim:";
const DEADLINE: Duration = Duration::from_secs(60);

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// The architecture suffix the shim picks on this host.
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("the shim has no mapping for this test host's arch {other}"),
    }
}

fn other_arch() -> &'static str {
    if host_arch() == "amd64" {
        "arm64"
    } else {
        "amd64"
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// A temp dir as the daemon extracts a package: `main.py` plus the given `bin/` files
/// (name, source file), all written with mode 0644.
fn extracted_package(binaries: &[(&str, &Path)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let main_py = dir.path().join("main.py");
    fs::copy(concat!(env!("CARGO_MANIFEST_DIR"), "/main.py"), &main_py).unwrap();
    chmod(&main_py, 0o644);
    if !binaries.is_empty() {
        fs::create_dir(dir.path().join("bin")).unwrap();
    }
    for (name, source) in binaries {
        let target = dir.path().join("bin").join(name);
        fs::copy(source, &target).unwrap();
        chmod(&target, 0o644);
    }
    dir
}

fn real_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_stateful-tool"))
}

fn shim_command(dir: &Path) -> Command {
    let mut cmd = Command::new(python());
    cmd.args(["-m", "main"])
        .current_dir(dir)
        .env("INSTALL_METHOD", "local")
        .env_remove(MACHINE_OVERRIDE_ENV)
        .env_remove("PYTHONPATH");
    cmd
}

/// Runs the shim to completion with ordinary pipes.
fn run_shim(dir: &Path, machine: Option<&str>) -> Output {
    let mut cmd = shim_command(dir);
    if let Some(machine) = machine {
        cmd.env(MACHINE_OVERRIDE_ENV, machine);
    }
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python()));
    wait_output(child)
}

fn wait_output(mut child: Child) -> Output {
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let status = wait_with_deadline(&mut child);
    Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        r.read_to_end(&mut buf).unwrap();
        buf
    })
}

fn wait_with_deadline(child: &mut Child) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("process {} did not exit within {DEADLINE:?}", child.id());
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// A connected socket pair whose first end has a full send buffer: a process given that
/// end as stdout/stderr blocks on its first write until the other end is read. This holds
/// the exec'd binary alive (whatever it writes first) while its `/proc` entry is inspected.
/// Returns (end for the child, our end, number of filler bytes queued before its output).
fn blocked_channel() -> (UnixStream, UnixStream, usize) {
    let (child_end, ours) = UnixStream::pair().unwrap();
    child_end.set_nonblocking(true).unwrap();
    let mut filled = 0;
    for chunk in [&[0u8; 4096][..], &[0u8; 1][..]] {
        loop {
            match (&child_end).write(chunk) {
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => panic!("filling the socket buffer: {e}"),
            }
        }
    }
    child_end.set_nonblocking(false).unwrap();
    (child_end, ours, filled)
}

fn proc_exe(pid: u32) -> Option<PathBuf> {
    fs::read_link(format!("/proc/{pid}/exe")).ok()
}

fn proc_nul_list(pid: u32, what: &str) -> Vec<String> {
    let raw = fs::read(format!("/proc/{pid}/{what}")).unwrap();
    raw.split(|b| *b == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
}

#[test]
fn shim_execs_the_binary_in_place() {
    let exe_name = format!("stateful-tool-{}", host_arch());
    let pkg = extracted_package(&[(&exe_name, real_binary())]);
    let exe = pkg.path().join("bin").join(&exe_name);
    assert_eq!(mode(&exe), 0o644, "extracted without exec bits, like the daemon");
    let exe_canonical = fs::canonicalize(&exe).unwrap();

    let (out_child, out_ours, out_fill) = blocked_channel();
    let (err_child, err_ours, err_fill) = blocked_channel();
    let mut child = shim_command(pkg.path())
        .arg("--extra-arg-from-daemon")
        .stdin(Stdio::piped())
        .stdout(Stdio::from(OwnedFd::from(out_child)))
        .stderr(Stdio::from(OwnedFd::from(err_child)))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python()));
    let pid = child.id();

    // The PID the daemon started becomes the binary (it blocks on its first write).
    let start = Instant::now();
    let mut last_seen = None;
    while last_seen.as_deref() != Some(exe_canonical.as_path()) {
        if start.elapsed() > DEADLINE || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            let mut err = Vec::new();
            (&err_ours).read_to_end(&mut err).unwrap();
            panic!(
                "pid {pid} never became {}: last exe {last_seen:?}; stderr: {}",
                exe_canonical.display(),
                String::from_utf8_lossy(&err[err_fill.min(err.len())..])
            );
        }
        last_seen = proc_exe(pid);
        thread::sleep(Duration::from_millis(2));
    }
    // The new executable shows in /proc before exec has laid out the new argv and environment
    // (create_elf_tables comes last): read them once they are there.
    let (argv, environ) = loop {
        let (argv, environ) = (proc_nul_list(pid, "cmdline"), proc_nul_list(pid, "environ"));
        if (!argv.is_empty() && !environ.is_empty()) || start.elapsed() > DEADLINE {
            break (argv, environ);
        }
        thread::sleep(Duration::from_millis(2));
    };

    // Let it run to the end: close stdin, read both channels.
    drop(child.stdin.take());
    let out = drain(out_ours);
    let err = drain(err_ours);
    let _status = wait_with_deadline(&mut child);
    let out = out.join().unwrap();
    let err = err.join().unwrap();
    let (out, err) = (&out[out_fill..], &err[err_fill..]);

    assert_eq!(
        argv,
        [exe.to_str().unwrap(), "serve", "--extra-arg-from-daemon"],
        "argv is the binary, `serve`, then the shim's own arguments"
    );
    assert!(environ.iter().any(|v| v == "INSTALL_METHOD=local"), "the environment is passed on");
    assert_eq!(mode(&exe) & 0o111, 0o111, "exec bits restored");
    assert_eq!(mode(&pkg.path().join("main.py")), 0o644, "nothing else touched");

    // stdout is the protocol channel: the shim wrote nothing there. Whatever the binary
    // writes is protocol JSON, one object per line.
    for line in String::from_utf8_lossy(out).lines() {
        if line.trim().is_empty() {
            continue;
        }
        assert!(serde_json::from_str::<serde_json::Value>(line).is_ok(), "non-protocol line on stdout: {line:?}");
    }
    assert!(
        !String::from_utf8_lossy(err).contains(SHIM_PREFIX),
        "the shim reported an error: {}",
        String::from_utf8_lossy(err)
    );
}

#[test]
fn shim_restores_exec_bit_once_and_keeps_it() {
    let exe_name = format!("stateful-tool-{}", host_arch());
    let pkg = extracted_package(&[(&exe_name, real_binary())]);
    let exe = pkg.path().join("bin").join(&exe_name);
    for _ in 0..2 {
        let out = run_shim(pkg.path(), None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains(SHIM_PREFIX), "shim error: {stderr}");
        assert_eq!(mode(&exe), 0o755);
    }
}

#[test]
fn unsupported_machine_exits_1_with_a_clear_message() {
    let pkg = extracted_package(&[(&format!("stateful-tool-{}", host_arch()), real_binary())]);
    let out = run_shim(pkg.path(), Some("sparc64"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "stdout must stay clean");
    assert!(stderr.starts_with(SHIM_PREFIX), "{stderr}");
    assert!(stderr.contains("unsupported machine 'sparc64'"), "{stderr}");
    assert!(stderr.contains(&format!("carries binaries for: {}", host_arch())), "names the arches in bin/: {stderr}");
}

#[test]
fn machine_names_are_mapped_case_insensitively() {
    // `AMD64`/`ARM64` are how some platforms spell it; both map to the same binary name.
    let pkg = extracted_package(&[]);
    for (machine, arch) in [("AMD64", "amd64"), ("aarch64", "arm64"), ("x86_64", "amd64")] {
        let out = run_shim(pkg.path(), Some(machine));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr.contains(&format!("bin/stateful-tool-{arch} is not in the package")), "{machine}: {stderr}");
    }
}

#[test]
fn missing_binary_for_the_machine_exits_1_with_a_clear_message() {
    // Only the other architecture's binary is in the package.
    let dummy = tempfile::NamedTempFile::new().unwrap();
    let pkg = extracted_package(&[(&format!("stateful-tool-{}", other_arch()), dummy.path())]);
    let out = run_shim(pkg.path(), None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "stdout must stay clean");
    assert!(stderr.starts_with(SHIM_PREFIX), "{stderr}");
    assert!(stderr.contains(&format!("stateful-tool-{} is not in the package", host_arch())), "{stderr}");
    assert!(stderr.contains(&format!("carries binaries for: {}", other_arch())), "{stderr}");

    // No bin/ at all.
    let empty = extracted_package(&[]);
    let out = run_shim(empty.path(), None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("carries binaries for: none"), "{stderr}");
}

#[test]
fn binary_that_cannot_be_executed_exits_1_with_a_clear_message() {
    // Not an executable format: chmod succeeds, exec fails (as on a noexec mount).
    let mut garbage = tempfile::NamedTempFile::new().unwrap();
    garbage.write_all(b"this is not an executable\n").unwrap();
    let name = format!("stateful-tool-{}", host_arch());
    let pkg = extracted_package(&[(&name, garbage.path())]);
    let out = run_shim(pkg.path(), None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "stdout must stay clean");
    assert!(stderr.contains("cannot execute"), "{stderr}");
    assert!(stderr.contains("must allow executing files"), "{stderr}");
}

#[test]
fn chmod_failure_exits_1_with_a_clear_message() {
    // A regular file whose mode nobody can change, not even root: the kernel refuses
    // chmod on per-process procfs entries (`/proc/self` is the shim's own process), so
    // nothing outside the temp dir can be modified by this test.
    let pkg = extracted_package(&[]);
    fs::create_dir(pkg.path().join("bin")).unwrap();
    let link = pkg.path().join("bin").join(format!("stateful-tool-{}", host_arch()));
    std::os::unix::fs::symlink("/proc/self/environ", &link).unwrap();
    let out = run_shim(pkg.path(), None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "stdout must stay clean");
    assert!(stderr.contains("cannot make"), "{stderr}");
    assert!(stderr.contains("must be writable") && stderr.contains("executing files"), "{stderr}");
}

/// End to end as the daemon runs it: an extracted package (files 0644), `python3 -m main`,
/// request lines on stdin, protocol lines on stdout — accepted, then duplicate, then a clean
/// exit at EOF.
#[test]
fn daemon_style_launch_serves_requests_through_the_shim() {
    let binary = format!("stateful-tool-{}", host_arch());
    let dir = extracted_package(&[(binary.as_str(), real_binary())]);
    let kv = crate::support::kv::ScratchKv::start();
    let kv_url = kv.url();
    let mut child =
        shim_command(dir.path()).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let request = |sid: &str| {
        format!(
            "{{\"session_id\":\"{sid}\",\"conversation_id\":null,\"message_id\":null,\"app_id\":null,\"endpoint_id\":null,\"context\":null,\"event\":\"request\",\"data\":{{\"action\":\"invoke_tool\",\"credential_type\":\"api-key\",\"credentials\":{{\"kv_url\":\"{kv_url}\"}},\"provider\":\"stateful_tool\",\"tool\":\"event_ingest\",\"tool_parameters\":{{\"event_id\":\"EVT-1\",\"event_type\":\"created\"}},\"type\":\"tool\",\"user_id\":\"u\"}}}}\n"
        )
    };
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(request("first").as_bytes()).unwrap();
    // Wait for the first answer before the retry, as a sender's retry would come later.
    let stdout = child.stdout.take().unwrap();
    let mut reader = std::io::BufReader::new(stdout);
    let mut lines = vec![];
    let mut line = String::new();
    while std::io::BufRead::read_line(&mut reader, &mut line).unwrap() > 0 {
        lines.push(std::mem::take(&mut line));
        if lines.last().unwrap().contains("\"first\"") && lines.last().unwrap().contains("\"end\"") {
            break;
        }
    }
    stdin.write_all(request("second").as_bytes()).unwrap();
    drop(stdin);
    while std::io::BufRead::read_line(&mut reader, &mut line).unwrap() > 0 {
        lines.push(std::mem::take(&mut line));
    }
    let status = wait_with_deadline(&mut child);
    assert!(status.success(), "{status:?}");
    let outcome = |sid: &str| -> String {
        lines
            .iter()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("stdout carries only JSON lines"))
            .find(|v| v["session_id"] == sid && v["data"]["data"]["type"] == "json")
            .map(|v| v["data"]["data"]["message"]["json_object"]["outcome"].as_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    assert!(lines[0].contains("heartbeat"), "{lines:?}");
    assert_eq!(outcome("first"), "accepted");
    assert_eq!(outcome("second"), "duplicate");
}
