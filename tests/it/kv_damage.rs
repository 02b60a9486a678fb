//! Damage to the data file found while the KV container serves (by a request or by the
//! background check of every page): no crash, no wrong answer,
//! `/healthz` 503 with the reason, and the log says what to do.

use std::io::{Seek, SeekFrom, Write};
use std::time::Duration;

use crate::support::kv::{etag_rev, KvServer};

/// redb's first page holds the file header and commit slots; every B-tree page comes after.
const HEADER_PAGE: u64 = 4096;

async fn status(req: reqwest::RequestBuilder) -> (u16, String) {
    let resp = req.send().await.expect("the server answers");
    let code = resp.status().as_u16();
    (code, resp.text().await.unwrap_or_default())
}

#[tokio::test]
async fn damage_found_while_serving_is_reported_and_never_served_as_data() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let log = tmp.path().join("kv.log");
    // No page cache: every request reads its pages from the file, as pages evicted from a
    // full cache are in a store larger than the cache. (With the default 1 GiB cache the
    // pages read at start-up stay in memory and the damage below would not be seen until a
    // restart, which refuses the file.)
    let server = KvServer::start_logged(&data, &["--cache-mb", "0"], &[], &log);
    let http = reqwest::Client::new();
    let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let body = format!("{{\"n\":{i},\"pad\":\"{}\"}}", "x".repeat(500));
        let (code, text) = status(http.put(format!("{}/state/{key}", server.url())).body(body)).await;
        assert_eq!(code, 201, "{text}");
    }
    let (code, _) = status(http.get(format!("{}/healthz", server.url()))).await;
    assert_eq!(code, 200);

    // Overwrite every page after the header in place, under the running server.
    let file = data.join("kv.redb");
    let len = std::fs::metadata(&file).unwrap().len();
    assert!(len > 40 * HEADER_PAGE, "the store spans many pages ({len} bytes)");
    let mut f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.seek(SeekFrom::Start(HEADER_PAGE)).unwrap();
    f.write_all(&vec![0xAA; (len - HEADER_PAGE) as usize]).unwrap();
    f.sync_all().unwrap();
    drop(f);

    // Reads of keys that exist: an error, never their (garbage) value, never "not found".
    for key in keys.iter().step_by(37) {
        let (code, text) = status(http.get(format!("{}/state/{key}", server.url()))).await;
        assert!((500..600).contains(&code), "GET {key} on a damaged file answered {code}: {text}");
    }
    // Listing and backups read the same pages: refused too.
    for path in ["state", "backup"] {
        let (code, text) = status(http.get(format!("{}/{path}", server.url()))).await;
        assert!((500..600).contains(&code), "GET /{path} on a damaged file answered {code}: {text}");
    }
    // Writes: refused, never acknowledged.
    for key in ["new-key", "k5"] {
        let req = http.put(format!("{}/state/{key}", server.url())).body("{}");
        let (code, text) = status(req).await;
        assert!((500..600).contains(&code), "PUT {key} on a damaged file answered {code}: {text}");
    }
    // Health tells the truth, and the process is still there to say it.
    let (code, text) = status(http.get(format!("{}/healthz", server.url()))).await;
    assert_eq!(code, 503, "{text}");
    let health: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(health["status"], "damaged", "{health}");
    assert!(health["reason"].as_str().unwrap().contains("damaged"), "{health}");
    // /metrics still answers, with kv_healthy 0: what the KvUnhealthy alert watches.
    let (code, text) = status(http.get(format!("{}/metrics", server.url()))).await;
    assert_eq!(code, 200, "{text}");
    assert!(text.lines().any(|l| l == "kv_healthy 0"), "{text}");
    // A while later (the writer retries reopening the file) it still says so, and still answers.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (code, text) = status(http.get(format!("{}/state/k1", server.url()))).await;
    assert!((500..600).contains(&code), "{code}: {text}");
    let (code, text) = status(http.get(format!("{}/healthz", server.url()))).await;
    assert_eq!(code, 503, "{text}");
    assert!(std::path::Path::new(&format!("/proc/{}", server.pid())).exists(), "the server died");

    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("the data file is damaged") && logged.contains("kv check"), "{logged}");
    // The storage engine's assertion is logged as one line, not as a raw panic on stderr.
    assert!(logged.contains("kv: internal failure") && !logged.contains("panicked at"), "{logged}");
}

/// A value damaged inside its page, in a way that still parses as JSON: the record's
/// checksum catches it on the read, while serving, and at the next start.
#[tokio::test]
async fn a_damaged_value_that_still_parses_is_refused_while_serving_and_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let log = tmp.path().join("kv.log");
    let mut server = KvServer::start_logged(&data, &["--cache-mb", "0"], &[], &log);
    let http = reqwest::Client::new();
    // Values this short are stored as sent (not compressed), so the damage can keep them JSON.
    const MARKER: &str = "amount-0001234500-EUR";
    for key in ["before", "victim", "after"] {
        let body = format!("{{\"key\":\"{key}\",\"note\":\"{MARKER}\"}}");
        let (code, text) = status(http.put(format!("{}/state/{key}", server.url())).body(body)).await;
        assert_eq!(code, 201, "{text}");
    }
    let victim = format!("{{\"key\":\"victim\",\"note\":\"{MARKER}\"}}");
    // The check of every page that follows a start must be over before the file is damaged:
    // on a loaded machine it could otherwise find the damage first, and this test is about
    // the read that meets it.
    let (code, body) = check_ended(&http, &server.url()).await;
    assert_eq!(code, 200, "{body}");

    // One digit of the victim's amount changes in every copy the file holds: still JSON.
    let file = data.join("kv.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    let mut changed = 0;
    let mut at = 0;
    while let Some(found) = find(&bytes[at..], victim.as_bytes()) {
        let digit = at + found + victim.find("12345").unwrap();
        bytes[digit] = b'9';
        changed += 1;
        at += found + victim.len();
    }
    assert!(changed >= 1, "the victim's value is in the file");
    std::fs::write(&file, &bytes).unwrap();

    let (code, text) = status(http.get(format!("{}/state/victim", server.url()))).await;
    assert!((500..600).contains(&code), "a damaged value was answered {code}: {text}");
    assert!(!text.contains("amount-0009"), "the damaged value was served: {text}");
    let (code, text) = status(http.get(format!("{}/healthz", server.url()))).await;
    assert_eq!(code, 503, "{text}");
    let health: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(health["status"], "damaged", "{health}");
    let reason = health["reason"].as_str().unwrap();
    assert!(reason.contains("\"victim\"") && reason.contains("checksum"), "{health}");
    server.terminate();

    // Offline, the file is refused (redb's page checksums see it too once the file is at rest).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stateful-tool"))
        .args(["kv", "check", "--data"])
        .arg(&data)
        .env_remove("KV_TOKEN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "kv check accepted a damaged value: {stderr}");
    assert!(stderr.contains("not a complete, valid store"), "{stderr}");
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn health(http: &reqwest::Client, url: &str) -> (u16, serde_json::Value) {
    let resp = http.get(format!("{url}/healthz")).send().await.expect("the server answers");
    (resp.status().as_u16(), serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap())
}

/// Polls `/healthz` until the integrity check is no longer running; returns the last answer.
async fn check_ended(http: &reqwest::Client, url: &str) -> (u16, serde_json::Value) {
    let started = std::time::Instant::now();
    loop {
        let (code, body) = health(http, url).await;
        if !["running", "not_run"].contains(&body["integrity"]["state"].as_str().unwrap_or("")) {
            return (code, body);
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the check never ended: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The check of every page runs beside serving (after start, and on demand with
/// `POST /admin/check`): a page damaged under a running container is reported through
/// `/healthz`, `/metrics` and the log, and reads and writes stop.
#[tokio::test]
async fn the_background_check_reports_a_page_damaged_while_the_container_serves() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let log = tmp.path().join("kv.log");
    let server = KvServer::start_logged(&data, &[], &[("STATEFUL_TOOL_LOG", "info")], &log);
    let http = reqwest::Client::new();
    const MARKER: &str = "integrity-marker";
    let mut victim_rev = None;
    for i in 0..200 {
        let body = format!("{{\"n\":{i},\"note\":\"{MARKER}-{i:03}\",\"pad\":\"{}\"}}", "x".repeat(400));
        let resp = http.put(format!("{}/state/k{i}", server.url())).body(body).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 201);
        if i == 123 {
            victim_rev = etag_rev(resp.headers());
        }
    }
    let victim_rev = victim_rev.expect("an ETag on create");
    // The check at start found an intact store (it began before these writes, on an empty one).
    let (code, body) = check_ended(&http, &server.url()).await;
    assert_eq!((code, body["integrity"]["state"].as_str()), (200, Some("passed")), "{body}");
    // On demand, it sees every record written since.
    let (code, text) = status(http.post(format!("{}/admin/check", server.url()))).await;
    assert_eq!(code, 202, "{text}");
    let (code, body) = check_ended(&http, &server.url()).await;
    assert_eq!(
        (code, &body["integrity"]["state"], &body["integrity"]["records"]),
        (200, &"passed".into(), &200.into())
    );

    // One byte of one record changes in every copy the file holds, under the running server.
    // Its value is long and repetitive, so it is stored compressed: not as text, but found by
    // its header (format tag 3, then its revision, the ETag), and changed inside the
    // compressed bytes: the ninth of them, past the record's 33 bytes of header (25),
    // checksum (4) and length (4).
    let file = data.join("kv.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    let needle: Vec<u8> = [&[3u8][..], &victim_rev.to_le_bytes()].concat();
    let mut changed = 0;
    let mut from = 0;
    while let Some(found) = find(&bytes[from..], &needle) {
        let at = from + found + 33 + 8;
        bytes[at] = !bytes[at];
        changed += 1;
        from = at;
    }
    assert!(changed >= 1, "the record is in the file");
    std::fs::write(&file, &bytes).unwrap();

    // The container still serves while the check runs, and the check reports the damage.
    let (code, text) = status(http.post(format!("{}/admin/check", server.url()))).await;
    assert_eq!(code, 202, "{text}");
    let (code, body) = check_ended(&http, &server.url()).await;
    assert_eq!((code, &body["status"], &body["integrity"]["state"]), (503, &"damaged".into(), &"damaged".into()));
    assert!(body["reason"].as_str().unwrap().contains("integrity check"), "{body}");
    let (code, text) = status(http.get(format!("{}/metrics", server.url()))).await;
    assert_eq!(code, 200, "{text}");
    for line in ["kv_integrity_damage_found 1", "kv_healthy 0", "kv_integrity_check_running 0"] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in {text}");
    }
    // Nothing is read or written from a file known to be damaged.
    let (code, text) = status(http.get(format!("{}/state/k5", server.url()))).await;
    assert!((500..600).contains(&code), "{code}: {text}");
    let (code, text) = status(http.put(format!("{}/state/new", server.url())).body("{}")).await;
    assert!((500..600).contains(&code), "{code}: {text}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("integrity check") && logged.contains("not a complete, valid store"), "{logged}");
}
