//! `rediss+cluster://` and `rediss+sentinel://` against real TLS-only deployments (cluster
//! bus, replication and Sentinels on TLS, passwords on): the topology named, claims, a
//! wrong CA refused, which password is wrong, and the store-host allow-list applied to the
//! nodes Redis names after connecting.

use serde_json::{json, Value};

use crate::support::plugin::{creds, Plugin, Reply};
use crate::support::redis_ha::{RedisCluster, RedisSentinel};
use crate::support::redis_tls::Certs;

/// Validation succeeds and the plugin's log names `topology`; then a claim and its duplicate.
async fn validates_and_claims(url: &str, topology: &str) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("plugin.log");
    let p = Plugin::spawn_logged(&[], &log).await;
    let ok = p.validate(&creds(url)).await;
    assert_eq!(ok.chunks, vec![json!({"result": true})], "{ok:?}");
    let events: Vec<String> = p.logs.lock().unwrap().iter().map(|l| log_message(l)).collect();
    let text = format!("{}\n{}", std::fs::read_to_string(&log).unwrap(), events.join("\n"));
    assert!(text.contains(topology), "validation does not name {topology:?}: {text}");
    for i in 0..6 {
        let ev = json!({"event_id": format!("TLS-{i}"), "event_type": "created"});
        assert_eq!(p.invoke("event_ingest", &creds(url), ev.clone()).await.outcome(), "accepted");
        assert_eq!(p.invoke("event_ingest", &creds(url), ev).await.outcome(), "duplicate");
    }
}

/// Validation is refused and ingest answers upstream_error, both with `words` in the message.
async fn refused(p: &Plugin, url: &str, words: &[&str]) -> Reply {
    let v = p.validate(&creds(url)).await;
    assert_eq!(v.error_type(), Some("ToolProviderCredentialValidationError"), "{v:?}");
    let r = p.invoke("event_ingest", &creds(url), json!({"event_id": "REFUSED", "event_type": "created"})).await;
    assert_eq!(r.error_type(), Some("upstream_error"), "{r:?}");
    for w in words {
        assert!(v.message().contains(w), "validation message lacks {w:?}: {}", v.message());
        assert!(r.message().contains(w), "ingest message lacks {w:?}: {}", r.message());
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rediss_cluster_passwords_and_discovered_nodes() {
    let certs = Certs::make();
    let cluster = RedisCluster::start_as(certs.access(Some("clusterpw")));
    let seeds = cluster.seeds();
    let with = |auth: &str, ca: &std::path::Path| format!("rediss+cluster://{auth}{seeds}?tls_ca={}", ca.display());
    let url = with(":clusterpw@", &certs.ca());
    validates_and_claims(&url, "Redis Cluster with 3 masters").await;

    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "3000")]).await;
    // A CA that signed no node's certificate.
    let r = refused(&p, &with(":clusterpw@", &certs.other_ca()), &[]).await;
    assert!(r.message().to_lowercase().contains("cert"), "{}", r.message());
    refused(&p, &with(":wrong@", &certs.ca()), &["Redis Cluster node at 127.0.0.1:", "this one is wrong"]).await;
    refused(&p, &with("", &certs.ca()), &["requires a password", "redis+cluster://:password@"]).await;

    // Only the first seed is allowed: the nodes CLUSTER SLOTS names are refused by name.
    let first = &seeds[..seeds.find(',').unwrap()];
    let one = Plugin::spawn(&[("STATEFUL_TOOL_STORE_HOSTS", first), ("STATEFUL_TOOL_STORE_TIMEOUT_MS", "3000")]).await;
    let only_first = format!("rediss+cluster://:clusterpw@{first}?tls_ca={}", certs.ca().display());
    let v = one.validate(&creds(&only_first)).await;
    assert_eq!(v.error_type(), Some("ToolProviderCredentialValidationError"), "{v:?}");
    assert!(v.message().contains("CLUSTER SLOTS names the Redis node 127.0.0.1:"), "{}", v.message());
    assert!(v.message().contains("STATEFUL_TOOL_STORE_HOSTS"), "{}", v.message());
    // Ingest never reaches a master outside the list: the keys it owns cannot be claimed.
    let mut answers = vec![];
    for i in 0..12 {
        let ev = json!({"event_id": format!("ALLOW-{i}"), "event_type": "created"});
        answers.push(one.invoke("event_ingest", &creds(&only_first), ev).await);
    }
    let refused_here = answers.iter().filter(|a| a.error_type() == Some("upstream_error")).count();
    assert!(refused_here > 0, "every key was claimed although two masters are not allowed: {answers:?}");
    for a in &answers {
        let named =
            a.message().contains("the Redis node 127.0.0.1:") && a.message().contains("is not in the store hosts");
        assert!(a.outcome() == "accepted" || named, "{a:?}");
    }
    // The host alone allows every port: the whole cluster works.
    let all = Plugin::spawn(&[("STATEFUL_TOOL_STORE_HOSTS", "127.0.0.1")]).await;
    let ok = all.validate(&creds(&only_first)).await;
    assert_eq!(ok.chunks, vec![json!({"result": true})], "{ok:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rediss_sentinel_passwords_and_the_reported_master() {
    let certs = Certs::make();
    let s = RedisSentinel::start_as(certs.access(Some("masterpw")), Some("sentinelpw"));
    let seeds = s.seeds();
    let with = |master: &str, sentinel: &str, ca: &std::path::Path| {
        format!("rediss+sentinel://{master}{seeds}/mymaster?tls_ca={}{sentinel}", ca.display())
    };
    let url = with(":masterpw@", "&sentinel_password=sentinelpw", &certs.ca());
    validates_and_claims(&url, &format!("Sentinel master \"mymaster\" at 127.0.0.1:{}", s.master.port)).await;

    let p = Plugin::spawn(&[("STATEFUL_TOOL_STORE_TIMEOUT_MS", "3000")]).await;
    let r = refused(&p, &with(":masterpw@", "&sentinel_password=sentinelpw", &certs.other_ca()), &[]).await;
    assert!(r.message().to_lowercase().contains("cert"), "{}", r.message());
    // The Sentinels' own password and the master's are told apart.
    let sentinel = "the Sentinel at 127.0.0.1:";
    refused(&p, &with(":masterpw@", "&sentinel_password=wrong", &certs.ca()), &[sentinel, "this one is wrong"]).await;
    refused(&p, &with(":masterpw@", "", &certs.ca()), &[sentinel, "requires a password", "?sentinel_password="]).await;
    let master = format!("the master \"mymaster\" at 127.0.0.1:{}", s.master.port);
    refused(&p, &with(":wrong@", "&sentinel_password=sentinelpw", &certs.ca()), &[&master, "this one is wrong"]).await;
    refused(&p, &with("", "&sentinel_password=sentinelpw", &certs.ca()), &[&master, "requires a password"]).await;

    // The Sentinels are allowed, the master they report is not: refused by name, never dialled.
    let env = [("STATEFUL_TOOL_STORE_HOSTS", seeds.as_str()), ("STATEFUL_TOOL_STORE_TIMEOUT_MS", "3000")];
    let fenced = Plugin::spawn(&env).await;
    let named = format!("the Sentinel at 127.0.0.1:{}", &seeds[10..seeds.find(',').unwrap()]);
    let not_allowed = format!("names the Redis node 127.0.0.1:{}, which is not in the store hosts", s.master.port);
    refused(&fenced, &url, &[&named, &not_allowed, "STATEFUL_TOOL_STORE_HOSTS"]).await;
}

/// The message of a protocol `log` event line.
fn log_message(line: &str) -> String {
    let v: Value = serde_json::from_str(line).unwrap_or_default();
    v["data"]["message"].as_str().unwrap_or(line).to_owned()
}
