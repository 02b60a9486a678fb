//! A new user's first hour: the scripts behind `make test`/`make run`, and the messages and
//! help texts a newcomer meets, through the real binary and the real scripts.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::kv::{raw_http, KvServer, ScratchKv};
use crate::support::redis::RedisServer;

const BIN: &str = env!("CARGO_BIN_EXE_stateful-tool");

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(name)
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `stateful-tool call …` against the given kv_url, combined output.
fn call(tool: &str, params: &[&str], kv_url: &str) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(["call", tool, "-c", &format!("kv_url={kv_url}")]);
    for p in params {
        cmd.args(["-p", p]);
    }
    cmd.env("STATEFUL_TOOL_LOG", "warn");
    cmd.output().expect("run stateful-tool call")
}

/// Runs `wait-apt-lock.sh` watching only a private lock file, so the test never touches
/// (or waits on) the machine's real package manager lock.
fn wait_apt_lock(lock: &Path, timeout_secs: &str) -> std::process::Child {
    Command::new("bash")
        .arg(script("wait-apt-lock.sh"))
        .env("APT_LOCK_FILES", format!("/nonexistent/lock {}", lock.display()))
        .env("APT_LOCK_TIMEOUT", timeout_secs)
        .env("APT_LOCK_POLL", "0.05")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run wait-apt-lock.sh")
}

#[test]
fn package_lock_wait_waits_while_the_lock_is_held_then_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lock-frontend");
    let lock = fs::File::create(&path).unwrap();
    lock.lock().unwrap();
    let mut child = wait_apt_lock(&path, "600");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    stderr.read_line(&mut first).unwrap();
    assert!(first.starts_with(&format!("waiting for {} (pid {}", path.display(), std::process::id())), "{first}");
    assert!(first.contains("waiting up to 600s"), "{first}");
    // It cannot have finished: the lock is still ours.
    assert!(child.try_wait().unwrap().is_none(), "the script went on while the lock was held");
    lock.unlock().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{rest}");
    assert!(rest.contains("lock is free; going on"), "{rest}");
}

#[test]
fn package_lock_wait_gives_up_after_its_timeout_naming_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lock");
    let lock = fs::File::create(&path).unwrap();
    lock.lock().unwrap();
    let out = wait_apt_lock(&path, "0").wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("gave up") && err.contains(&path.display().to_string()), "{err}");
    // Nothing held: no waiting, no message.
    drop(lock);
    let out = wait_apt_lock(&path, "0").wait_with_output().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{}", text(&out));
}

#[test]
fn ensure_scripts_install_only_through_apt_install_which_waits_for_the_lock() {
    // apt-install.sh: its two apt-get runs each come right after a wait for the lock, and let
    // apt wait too.
    let body = fs::read_to_string(script("apt-install.sh")).unwrap();
    let runs: Vec<&str> = body.lines().filter(|l| l.trim_start().starts_with("apt-get")).collect();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for run in runs {
        assert!(run.contains("DPkg::Lock::Timeout"), "{run}");
        let at = body.find(run).unwrap();
        assert!(body[..at].trim_end().ends_with("\"$here/wait-apt-lock.sh\""), "no wait before: {run}");
    }
    // The ensure scripts never run apt-get themselves.
    let names = fs::read_dir(script("")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap());
    let ensure: Vec<String> = names.filter(|n| n.starts_with("ensure-") && n.ends_with(".sh")).collect();
    assert!(ensure.len() >= 5, "{ensure:?}");
    for name in &ensure {
        let body = fs::read_to_string(script(name)).unwrap();
        let own = body.lines().find(|l| l.contains("apt-get ") && !l.trim_start().starts_with('#'));
        assert!(own.is_none(), "{name} runs apt-get itself: {own:?}");
        assert!(body.contains("/apt-install.sh\" "), "{name} does not install through apt-install.sh");
    }
}

#[test]
fn make_run_with_a_container_already_holding_data_says_so_and_uses_its_own_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let held = KvServer::start(&cwd.path().join("data"), &[]);
    let out = Command::new("bash")
        .arg(script("demo.sh"))
        .current_dir(cwd.path())
        .env("BIN", BIN)
        .env_remove("DATA_DIR")
        .output()
        .unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let first = all.lines().next().unwrap_or_default();
    assert!(first.starts_with(&format!("./data is in use by another KV container (pid {}", held.pid())), "{all}");
    assert!(all.contains(&format!("stop that server with: kill {}", held.pid())), "{all}");
    let accepted = all.find(r#""outcome": "accepted""#).expect(&all);
    let duplicate = all.find(r#""outcome": "duplicate""#).expect(&all);
    assert!(accepted < duplicate, "{all}");
    // The container that was already running is untouched and still serving.
    let health = raw_http(held.addr(), b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(health.status, 200);
    let key = raw_http(held.addr(), b"GET /state/evt_x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert_eq!(key.status, 404);
}

#[test]
fn make_run_reports_a_container_that_cannot_start_at_once() {
    let cwd = tempfile::tempdir().unwrap();
    fs::write(cwd.path().join("data"), "not a directory").unwrap();
    let out = Command::new("bash").arg(script("demo.sh")).current_dir(cwd.path()).env("BIN", BIN).output().unwrap();
    let all = text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("the KV container did not start"), "{all}");
    assert!(all.contains("that path is a file, not a directory"), "{all}");
}

#[test]
fn kv_serve_says_data_is_a_file_and_binds_before_touching_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    fs::write(&file, "x").unwrap();
    let out = Command::new(BIN).args(["kv", "serve", "--listen", "127.0.0.1:0", "--data"]).arg(&file).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("that path is a file, not a directory"), "{}", text(&out));

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = taken.local_addr().unwrap().to_string();
    let data = dir.path().join("never-created");
    let out = Command::new(BIN).args(["kv", "serve", "--listen", &listen, "--data"]).arg(&data).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains(&format!("cannot listen on {listen}")), "{}", text(&out));
    assert!(!data.exists(), "the data directory was created although the port was taken");
}

#[test]
fn kv_serve_says_another_process_has_the_data_directory_open() {
    let dir = tempfile::tempdir().unwrap();
    let _held = KvServer::start(dir.path(), &[]);
    let out =
        Command::new(BIN).args(["kv", "serve", "--listen", "127.0.0.1:0", "--data"]).arg(dir.path()).output().unwrap();
    assert!(!out.status.success());
    assert!(text(&out).contains("is already open in another process"), "{}", text(&out));
}

#[test]
fn an_empty_event_id_is_called_empty_not_missing() {
    let kv = ScratchKv::start();
    for (tool, extra) in
        [("event_ingest", Some("event_type=created")), ("event_status", None), ("event_complete", None)]
    {
        let mut params = vec!["event_id="];
        params.extend(extra);
        let all = text(&call(tool, &params, &kv.url()));
        assert!(all.contains("param_invalid") && all.contains("event_id is empty"), "{tool}: {all}");
        let missing = text(&call(tool, &params[1..], &kv.url()));
        assert!(missing.contains("event_id is required"), "{tool}: {missing}");
    }
}

#[test]
fn redis_password_refusals_say_which_mistake_it_is() {
    let open = RedisServer::start(&[]);
    let locked = RedisServer::start(&["--requirepass", "s3cret"]);
    let validate = |url: String| text(&call("validate", &[], &url));
    let no_password_set = validate(format!("redis://:s3cret@127.0.0.1:{}/0", open.port));
    assert!(no_password_set.contains("the server has no password set"), "{no_password_set}");
    let wrong = validate(format!("redis://:wrong@127.0.0.1:{}/0", locked.port));
    assert!(wrong.contains("this one is wrong"), "{wrong}");
    let missing = validate(format!("redis://127.0.0.1:{}/0", locked.port));
    assert!(missing.contains("requires a password") && missing.contains("put it in kv_url"), "{missing}");
    for answer in [&no_password_set, &wrong, &missing] {
        assert!(!answer.contains("s3cret") && !answer.contains(":wrong@"), "a password leaked: {answer}");
    }
    let right = validate(format!("redis://:s3cret@127.0.0.1:{}/0", locked.port));
    assert!(right.contains(r#"{"result":true}"#), "{right}");
    // A sentence like the tools' answers, naming the store without its password.
    let said =
        format!("text: The credentials are valid: the store at redis://***@127.0.0.1:{}/0 is reachable", locked.port);
    assert!(right.starts_with(&said) && !right.contains("s3cret"), "{right}");
}

#[test]
fn validate_says_in_a_sentence_that_the_credentials_work() {
    let kv = ScratchKv::start();
    let out = call("validate", &[], &kv.url());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            format!(
                "text: The credentials are valid: the store at {} is reachable, accepts them and can create \
                 records atomically; save them in the provider's credential form.",
                kv.url()
            )
            .as_str(),
            r#"json: {"result":true}"#,
        ]
    );
}

#[test]
fn serve_help_lists_every_environment_variable_the_runtime_reads() {
    let out = Command::new(BIN).args(["serve", "--help"]).output().unwrap();
    let help = text(&out);
    let mut names = vec![
        "INSTALL_METHOD",
        "REMOTE_INSTALL_URL",
        "REMOTE_INSTALL_HOST",
        "REMOTE_INSTALL_KEY",
        "SERVERLESS_HOST",
        "SERVERLESS_PORT",
        "AWS_LAMBDA_HOST",
        "AWS_LAMBDA_PORT",
        "RUST_LOG",
    ];
    // Every STATEFUL_TOOL_* variable the plugin's sources read (tests' own names aside), its
    // store crate's included. The runtime crate reads none of ours: the plugin passes values in.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ours = stateful_tool_vars(&root.join("crates/dify-plugin/src"));
    assert!(ours.is_empty(), "dify-plugin names our variables {ours:?}; read them in src/serve and pass them in");
    let mut found = stateful_tool_vars(&root.join("src"));
    found.extend(stateful_tool_vars(&root.join("crates/event-store/src")));
    names.extend(found.iter().map(String::as_str));
    for name in names {
        assert!(help.contains(name), "serve --help does not mention {name}:\n{help}");
    }
    for default in ["(default 5000)", "(default 10000)", "default info", "5003", "8080"] {
        assert!(help.contains(default), "serve --help lacks {default}");
    }
    let kv = text(&Command::new(BIN).args(["kv", "serve", "--help"]).output().unwrap());
    assert!(kv.contains("KV_TOKEN") && kv.contains("STATEFUL_TOOL_LOG"), "{kv}");
}

fn stateful_tool_vars(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            // The claim-protocol simulation (a unit test) is not the runtime.
            if path.file_name().is_some_and(|n| n != "sim") {
                out.extend(stateful_tool_vars(&path));
            }
            continue;
        }
        let Ok(body) = fs::read_to_string(&path) else { continue };
        // A file's unit tests (its trailing `#[cfg(test)] mod …`) name settings of their own.
        let body = body.split("#[cfg(test)]\nmod ").next().unwrap_or_default();
        for piece in body.split("\"STATEFUL_TOOL_").skip(1) {
            let name: String = piece.chars().take_while(|c| c.is_ascii_uppercase() || *c == '_').collect();
            if piece[name.len()..].starts_with('"') && !name.starts_with("TEST_") && !out.contains(&name) {
                out.push(format!("STATEFUL_TOOL_{name}"));
            }
        }
    }
    out
}

#[test]
fn event_id_lengths_are_stated_in_bytes_in_every_locale() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for tool in ["event_ingest", "event_status", "event_complete"] {
        let body = fs::read_to_string(root.join(format!("tools/{tool}.yaml"))).unwrap();
        for line in body.lines().filter(|l| l.contains("255")) {
            let says_bytes = ["bytes", "字节", "バイト"].iter().any(|w| line.contains(w));
            assert!(says_bytes && line.contains("UTF-8"), "{tool}: {line}");
        }
    }
    let ingest = fs::read_to_string(root.join("tools/event_ingest.yaml")).unwrap();
    for locale in ["en_US", "zh_Hans", "ja_JP", "pt_BR"] {
        assert!(ingest.lines().any(|l| l.contains(locale) && l.contains("255") && l.contains("UTF-8")), "{locale}");
    }
}

#[test]
fn call_piped_into_a_reader_that_stops_early_exits_quietly() {
    // `stateful-tool call … --raw | head -n 1`: the reader goes away after the first line.
    let kv = ScratchKv::start();
    let mut child = Command::new(BIN)
        .args(["call", "event_status", "-c", &format!("kv_url={}", kv.url()), "-p", "event_id=E", "--raw"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run stateful-tool call");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.contains("heartbeat"), "{first}");
    // The reader is dropped here: every later write meets a closed pipe.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}
