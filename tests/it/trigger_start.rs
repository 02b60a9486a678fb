//! A claim at the door is a reservation until a workflow run takes it, on the KV container,
//! Redis and PostgreSQL, through the real binary. The store's own clock is moved by the test
//! (the real server under libfaketime): a start window passes when the test says so. Redis
//! is the exception: Debian's redis-server (jemalloc) cannot run under libfaketime, so its
//! run uses a three-second window on the real clock.

use serde_json::{json, Value};

use crate::support::kv::KvServer;
use crate::support::plugin::Plugin;
use crate::support::postgres::PgServer;
use crate::support::redis::RedisServer;
use crate::support::store_time::StoreTime;
use crate::trigger_door::{chunk, dispatch_data, http, invoke_data, raw_request, ENV};

/// How the store's time moves: by the test (libfaketime), or by itself.
enum Time {
    Moved(StoreTime),
    /// The real clock; `advance` sleeps, counted from the last answer.
    Real,
}

impl Time {
    /// The start window and the run's lease, in seconds.
    fn window_and_lease(&self) -> (u64, u64) {
        match self {
            Time::Moved(_) => (60, 600),
            Time::Real => (3, 60),
        }
    }

    /// Lets `fraction` of the start window pass (more than 1.0: past it).
    async fn pass(&self, fraction: f64) {
        let window = self.window_and_lease().0 as f64;
        match self {
            Time::Moved(t) => t.advance((window * fraction).ceil() as i64),
            Time::Real => tokio::time::sleep(std::time::Duration::from_secs_f64(window * fraction)).await,
        }
    }
}

fn props(url: &str, time: &Time) -> Value {
    let (window, lease) = time.window_and_lease();
    json!({"kv_url": url, "signature_scheme": "none", "start_within_seconds": window.to_string(),
           "lease_seconds": lease.to_string()})
}

async fn deliver(p: &Plugin, props: &Value, id: &str) -> (Value, Value) {
    let raw = raw_request(&[("X-Github-Delivery", id)], r#"{"action":"opened"}"#);
    let c = chunk(&p.request(dispatch_data(props.clone(), &raw)).await).clone();
    let body = http(&c).2;
    (c, body)
}

/// Dispatched, no run within the window: the next delivery takes it over as attempt 2 and
/// says why; attempt 1's late invoke is cancelled, attempt 2's takes the claim and holds the
/// run's lease past the window. What the tools show at each step.
/// What the KV container's operator sees of delivery `id`: its stuck reason on the status
/// page's lists and the `kv_never_started_records` gauge, once the census shows `wanted`
/// (the census runs on its own thread; only a hang fails).
async fn operator_view(kv: &str, id: &str, wanted: u64) {
    let http = reqwest::Client::new();
    let key = format!("evt_{id}");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let lists = http.get(format!("{kv}/ui/api/lists")).send().await.unwrap().bytes().await.unwrap();
        let lists: Value = serde_json::from_slice(&lists).unwrap();
        let listed =
            lists["stuck"].as_array().unwrap().iter().any(|b| b["key"] == key && b["stuck"] == "never_started");
        let metrics = http.get(format!("{kv}/metrics")).send().await.unwrap().text().await.unwrap();
        let gauge = metrics.lines().find_map(|l| l.strip_prefix("kv_never_started_records ")).map(str::trim);
        if (listed, gauge) == (wanted > 0, Some(wanted.to_string().as_str())) {
            return;
        }
        assert!(std::time::Instant::now() < until, "never started {wanted}: listed {listed}, gauge {gauge:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn reservation(url: &str, time: &Time, kv: Option<&str>) {
    let p = Plugin::spawn(&ENV).await;
    let props = props(url, time);
    let creds = json!({"kv_url": url});
    let id = format!("rsv-{:x}", rand::random::<u64>());
    let (first, body) = deliver(&p, &props, &id).await;
    assert_eq!((body["outcome"].as_str(), body["retry"].as_bool()), (Some("accepted"), Some(false)), "{body}");
    assert_eq!(first["events"], json!(["webhook_received"]));

    // A store clock that jumps is learnt from the next answer (a read: it carries no deadline
    // the jump could make look late), as the plugin learns any store's clock.
    time.pass(0.3).await;
    let st = p.invoke("event_status", &creds, json!({"event_id": id})).await;
    assert_eq!((&st.json()["waiting_for_run"], &st.json()["lease_expired"]), (&json!(true), &json!(false)));
    let (again, body) = deliver(&p, &props, &id).await;
    assert_eq!((again["events"].clone(), body["outcome"].clone()), (json!([]), json!("in_progress")), "{body}");

    // The window passes with no run (the app's workflow was not published, Celery was down…).
    time.pass(1.0).await;
    let st = p.invoke("event_status", &creds, json!({"event_id": id})).await;
    assert_eq!((&st.json()["waiting_for_run"], &st.json()["lease_expired"]), (&json!(true), &json!(true)));
    assert!(st.text().contains("no workflow run started it within its start window"), "{st:?}");
    if let Some(kv) = kv {
        operator_view(kv, &id, 1).await;
    }
    let (second, body) = deliver(&p, &props, &id).await;
    assert_eq!(second["events"], json!(["webhook_received"]), "{body}");
    assert_eq!(
        (body["outcome"].as_str(), body["attempt"].as_u64(), body["retry"].as_bool(), body["reason"].as_str()),
        (Some("accepted"), Some(2), Some(true), Some("never_started"))
    );
    if let Some(kv) = kv {
        operator_view(kv, &id, 0).await;
    }

    // Attempt 1's run, started late, is cancelled; attempt 2's takes the claim.
    let late = p.request(invoke_data(props.clone(), &first["payload"])).await;
    assert_eq!((&late.chunks[0]["cancelled"], &late.chunks[0]["variables"]), (&json!(true), &json!({})), "{late:?}");
    let run = p.request(invoke_data(props.clone(), &second["payload"])).await;
    assert_eq!((&run.chunks[0]["cancelled"], &run.chunks[0]["variables"]["attempt"]), (&json!(false), &json!(2)));
    let st = p.invoke("event_status", &creds, json!({"event_id": id})).await;
    assert_eq!((&st.json()["waiting_for_run"], st.json()["started_at"].is_string()), (&json!(false), true), "{st:?}");
    assert_eq!(run.chunks[0]["variables"]["lease_until"], st.json()["lease_until"]);

    // Past the window, inside the run's lease: the run is working, a redelivery starts nothing.
    time.pass(1.5).await;
    p.invoke("event_status", &creds, json!({"event_id": id})).await;
    let (third, body) = deliver(&p, &props, &id).await;
    assert_eq!((third["events"].clone(), body["outcome"].clone()), (json!([]), json!("in_progress")), "{body}");
    // A second subscribed workflow's run of the same attempt starts too (Dify's fan-out).
    let fan = p.request(invoke_data(props.clone(), &second["payload"])).await;
    assert_eq!(fan.chunks[0]["cancelled"], false, "{fan:?}");
    let done = p.invoke("event_complete", &creds, json!({"event_id": id, "attempt": 2})).await;
    assert_eq!(done.outcome(), "completed", "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kv_container() {
    let time = StoreTime::new();
    let dir = tempfile::tempdir().unwrap();
    let env = time.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let kv = KvServer::start_with_env(dir.path(), &["--durability", "none", "--census-interval-ms", "1"], &env);
    reservation(&kv.url(), &Time::Moved(time), Some(&kv.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis() {
    let r = RedisServer::start(&[]);
    reservation(&r.url(), &Time::Real, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres() {
    let time = StoreTime::new();
    let pg = PgServer::start_with_env(&[], time.env());
    let url = pg.app("app", "events");
    reservation(&url, &Time::Moved(time), None).await;
}
