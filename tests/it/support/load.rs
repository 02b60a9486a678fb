//! Sustained ingest load from several plugin processes, recording every call's outcome and
//! time span, and the checks every crash test makes on such a record.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::plugin::Plugin;

/// One finished call.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub id: String,
    pub started: Instant,
    pub ended: Instant,
    /// `accepted`, `duplicate` or `error:<type>`.
    pub outcome: String,
    pub attempt: Option<u64>,
}

/// The ingest parameters used for `id` (one fixed content per id: redeliveries never conflict).
pub(crate) fn event(id: &str) -> Value {
    json!({"event_id": id, "event_type": "created", "payload": format!("{{\"id\":\"{id}\"}}")})
}

/// How long [`Load::wait_for`] waits without its count growing before it calls the load stuck:
/// a hang, not a slow machine.
const STALL: Duration = Duration::from_secs(120);

/// Workers that keep calling `event_ingest` until stopped: mostly new ids, and about one call
/// in five a redelivery of an id issued before.
pub(crate) struct Load {
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    issued: Arc<Mutex<Vec<String>>>,
    /// Every call finished so far, in the order they finished.
    finished: Arc<Mutex<Vec<Call>>>,
}

impl Load {
    pub(crate) fn start(plugins: &[Arc<Plugin>], creds: &Value, sessions_per_plugin: usize, tag: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicU64::new(0));
        let issued: Arc<Mutex<Vec<String>>> = Arc::default();
        let finished: Arc<Mutex<Vec<Call>>> = Arc::default();
        let mut workers = vec![];
        for p in plugins {
            for _ in 0..sessions_per_plugin {
                let (p, creds, stop, next, issued, calls) =
                    (p.clone(), creds.clone(), stop.clone(), next.clone(), issued.clone(), finished.clone());
                let tag = tag.to_owned();
                workers.push(tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let id = {
                            let mut ids = issued.lock().unwrap();
                            if !ids.is_empty() && rand::random::<u8>() < 51 {
                                ids[rand::random::<usize>() % ids.len()].clone()
                            } else {
                                let id = format!("{tag}-{}", next.fetch_add(1, Ordering::SeqCst));
                                ids.push(id.clone());
                                id
                            }
                        };
                        let started = Instant::now();
                        let r = p.invoke("event_ingest", &creds, event(&id)).await;
                        let attempt = r.error.is_none().then(|| r.json()["attempt"].as_u64()).flatten();
                        let failed = r.error.is_some();
                        let call = Call { id, started, ended: Instant::now(), outcome: r.outcome(), attempt };
                        calls.lock().unwrap().push(call);
                        if failed {
                            // A sender backs off after an error instead of spinning.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }));
            }
        }
        Load { stop, workers, issued, finished }
    }

    /// Waits until `count` over the calls finished so far reaches `target`. The phases of a
    /// crash test are events (so many claims accepted, so many calls answered while the store
    /// was down), not stretches of time: a loaded machine only makes them later. Fails when
    /// the count has not grown for [`STALL`].
    pub(crate) async fn wait_for(&self, what: &str, target: usize, count: impl Fn(&[Call]) -> usize) {
        let (mut last, mut grew) = (0, Instant::now());
        loop {
            let n = count(&self.finished.lock().unwrap());
            if n >= target {
                return;
            }
            if n > last {
                (last, grew) = (n, Instant::now());
            }
            assert!(grew.elapsed() < STALL, "{what}: stuck at {n} of {target} for {STALL:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the workers and returns every call they made, and every id they issued.
    pub(crate) async fn stop(self) -> (Vec<Call>, Vec<String>) {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.workers {
            w.await.unwrap();
        }
        let calls = std::mem::take(&mut *self.finished.lock().unwrap());
        let ids = self.issued.lock().unwrap().clone();
        (calls, ids)
    }
}

/// What a crash test learns from its calls.
#[derive(Debug, Default)]
pub(crate) struct Summary {
    /// Ids answered `accepted` (each exactly once: checked).
    pub accepted: Vec<String>,
    /// Ids that only ever got `upstream_error`: whether their claim landed is unknown.
    pub unresolved: Vec<String>,
    pub outage_calls: usize,
}

/// The properties of every crash test: only accepted / duplicate / upstream_error answers,
/// no id accepted twice, and every call made entirely while the store was down (`outage`)
/// answered `upstream_error`.
pub(crate) fn check_calls(calls: &[Call], outage: (Instant, Instant)) -> Summary {
    let mut per_id: HashMap<&str, Vec<&Call>> = HashMap::new();
    let mut s = Summary::default();
    for c in calls {
        assert!(
            ["accepted", "duplicate", "error:upstream_error"].contains(&c.outcome.as_str()),
            "unexpected outcome: {c:?}"
        );
        if c.started > outage.0 && c.ended < outage.1 {
            assert_eq!(c.outcome, "error:upstream_error", "a call made while the store was down: {c:?}");
            s.outage_calls += 1;
        }
        per_id.entry(&c.id).or_default().push(c);
    }
    for (id, cs) in per_id {
        let accepted = cs.iter().filter(|c| c.outcome == "accepted").count();
        assert!(accepted <= 1, "{id} was reported accepted {accepted} times: {cs:?}");
        if accepted == 1 {
            s.accepted.push(id.to_owned());
        } else if cs.iter().all(|c| c.outcome == "error:upstream_error") {
            s.unresolved.push(id.to_owned());
        }
    }
    s
}
