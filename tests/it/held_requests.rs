//! Requests held in the network past the caller's deadline, through the real plugin and real
//! stores: a re-claim (compare-and-swap) held on its connection, a claim whose connection is
//! cut so the client reconnects while the held bytes still travel, and Dify's node retry.
//! Every write carries a deadline in the store's clock, so a held write that arrives late is
//! refused: the call's `upstream_error` is final, and the next delivery is accepted at once.

use std::time::Duration;

use serde_json::json;

use crate::chaos_slow_store::{fresh_id, plugin, Backend, Store};
use crate::exactly_once::held_claim_stays;
use crate::support::plugin::{creds, Plugin};
use crate::support::proxy::Fault;

/// The plugin's store timeout here; every hold outlasts it.
const TIMEOUT_MS: &str = "1000";
const HOLD: Duration = Duration::from_millis(1500);
/// How long a held request may take to reach the store: a bound that only catches a hang.
const HANG: Duration = Duration::from_secs(120);

fn held(trigger: &'static [u8], cut_after: Option<Duration>) -> Fault {
    Fault::HoldRequest { trigger, times: 1, hold: HOLD, cut_after, queue: true }
}

/// The call through the hold answers `upstream_error`, saying nothing of it can land (or,
/// when a write beat its deadline, `accepted`, with the store holding that claim).
fn final_failure_or_own_claim(first: &crate::support::plugin::Reply) -> bool {
    match first.outcome().as_str() {
        "error:upstream_error" => {
            assert!(first.message().contains("none can land"), "{first:?}");
            false
        }
        "accepted" => true,
        _ => panic!("{first:?}"),
    }
}

/// A failed event's re-claim (`PUT If-Match` / the swap script) is held past the deadline;
/// the re-sent re-claims queue behind it. Nothing lands; right after the hold, the next
/// delivery re-claims the event: attempt 2, and the store holds exactly that claim.
async fn held_reclaim_never_lands(backend: Backend) {
    let store = Store::start(backend).await;
    let (direct, dc, id) = (plugin().await, creds(&store.direct_url()), fresh_id("cas"));
    let ev = json!({"event_id": id, "event_type": "created"});
    assert_eq!(direct.invoke("event_ingest", &dc, ev.clone()).await.outcome(), "accepted");
    let fail = json!({"event_id": id, "status": "failed", "attempt": 1});
    assert_eq!(direct.invoke("event_complete", &dc, fail).await.outcome(), "failed");

    let (proxy, url) = store.proxy(backend, held(backend.wire().swap, None));
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", TIMEOUT_MS)]).await;
    let c = creds(&url);
    let first = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!(proxy.fired(), 1, "the re-claim was held");
    let landed = final_failure_or_own_claim(&first);
    proxy.until_released(1, HANG).await;
    let next = p.invoke("event_ingest", &c, ev).await;
    let expected = if landed { "duplicate" } else { "accepted" };
    assert_eq!((next.outcome().as_str(), next.json()["attempt"].as_u64()), (expected, Some(2)), "{next:?}");
    held_claim_stays(&p, &store, &id, if landed { &first } else { &next }).await;
}

/// The claim is held and its client connection cut after 300 ms (a load balancer giving up):
/// the plugin reconnects and sends its read-back and re-sent claims on a new connection,
/// ahead of the held bytes. The held claim still reaches the store, after its deadline.
async fn claim_held_across_a_reconnect_never_lands(backend: Backend) {
    let store = Store::start(backend).await;
    let (proxy, url) = store.proxy(backend, held(backend.wire().claim, Some(Duration::from_millis(300))));
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", TIMEOUT_MS)]).await;
    let c = creds(&url);
    let id = fresh_id("reconnect");
    let ev = json!({"event_id": id, "event_type": "created"});
    let first = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!(proxy.fired(), 1, "the claim was held");
    assert!(proxy.connections() >= 2, "the plugin reconnected");
    let landed = final_failure_or_own_claim(&first);
    proxy.until_released(1, HANG).await;
    let next = p.invoke("event_ingest", &c, ev).await;
    let expected = if landed { "duplicate" } else { "accepted" };
    assert_eq!((next.outcome().as_str(), next.json()["attempt"].as_u64()), (expected, Some(1)), "{next:?}");
    held_claim_stays(&p, &store, &id, if landed { &first } else { &next }).await;
}

/// Dify's tool node with "Retry on failure": the first call times out on a held claim and
/// answers `upstream_error`; the node retries after the hold was released, with the same
/// parameters. The retry is accepted (attempt 1), with `run_id` = the workflow run id and
/// without one alike: nothing of the first call landed.
async fn node_retry_after_a_held_claim_is_accepted(backend: Backend, run_id: Option<&str>) {
    let store = Store::start(backend).await;
    let (proxy, url) = store.proxy(backend, held(backend.wire().claim, None));
    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", TIMEOUT_MS)]).await;
    let c = creds(&url);
    let id = fresh_id("node-retry");
    let ev = json!({"event_id": id, "event_type": "created", "payload": "{\"order\":7}", "run_id": run_id});
    let first = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!(first.outcome(), "error:upstream_error", "{first:?}");
    proxy.until_released(1, HANG).await;
    let retry = p.invoke("event_ingest", &c, ev.clone()).await;
    assert_eq!((retry.outcome().as_str(), retry.json()["attempt"].as_u64()), ("accepted", Some(1)), "{retry:?}");
    held_claim_stays(&p, &store, &id, &retry).await;
    // A further retry of the same run (its answer lost, say) is that run's again; any other
    // delivery is a duplicate.
    let again = p.invoke("event_ingest", &c, ev.clone()).await;
    match run_id {
        Some(_) => assert_eq!(
            (again.outcome().as_str(), again.json()["attempt"].as_u64(), again.json()["retry_of_same_run"].as_bool()),
            ("accepted", Some(1), Some(true)),
            "{again:?}"
        ),
        None => assert_eq!(again.outcome(), "duplicate", "{again:?}"),
    }
    let other = json!({"event_id": id, "event_type": "created", "payload": "{\"order\":7}", "run_id": "another-run"});
    assert_eq!(p.invoke("event_ingest", &c, other).await.outcome(), "duplicate");
}

mod kv {
    use super::Backend::Kv;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn held_reclaim_never_lands() {
        super::held_reclaim_never_lands(Kv).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn claim_held_across_a_reconnect_never_lands() {
        super::claim_held_across_a_reconnect_never_lands(Kv).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn node_retry_with_a_run_id_after_a_held_claim_is_accepted() {
        super::node_retry_after_a_held_claim_is_accepted(Kv, Some("4c1f0a7e-run")).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn node_retry_without_a_run_id_after_a_held_claim_is_accepted() {
        super::node_retry_after_a_held_claim_is_accepted(Kv, None).await;
    }
}

mod redis {
    use super::Backend::Redis;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn held_reclaim_never_lands() {
        super::held_reclaim_never_lands(Redis).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn claim_held_across_a_reconnect_never_lands() {
        super::claim_held_across_a_reconnect_never_lands(Redis).await;
    }
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn node_retry_with_a_run_id_after_a_held_claim_is_accepted() {
        super::node_retry_after_a_held_claim_is_accepted(Redis, Some("4c1f0a7e-run")).await;
    }
}
