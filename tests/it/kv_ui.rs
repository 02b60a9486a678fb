//! The KV container's status page (`/ui`) in a real headless Chromium over WebDriver:
//! events made through the real plugin, the login form, counts / stuck list / a record's
//! detail compared with `kv ls` / `kv get`, the claim figures compared with the plugin's own
//! answers, a wrong token, and the screenshot in docs/.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::browser::Browser;
use crate::support::kv::KvServer;
use crate::support::package::{run, stdout};
use crate::support::plugin::Plugin;

const TOKEN: &str = "ui-test-token-5f1c";
const WAIT: Duration = Duration::from_secs(30);

/// `kv ls --prefix evt` as rows of named columns.
fn kv_ls(url: &str) -> Vec<BTreeMap<String, String>> {
    let out = run(&["kv", "ls", "--url", url, "--token", TOKEN, "--prefix", "evt", "--limit", "1000"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    let split = regex::Regex::new(r"\s{2,}").unwrap();
    let mut lines = text.lines();
    let head: Vec<String> = split.split(lines.next().unwrap()).map(str::to_owned).collect();
    lines
        .filter(|l| l.starts_with("evt"))
        .map(|l| head.iter().cloned().zip(split.split(l).map(str::to_owned)).collect())
        .collect()
}

/// `kv get KEY` as field → value.
fn kv_get(url: &str, key: &str) -> BTreeMap<String, String> {
    let out = run(&["kv", "get", key, "--url", url, "--token", TOKEN]);
    assert!(out.status.success(), "{out:?}");
    stdout(&out).lines().filter_map(|l| l.split_once(' ').map(|(k, v)| (k.to_owned(), v.trim().to_owned()))).collect()
}

/// Accepted, completed, failed, a lease that runs out, one with no lease, a duplicate and a
/// conflict, all through the real plugin. Returns how many creates the plugin accepted.
async fn make_events(url: &str) -> u64 {
    let p = Plugin::spawn(&[]).await;
    let c = json!({"kv_url": url, "kv_token": TOKEN});
    let ingest = |id: &str, lease: u32| json!({"event_id": id, "event_type": "created", "payload": format!("{{\"order\":\"{id}\"}}"), "lease_seconds": lease});
    let mut accepted = 0;
    for (id, lease) in [("A-1", 600), ("A-2", 600), ("C-1", 600), ("F-1", 600), ("F-2", 600), ("E-1", 1), ("N-1", 0)] {
        let r = p.invoke("event_ingest", &c, ingest(id, lease)).await;
        assert_eq!(r.outcome(), "accepted", "{r:?}");
        accepted += 1;
    }
    let done = json!({"event_id": "C-1", "attempt": 1, "result": "shipped"});
    assert_eq!(p.invoke("event_complete", &c, done).await.outcome(), "completed");
    for (id, why) in [("F-1", "smtp down: 421 try later"), ("F-2", "card declined")] {
        let fail = json!({"event_id": id, "attempt": 1, "status": "failed", "result": why});
        assert_eq!(p.invoke("event_complete", &c, fail).await.outcome(), "failed");
    }
    assert_eq!(p.invoke("event_ingest", &c, ingest("A-1", 600)).await.outcome(), "duplicate");
    let other = json!({"event_id": "A-2", "event_type": "created", "payload": "{\"order\":\"changed\"}"});
    assert_eq!(p.invoke("event_ingest", &c, other).await.error_type(), Some("conflict"));
    accepted
}

/// What the page shows on the Now view, once it shows counts.
const NOW_FIGURES: &str = "const t = (id) => document.getElementById(id)?.textContent;
    if (t('count-failed') == null) return null;
    return {processing: t('count-processing'), completed: t('count-completed'), failed: t('count-failed'),
            stuck: t('count-stuck'), health: t('health-status'), durability: t('durability')};";

async fn sign_in(b: &Browser, token: &str) {
    b.wait_for("the login form", "return !document.getElementById('login').hidden;", WAIT).await;
    b.type_into("#token", token).await;
    b.click("#signin").await;
}

fn screenshot_path(name: &str) -> PathBuf {
    // `STATUS_PAGE_SCREENSHOTS=docs` refreshes the committed pictures; a normal run keeps
    // them under target/ so the tree stays clean.
    let dir = std::env::var("STATUS_PAGE_SCREENSHOTS").unwrap_or_else(|_| "target/status-page".into());
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir).join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_what_kv_ls_and_kv_get_show() {
    let data = tempfile::tempdir().unwrap();
    let kv =
        KvServer::start(data.path(), &["--token", TOKEN, "--stuck-after-seconds", "3", "--census-interval-ms", "200"]);
    let url = kv.url();
    let accepted = make_events(&url).await;
    let b = Browser::start().await;
    b.goto(&format!("{url}/ui")).await;

    // A wrong token: the form again, with nothing else on the page.
    sign_in(&b, "not-the-token").await;
    let refused = b
        .wait_for(
            "the refusal",
            "const e = document.getElementById('login-error').textContent; return e || null;",
            WAIT,
        )
        .await;
    assert_eq!(refused, "That token was refused.");
    let page = b
        .eval(
            "const seen = (id) => document.getElementById(id).checkVisibility();
             return {form: seen('login'), view: !seen('view'), nav: !seen('nav'),
                     children: document.getElementById('view').childElementCount,
                     stored: sessionStorage.length, text: document.body.innerText, url: location.href};",
        )
        .await;
    assert_eq!(
        (&page["form"], &page["view"], &page["nav"], &page["children"], &page["stored"]),
        (&json!(true), &json!(true), &json!(true), &json!(0), &json!(0)),
        "{page}"
    );
    assert!(!page["text"].as_str().unwrap().contains("evt_"), "{page}");

    // The right token: the Now view, counts as `kv ls` counts them once both stuck records are due.
    sign_in(&b, TOKEN).await;
    let expected_stuck = BTreeSet::from(["evt_E-1".to_owned(), "evt_N-1".to_owned()]);
    let deadline = Instant::now() + WAIT;
    let (rows, figures) = loop {
        let figures = b.wait_for("the Now view", NOW_FIGURES, WAIT).await;
        let rows = kv_ls(&url);
        let count = |s: &str| rows.iter().filter(|r| r["STATUS"] == s).count().to_string();
        let lapsed = rows.iter().any(|r| r["KEY"] == "evt_E-1" && r["LEASE"].starts_with("expired"));
        if lapsed
            && figures["stuck"] == "2"
            && [("processing", count("processing")), ("completed", count("completed")), ("failed", count("failed"))]
                .iter()
                .all(|(s, n)| figures[*s] == *n)
        {
            break (rows, figures);
        }
        assert!(Instant::now() < deadline, "the page never matched kv ls: {figures} vs {rows:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        (&figures["processing"], &figures["completed"], &figures["failed"]),
        (&json!("4"), &json!("1"), &json!("2"))
    );
    assert_eq!((&figures["health"], &figures["durability"]), (&json!("ok"), &json!("immediate")));
    let form = b.eval("return document.getElementById('login').checkVisibility();").await;
    assert_eq!(form, json!(false), "the form is gone once signed in");
    let url_now = b.eval("return location.href;").await;
    assert!(!url_now.as_str().unwrap().contains(TOKEN), "the token is never in a URL: {url_now}");
    b.screenshot(&screenshot_path("status-page.png")).await;

    // The stuck list: exactly the processing records whose lease ran out (kv ls: `expired …`)
    // or that have none (kv ls: `-`), here older than --stuck-after-seconds 3.
    b.goto(&format!("{url}/ui/#lists")).await;
    let listed = "const rows = (id) => [...document.querySelectorAll('#' + id + ' tr[data-key]')]
            .map((tr) => [...tr.cells].map((td) => td.textContent));
        if (!document.getElementById('stuck-list')) return null;
        return {stuck: rows('stuck-list'), failed: rows('failed-list')};";
    let lists = b.wait_for("the Lists view", listed, WAIT).await;
    let stuck: BTreeSet<String> =
        lists["stuck"].as_array().unwrap().iter().map(|r| r[0].as_str().unwrap().into()).collect();
    let from_ls: BTreeSet<String> = rows
        .iter()
        .filter(|r| r["STATUS"] == "processing" && (r["LEASE"].starts_with("expired") || r["LEASE"] == "-"))
        .map(|r| r["KEY"].clone())
        .collect();
    assert_eq!((&stuck, &from_ls), (&expected_stuck, &expected_stuck), "{lists}");
    let reasons: Vec<&str> = lists["stuck"].as_array().unwrap().iter().map(|r| r[4].as_str().unwrap()).collect();
    assert!(
        reasons.iter().any(|r| r.starts_with("lease expired")) && reasons.iter().any(|r| r.ends_with("no lease")),
        "{reasons:?}"
    );
    let failed: Vec<(&str, &str)> =
        lists["failed"].as_array().unwrap().iter().map(|r| (r[0].as_str().unwrap(), r[4].as_str().unwrap())).collect();
    assert_eq!(failed.len(), 2, "{lists}");
    assert!(
        failed.contains(&("evt_F-1", "smtp down: 421 try later")) && failed.contains(&("evt_F-2", "card declined"))
    );
    b.screenshot(&screenshot_path("status-page-lists.png")).await;

    // A record's detail, reached by clicking its link, field for field as `kv get` prints it.
    b.click("#failed-list tr[data-key='evt_F-1'] a").await;
    let detail = "if (!document.getElementById('record')) return null;
        return Object.fromEntries([...document.querySelectorAll('#record tr')].map((tr) => [tr.dataset.field, tr.cells[1].textContent]));";
    let shown = b.wait_for("the record view", detail, WAIT).await;
    let get = kv_get(&url, "evt_F-1");
    for field in [
        "event_id",
        "event_type",
        "status",
        "attempt",
        "received_at",
        "updated_at",
        "completed_at",
        "result",
        "fingerprint",
        "payload",
    ] {
        assert_eq!(shown[field].as_str(), Some(get[field].as_str()), "{field}: page {shown} vs kv get {get:?}");
    }
    assert_eq!(get["status"], "failed");

    // Search by prefix: the keys `kv ls --prefix` lists, with their status.
    b.goto(&format!("{url}/ui/#search")).await;
    b.wait_for("the search form", "return document.getElementById('prefix') != null;", WAIT).await;
    b.eval("document.getElementById('prefix').value = '';").await;
    b.type_into("#prefix", "evt_F").await;
    b.click("#search-form button").await;
    let found = "const rows = [...document.querySelectorAll('#search-list tr[data-key]')];
        return rows.length && rows.every((tr) => tr.dataset.key.startsWith('evt_F'))
            ? rows.map((tr) => [tr.dataset.key, tr.cells[4].textContent]) : null;";
    let found = b.wait_for("the search results", found, WAIT).await;
    let from_ls: Vec<Value> =
        rows.iter().filter(|r| r["KEY"].starts_with("evt_F")).map(|r| json!([r["KEY"], r["STATUS"]])).collect();
    assert_eq!(found.as_array().unwrap(), &from_ls);

    // Rates: what the container judged from the conditional writes is what the plugin answered.
    b.goto(&format!("{url}/ui/#rates")).await;
    let totals = "const t = document.querySelector('#rate-totals tbody tr');
        return t ? [...t.cells].slice(1).map((td) => Number(td.textContent)) : null;";
    let t = b.wait_for("the Rates view", totals, WAIT).await;
    assert_eq!(
        &t.as_array().unwrap()[..4],
        &[json!(accepted), json!(0), json!(1), json!(1)],
        "accepted, reclaimed, duplicate, conflict"
    );
    let drawn = b.eval("return [...document.querySelectorAll('.chart')].map((c) => c.querySelectorAll('polyline, circle').length);").await;
    assert!(drawn.as_array().unwrap().iter().all(|n| n.as_u64() >= Some(1)), "both charts draw their series: {drawn}");
    b.screenshot(&screenshot_path("status-page-rates.png")).await;
}

#[tokio::test]
async fn the_api_needs_the_token_and_the_page_holds_no_data() {
    let data = tempfile::tempdir().unwrap();
    let kv = KvServer::start(data.path(), &["--token", TOKEN]);
    let http = reqwest::Client::new();
    let url = kv.url();
    for path in ["now", "rates", "lists", "keys?prefix=evt", "record/evt_x"] {
        let resp = http.get(format!("{url}/ui/api/{path}")).send().await.unwrap();
        assert_eq!(resp.status(), 401, "{path}");
    }
    let page = http.get(format!("{url}/ui/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(page.text().await.unwrap().contains("id=\"login\""));
    let moved = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let resp = moved.get(format!("{url}/ui")).send().await.unwrap();
    assert_eq!((resp.status().as_u16(), resp.headers()["location"].to_str().unwrap()), (308, "ui/"));
    let now = http.get(format!("{url}/ui/api/now")).bearer_auth(TOKEN).send().await.unwrap();
    let now: Value = serde_json::from_slice(&now.bytes().await.unwrap()).unwrap();
    assert_eq!((&now["health"]["status"], &now["census"]["keys"]), (&json!("ok"), &json!(0)), "{now}");
    let bad = http.get(format!("{url}/ui/api/keys?prefix=a/b")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(bad.status(), 400);

    // Paged like `GET /state`: `limit`, then `after` = the previous page's `next`.
    for key in ["p1", "p2", "p3", "q1"] {
        let put = http.put(format!("{url}/state/{key}")).bearer_auth(TOKEN).body("{\"n\":1}").send().await.unwrap();
        assert_eq!(put.status(), 201);
    }
    let page = |q: &str| {
        let req = http.get(format!("{url}/ui/api/keys?{q}")).bearer_auth(TOKEN);
        async move { serde_json::from_slice::<Value>(&req.send().await.unwrap().bytes().await.unwrap()).unwrap() }
    };
    let first = page("prefix=p&limit=2").await;
    let keys = |p: &Value| {
        p["keys"].as_array().unwrap().iter().map(|k| k["key"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(
        (keys(&first), &first["next"], &first["keys"][0]["status"]),
        (vec!["p1".into(), "p2".into()], &json!("p2"), &json!("other"))
    );
    let second = page("prefix=p&limit=2&after=p2").await;
    assert_eq!((keys(&second), &second["next"]), (vec!["p3".to_owned()], &Value::Null));
}
