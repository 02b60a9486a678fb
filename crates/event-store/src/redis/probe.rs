//! Credential validation: which topology this is, whether every master can do what the
//! claims need, and what each master's persistence settings guarantee.

use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{Cmd, RedisResult, Value};

use super::guard::refused_node_text;
use super::link::Link;
use crate::hosts::AllowedHosts;

/// What validation found: a one-line description and what to warn about.
pub(crate) struct Found {
    pub(crate) summary: String,
    pub(crate) warnings: Vec<String>,
}

/// `cmd` on every master → (address, reply); an error reply stays in place.
async fn per_master(link: &mut Link, cmd: Cmd, here: &str) -> RedisResult<Vec<(String, Value)>> {
    match link {
        Link::Node(c) => {
            let v = match cmd.query_async::<Value>(c).await {
                Ok(v) => v,
                Err(e) if e.code().is_some() => Value::Nil,
                Err(e) => return Err(e),
            };
            Ok(vec![(here.to_owned(), v)])
        }
        Link::Cluster(c) => {
            let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, Some(ResponsePolicy::Special)));
            match c.route_command(cmd, routing).await? {
                Value::Map(m) => Ok(m
                    .into_iter()
                    .map(|(k, v)| (redis::from_redis_value::<String>(k).unwrap_or_default(), v))
                    .collect()),
                other => Ok(vec![(here.to_owned(), other)]),
            }
        }
    }
}

/// Every (host, port) in a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, …], …], …]`.
/// An empty host means "the node that answered", which was dialled already.
fn slot_nodes(slots: &[Value]) -> Vec<(String, u16)> {
    let mut nodes = vec![];
    for range in slots {
        let Value::Array(parts) = range else { continue };
        for node in parts.iter().skip(2) {
            let Value::Array(n) = node else { continue };
            let host = n.first().map(text).unwrap_or_default();
            let port = n.get(1).and_then(|p| redis::from_redis_value_ref::<u16>(p).ok());
            if let (false, Some(port)) = (host.is_empty() || host == "?", port) {
                nodes.push((host, port));
            }
        }
    }
    nodes.sort();
    nodes.dedup();
    nodes
}

fn text(v: &Value) -> String {
    redis::from_redis_value_ref::<String>(v).unwrap_or_default()
}

fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim)
}

/// `CONFIG GET` pairs as (name, value); empty when CONFIG is disabled.
fn config(v: &Value) -> Vec<(String, String)> {
    let flat: Vec<String> = match v {
        Value::Map(m) => m.iter().flat_map(|(k, v)| [text(k), text(v)]).collect(),
        other => redis::from_redis_value_ref(other).unwrap_or_default(),
    };
    flat.chunks(2).filter_map(|p| Some((p.first()?.clone(), p.get(1)?.clone()))).collect()
}

/// What a master's persistence settings promise about acknowledged claims after a crash.
pub(crate) fn persistence(appendonly: &str, appendfsync: &str, save: &str) -> (String, bool) {
    match (appendonly, appendfsync) {
        ("yes", "always") => ("AOF with fsync on every write: an acknowledged claim survives a crash".into(), false),
        ("yes", "everysec") => {
            ("AOF fsync'd every second: a crash of the machine can lose about the last second of claims".into(), false)
        }
        ("yes", _) => ("AOF without fsync: a machine crash can lose the claims of the last ~30 s".into(), true),
        _ if !save.trim().is_empty() => (
            format!(
                "RDB snapshots only (save {save:?}): a crash forgets every claim since the last snapshot, and their \
                 redeliveries are accepted again; set appendonly yes"
            ),
            true,
        ),
        _ => ("no persistence: a restart forgets every claim; set appendonly yes".into(), true),
    }
}

/// Inspects every master. `Err(text)` = this deployment cannot work (refused).
pub(crate) async fn inspect(
    link: &mut Link,
    kind: &str,
    here: &str,
    min_replicas: u32,
    allowed: &AllowedHosts,
) -> RedisResult<Result<Found, String>> {
    let mut warnings = vec![];
    if let Link::Cluster(c) = link {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query_async(c).await?;
        let assigned = field(&info, "cluster_slots_assigned").unwrap_or("0");
        if field(&info, "cluster_state") != Some("ok") || assigned != "16384" {
            return Ok(Err(format!(
                "the Redis Cluster is not usable: state {}, {assigned} of 16384 slots covered; events on uncovered \
                 slots could not be recorded",
                field(&info, "cluster_state").unwrap_or("unknown")
            )));
        }
        // Every node the slot map names may be dialled (a redirect, a failover): each must
        // pass the allow-list. The client refuses to dial one that does not; this says so
        // up front, naming it.
        let slots: Vec<Value> = redis::cmd("CLUSTER").arg("SLOTS").query_async(c).await?;
        for (host, port) in slot_nodes(&slots) {
            if !allowed.permits(&host, port) {
                return Ok(Err(refused_node_text(&host, port, "CLUSTER SLOTS", allowed)));
            }
        }
    }
    let servers = per_master(link, redis::cmd("INFO").arg("server").to_owned(), here).await?;
    let mut versions = vec![];
    for (at, v) in &servers {
        let info = text(v);
        let version = field(&info, "redis_version").unwrap_or("0").to_owned();
        if version.split('.').next().and_then(|m| m.parse::<u32>().ok()).unwrap_or(0) < 7 {
            return Ok(Err(format!(
                "Redis {version} at {at} cannot create-or-read in one atomic step (SET … NX GET needs Redis ≥ 7.0)"
            )));
        }
        versions.push(version);
    }
    versions.sort();
    versions.dedup();
    let masters = servers.len();
    if min_replicas > 0 {
        for (at, v) in per_master(link, redis::cmd("INFO").arg("replication").to_owned(), here).await? {
            let replicas: u32 = field(&text(&v), "connected_slaves").and_then(|n| n.parse().ok()).unwrap_or(0);
            if replicas < min_replicas {
                return Ok(Err(format!(
                    "min_replicas is {min_replicas} but the master at {at} has {replicas} connected replica(s): \
                     every claim would be refused"
                )));
            }
        }
    }
    let mut guarantees: Vec<String> = vec![];
    let cmd = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendonly")
        .arg("appendfsync")
        .arg("save")
        .arg("maxmemory-policy")
        .to_owned();
    for (at, v) in per_master(link, cmd, here).await? {
        let cfg = config(&v);
        let get = |n: &str| cfg.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        let Some(appendonly) = get("appendonly") else {
            warnings.push(format!(
                "could not read the settings of {at} (CONFIG GET is disabled): make sure \
                                   appendonly is yes and maxmemory-policy is noeviction"
            ));
            continue;
        };
        let (said, weak) = persistence(appendonly, get("appendfsync").unwrap_or(""), get("save").unwrap_or(""));
        if weak {
            warnings.push(format!("{at}: {said}"));
        } else {
            tracing::info!("redis master {at}: {said}");
        }
        guarantees.push(said);
        match get("maxmemory-policy") {
            Some(p) if p != "noeviction" => warnings.push(format!(
                "{at}: maxmemory-policy is {p}: Redis may evict event records (they all carry a TTL) under memory \
                 pressure, and an evicted id would be accepted again; use noeviction"
            )),
            _ => {}
        }
    }
    guarantees.sort();
    guarantees.dedup();
    let topology = match link {
        Link::Cluster(_) => format!("Redis Cluster with {masters} masters"),
        Link::Node(_) => kind.to_owned(),
    };
    let summary = format!(
        "{topology}, Redis {}; persistence: {}",
        versions.join("/"),
        if guarantees.is_empty() { "unknown".into() } else { guarantees.join(" | ") }
    );
    Ok(Ok(Found { summary, warnings }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_map_nodes_are_every_master_and_replica_once() {
        let node = |h: &str, p: i64| Value::Array(vec![Value::BulkString(h.into()), Value::Int(p), Value::Nil]);
        let range =
            |a: i64, b: i64, nodes: Vec<Value>| Value::Array([vec![Value::Int(a), Value::Int(b)], nodes].concat());
        let slots = [
            range(0, 5460, vec![node("10.0.0.1", 7000), node("10.0.0.2", 7001)]),
            range(5461, 10922, vec![node("", 7002), node("::1", 7003)]),
            range(10923, 16383, vec![node("10.0.0.1", 7000)]),
        ];
        let found = slot_nodes(&slots);
        let want = [("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7003)];
        assert_eq!(found, want.map(|(h, p)| (h.to_owned(), p)).to_vec());
    }

    #[test]
    fn persistence_is_described() {
        assert!(!persistence("yes", "always", "").1);
        assert!(!persistence("yes", "everysec", "3600 1").1);
        assert!(persistence("no", "everysec", "3600 1 300 100").1);
        assert!(persistence("no", "everysec", "").0.contains("no persistence"));
    }
}
