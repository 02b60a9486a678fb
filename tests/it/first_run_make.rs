//! What `make run`, `make help` and the README's set-up section promise a newcomer, checked
//! against what the scripts do: the demo's closing sentence, and every system package named.

use std::fs;
use std::path::Path;
use std::process::Command;

use crate::support::kv::KvServer;

const BIN: &str = env!("CARGO_BIN_EXE_stateful-tool");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(name: &str) -> String {
    fs::read_to_string(root().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `make run`'s script in `cwd` (so its data lands in `cwd/data`), for one event id.
fn demo(cwd: &Path, event_id: &str) -> String {
    let out = Command::new("bash")
        .arg(root().join("scripts/demo.sh"))
        .current_dir(cwd)
        .env("BIN", BIN)
        .env("EVENT_ID", event_id)
        .env_remove("DATA_DIR")
        .output()
        .unwrap();
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{all}");
    all
}

/// The sentence (`text:` line) answering the delivery under the first heading `heading` starts.
fn sentence_after<'a>(all: &'a str, heading: &str) -> &'a str {
    let at = all.find(heading).unwrap_or_else(|| panic!("no {heading:?} in:\n{all}"));
    all[at..].lines().find(|l| l.starts_with("text: ")).unwrap_or_else(|| panic!("no sentence after {heading:?}"))
}

fn last_line(all: &str) -> &str {
    all.trim_end().lines().last().unwrap_or_default()
}

const PROMISE: &str = "(the record persists in ./data, completed: run 'make run' again today and its first delivery \
                       is a duplicate too";

#[test]
fn make_run_completes_its_event_so_the_next_run_finds_the_duplicate_it_promised() {
    let cwd = tempfile::tempdir().unwrap();
    let first = demo(cwd.path(), "EVT-DEMO-1");
    assert!(sentence_after(&first, "== first delivery").contains("is new (attempt 1)"), "{first}");
    assert!(sentence_after(&first, "== the workflow did the work").contains("is now completed (attempt 1)"), "{first}");
    assert!(last_line(&first).starts_with(PROMISE), "{first}");

    // Right after (the first run's container has let go of ./data): the promise holds.
    let second = demo(cwd.path(), "EVT-DEMO-1");
    let delivery = sentence_after(&second, "== first delivery");
    assert!(delivery.contains("(status completed): do not process it again."), "{second}");
    assert!(!second.contains("== the workflow did the work"), "a duplicate was completed again: {second}");
    assert!(last_line(&second).starts_with(PROMISE), "{second}");
}

#[test]
fn make_run_says_what_happens_to_an_event_an_earlier_run_left_processing() {
    let cwd = tempfile::tempdir().unwrap();
    let mut kv = KvServer::start(&cwd.path().join("data"), &[]);
    let claimed = Command::new(BIN)
        .args(["call", "event_ingest", "-c", &format!("kv_url={}", kv.url())])
        .args(["-p", "event_id=EVT-DEMO-2", "-p", "event_type=created", "-p", r#"payload={"order":42}"#])
        .output()
        .unwrap();
    assert!(claimed.status.success(), "{}", String::from_utf8_lossy(&claimed.stderr));
    let claim = String::from_utf8_lossy(&claimed.stdout).into_owned();
    let lease = claim
        .lines()
        .find_map(|l| l.strip_prefix("variable lease_until = "))
        .unwrap_or_else(|| panic!("no lease_until in {claim}"))
        .trim_matches('"')
        .to_owned();
    assert!(kv.terminate().success());

    let all = demo(cwd.path(), "EVT-DEMO-2");
    let delivery = sentence_after(&all, "== first delivery");
    assert!(delivery.contains("(status processing, attempt 1): do not process it again"), "{all}");
    assert!(!all.contains("== the workflow did the work"), "another run's claim was completed: {all}");
    assert_eq!(
        last_line(&all),
        format!(
            "(EVT-DEMO-2 is processing in ./data, not completed: until its lease ends ({lease}) deliveries are \
             duplicates; after that, the next one takes the event over as a new attempt)"
        ),
        "{all}"
    );
}

/// The Debian packages the set-up scripts install: `apt-install.sh "<why>" [flags] pkg…`
/// in each ensure script `make test` runs, and `need=(…)` in the arm64 build.
fn packages() -> (Vec<String>, Vec<String>) {
    let makefile = read("Makefile");
    let mut test = Vec::new();
    for entry in fs::read_dir(root().join("scripts")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if !(name.starts_with("ensure-") && name.ends_with(".sh")) {
            continue;
        }
        assert!(makefile.contains(&format!("./scripts/{name}")), "make test does not run {name}");
        let body = read(&format!("scripts/{name}"));
        let line = body.lines().find(|l| l.contains("/apt-install.sh\" ")).expect(&name);
        let after_reason = line.rsplit_once('"').unwrap().1;
        test.extend(after_reason.split_whitespace().filter(|w| !w.starts_with("--")).map(String::from));
    }
    let arm = read("scripts/build-arm64.sh");
    let need = arm.lines().find_map(|l| l.strip_prefix("need=(")).expect("need=( in build-arm64.sh");
    let arm64 = need.trim_end_matches(')').split_whitespace().map(String::from).collect();
    (test, arm64)
}

#[test]
fn the_readme_and_make_help_name_every_system_package_with_one_line_to_install_them() {
    let (test, arm64) = packages();
    assert!(test.len() >= 12 && arm64.len() >= 6, "{test:?} {arm64:?}");
    let readme = read("README.md");
    let setup = &readme[readme.find("## Quick start").unwrap()..readme.find("## The tools").unwrap()];
    let install = |first: &str| {
        setup
            .lines()
            .find(|l| l.contains(first) && l.contains("apt-get install -y"))
            .unwrap_or_else(|| panic!("no install line with {first} in the README's set-up section"))
    };
    let (test_line, arm64_line) = (install("redis-server"), install("qemu-user"));
    assert!(arm64_line.starts_with("sudo dpkg --add-architecture arm64 && sudo apt-get update"), "{arm64_line}");
    let help = Command::new("make").args(["-s", "--no-print-directory", "-C"]).arg(root()).arg("help").output();
    let help = String::from_utf8_lossy(&help.expect("run make help").stdout).into_owned();
    for package in &test {
        assert!(setup.contains(&format!("`{package}`")), "the README does not say what {package} is for");
    }
    for (packages, line) in [(&test, test_line), (&arm64, arm64_line)] {
        for package in packages {
            assert!(line.split_whitespace().any(|w| w == package), "{package} is not in: {line}");
            assert!(help.split_whitespace().any(|w| w == package), "make help does not name {package}:\n{help}");
        }
    }
    // The two set-up commands stay the two the newcomer types.
    let block = &setup[setup.find("```sh\n").unwrap() + 6..];
    let commands: Vec<&str> =
        block[..block.find("```").unwrap()].lines().map(|l| l.split('#').next().unwrap().trim()).collect();
    assert_eq!(commands, ["make run", "make test"]);
}

#[test]
fn the_readmes_throw_away_redis_listens_on_loopback_only() {
    let readme = read("README.md");
    let line = readme.lines().find(|l| l.starts_with("redis-server --port 6379")).expect("the README's Redis line");
    assert!(line.contains("--bind 127.0.0.1 ") && line.contains("127.0.0.1:6379"), "{line}");
}
