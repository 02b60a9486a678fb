//! The scale section's load: records of the plugin's shape written over real sockets (distinct
//! ids, durable writes, the 7-day TTL), a share of them deleted, and new claims at a fixed rate.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use event_store::key::storage_key;
use event_store::record::{fingerprint, format_time, new_claim_id, Record, Status};
use serde::Serialize;
use tokio::task::JoinSet;

use super::measure::micros_since;
use super::wire::Http;
use super::workload::{payload, LEASE_SECONDS, TTL_MS};

/// Connections the fill and the deletes keep busy: enough for the writer's group commit to
/// batch, as many plugin sessions would.
pub(crate) const FILL_CONNECTIONS: usize = 64;

/// The event id of record `i`: UUID-like and spread over the key space, as delivery ids
/// (GitHub's `X-GitHub-Delivery`, Stripe's `evt_…`) arrive, not in key order.
pub(crate) fn event_id(prefix: &str, i: u64) -> String {
    let h = mix(i);
    format!("{prefix}{:08x}-{:04x}-4{:03x}-{i:012x}", h >> 32, (h >> 16) & 0xffff, h & 0xfff)
}

/// splitmix64: a fixed permutation of the ids, so runs are repeatable.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The record the plugin keeps for event `i` (a webhook payload, its fingerprint, a claim id):
/// 97 % completed, 2 % failed, 1 % still processing under a lease, as a busy store holds them.
pub(crate) fn record(id: &str, i: u64, now_ms: i64) -> Vec<u8> {
    let body = payload(i as usize);
    let status = match i % 100 {
        0 => Status::Processing,
        1 | 2 => Status::Failed,
        _ => Status::Completed,
    };
    let done = status != Status::Processing;
    Record {
        v: 1,
        event_id: id.to_owned(),
        event_type: "order.updated".into(),
        fingerprint: fingerprint("order.updated", Some(&body)),
        payload: Some(body),
        status,
        received_at: format_time(now_ms),
        updated_at: format_time(now_ms),
        attempt: 1,
        lease_until_ms: (!done).then_some(now_ms + LEASE_SECONDS * 1000),
        completed_at: done.then(|| format_time(now_ms)),
        result: match status {
            Status::Failed => Some("upstream answered 502 after 3 tries".into()),
            Status::Completed => Some("{\"ok\":true}".into()),
            Status::Processing => None,
        },
        claim_id: new_claim_id(),
        run_id: None,
        door: None,
    }
    .to_bytes()
}

/// What a fill wrote: records and the bytes of their keys and values.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Filled {
    pub records: u64,
    pub bytes: u64,
    pub secs: f64,
}

/// Claims records `from..to` (`If-None-Match: *`, each must be created) over `conns` connections.
pub(crate) async fn fill(addr: SocketAddr, prefix: &str, from: u64, to: u64, conns: usize) -> anyhow::Result<Filled> {
    let next = Arc::new(AtomicU64::new(from));
    let bytes = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let now_ms = wall_ms();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..conns {
        let mut http = Http::connect(addr).await.with_context(|| format!("connecting to {addr}"))?;
        let (next, bytes, prefix) = (next.clone(), bytes.clone(), prefix.to_owned());
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= to {
                    return Ok::<_, anyhow::Error>(());
                }
                let id = event_id(&prefix, i);
                let (key, value) = (storage_key(None, &id), record(&id, i, now_ms));
                let status = http.put_if_absent(&key, &value, TTL_MS).await?;
                ensure!(status == 201, "claiming {key} answered {status}");
                bytes.fetch_add((key.len() + value.len()) as u64, Ordering::Relaxed);
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.context("a fill worker panicked")??;
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(Filled { records: to.saturating_sub(from), bytes: bytes.load(Ordering::Relaxed), secs })
}

/// Deletes the records `i` in `from..to` with `i % 10 == 3` (a tenth); returns how many.
pub(crate) async fn delete_tenth(
    addr: SocketAddr,
    prefix: &str,
    from: u64,
    to: u64,
    conns: usize,
) -> anyhow::Result<u64> {
    let next = Arc::new(AtomicU64::new(from));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..conns {
        let mut http = Http::connect(addr).await?;
        let (next, prefix) = (next.clone(), prefix.to_owned());
        workers.spawn(async move {
            let mut deleted = 0u64;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= to {
                    return Ok::<_, anyhow::Error>(deleted);
                }
                if i % 10 != 3 {
                    continue;
                }
                let key = storage_key(None, &event_id(&prefix, i));
                let status = http.delete(&key).await?;
                ensure!(status == 204, "deleting {key} answered {status}");
                deleted += 1;
            }
        });
    }
    let mut deleted = 0;
    while let Some(done) = workers.join_next().await {
        deleted += done.context("a delete worker panicked")??;
    }
    Ok(deleted)
}

/// New claims per second while latency is measured (the load).
pub(crate) const CLAIM_RATE: f64 = 500.0;
/// Connections the paced claims are spread over, so a slow answer does not delay the next send.
const CLAIM_CONNECTIONS: u64 = 32;

/// New-claim latency at [`CLAIM_RATE`].
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Claims {
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The slowest: a stall (a commit that waited) shows here first.
    pub max_ms: f64,
}

impl Claims {
    /// p50, p99 and the slowest of latencies in µs.
    fn of(lat: &mut [u32]) -> Claims {
        Claims { p50_ms: quantile_ms(lat, 0.50), p99_ms: quantile_ms(lat, 0.99), max_ms: quantile_ms(lat, 1.0) }
    }
}

impl std::fmt::Display for Claims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "p50 / p99 / max {:.2} / {:.2} / {:.1} ms", self.p50_ms, self.p99_ms, self.max_ms)
    }
}

/// When paced claims are sent (open loop: each at its time, whatever the answers before it):
/// claim `i` at `i / CLAIM_RATE` after the start, on connection `i % CLAIM_CONNECTIONS`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    count: u64,
    start: tokio::time::Instant,
}

impl Pace {
    /// [`CLAIM_RATE`] claims a second for `secs`, starting shortly after now.
    pub(crate) fn new(secs: f64) -> Pace {
        let count = (CLAIM_RATE * secs).round().max(1.0) as u64;
        Pace { count, start: tokio::time::Instant::now() + Duration::from_millis(50) }
    }

    /// The connections, one worker each.
    pub(crate) fn connections(&self) -> std::ops::Range<u64> {
        0..CLAIM_CONNECTIONS
    }

    /// The claims connection `w` sends.
    pub(crate) fn claims_of(&self, w: u64) -> impl Iterator<Item = u64> {
        (w..self.count).step_by(CLAIM_CONNECTIONS as usize)
    }

    /// Waits until claim `i` is due.
    pub(crate) async fn until(&self, i: u64) {
        tokio::time::sleep_until(self.start + Duration::from_secs_f64(i as f64 / CLAIM_RATE)).await;
    }

    /// Every connection's latencies (µs, one per claim) as p50 and p99.
    pub(crate) async fn gather(&self, mut workers: JoinSet<anyhow::Result<Vec<u32>>>) -> anyhow::Result<Claims> {
        let mut all = Vec::with_capacity(self.count as usize);
        while let Some(done) = workers.join_next().await {
            all.extend(done.context("a claim worker panicked")??);
        }
        Ok(Claims::of(&mut all))
    }
}

/// The prefix of the fill's event ids (`event_id(FILL_PREFIX, i)`).
pub(crate) const FILL_PREFIX: &str = "scale-";

/// The first index of the `round`-th run of new claims: ids of the fill's kind past any fill
/// (2^40 on), 2^32 apart. Like real delivery ids, each claim then lands among the stored
/// records, in whatever page its id falls in. Until 2026-12-07 the claims had ids of their own
/// (`claims-<size>-…`): all of a run's claims went to one range of keys beside the fill's,
/// whose few pages every claim shared and no claim read from the disk.
pub(crate) fn claims_from(round: u64) -> u64 {
    (1 << 40) + (round << 32)
}

/// Claims a store takes in a row before the next store's turn when [`paced_claims`] measures
/// several: one second's, so each sees the full rate, and a disturbance of the machine (a
/// writeback, a neighbour's burst) falls on both within seconds.
const TURN: u64 = CLAIM_RATE as u64;

/// New claims (`If-None-Match: *`, each must be created) paced as [`Pace`] says, `secs` for
/// each store, the stores taking turns a second at a time: store `s` is sent ids
/// `event_id(FILL_PREFIX, first_s + i)`. One store's latencies per store, in their order.
/// Taking turns lets a store's latency be judged against another's measured in the same
/// seconds (the empty store's beside the filled one's), which one after the other on a noisy
/// machine it cannot be.
pub(crate) async fn paced_claims<const N: usize>(
    stores: [(SocketAddr, u64); N],
    secs: f64,
) -> anyhow::Result<[Claims; N]> {
    let n = N.max(1) as u64;
    let pace = Pace::new(secs * n as f64);
    let now_ms = wall_ms();
    let mut workers = JoinSet::new();
    for w in pace.connections() {
        let mut conns = Vec::new();
        for (addr, first) in stores {
            conns.push((Http::connect(addr).await?, first));
        }
        workers.spawn(async move {
            let mut lat = Vec::new();
            for i in pace.claims_of(w) {
                pace.until(i).await;
                let s = ((i / TURN) % n) as usize;
                let (http, first) = &mut conns[s];
                let id = event_id(FILL_PREFIX, *first + i);
                let (key, value) = (storage_key(None, &id), record(&id, *first + i, now_ms));
                let t = Instant::now();
                let status = http.put_if_absent(&key, &value, TTL_MS).await?;
                lat.push((s, micros_since(t)));
                ensure!(status == 201, "claiming {key} answered {status}");
            }
            Ok::<_, anyhow::Error>(lat)
        });
    }
    let mut each: [Vec<u32>; N] = std::array::from_fn(|_| Vec::with_capacity(pace.count as usize / n as usize));
    while let Some(done) = workers.join_next().await {
        for (s, us) in done.context("a claim worker panicked")?? {
            each[s].push(us);
        }
    }
    Ok(each.map(|mut lat| Claims::of(&mut lat)))
}

/// Unix time in ms: the records' times, and their leases, are the store's present.
pub(crate) fn wall_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

/// The `q` quantile of `lat` (µs) in ms.
pub(crate) fn quantile_ms(lat: &mut [u32], q: f64) -> f64 {
    lat.sort_unstable();
    let i = ((lat.len() as f64 * q).ceil() as usize).clamp(1, lat.len().max(1)) - 1;
    lat.get(i).map_or(0.0, |&us| us as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_spread_and_records_are_the_plugins_size() {
        let ids: std::collections::BTreeSet<String> = (0..10_000).map(|i| event_id("s-", i)).collect();
        assert_eq!(ids.len(), 10_000);
        // Spread: consecutive records do not land next to each other in key order.
        assert!(event_id("s-", 1) < event_id("s-", 0) || event_id("s-", 2) < event_id("s-", 1));
        let value = record(&event_id("s-", 5), 5, 1_780_000_000_000);
        assert!((600..1000).contains(&value.len()), "{} bytes", value.len());
        let v: serde_json::Value = serde_json::from_slice(&value).unwrap();
        assert_eq!((v["v"].as_u64(), v["status"].as_str()), (Some(1), Some("completed")));
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&record("x", 100, 0)).unwrap()["status"], "processing");
    }

    #[test]
    fn new_claims_land_among_the_fill_not_in_a_range_of_their_own() {
        let fill: Vec<String> = (0..10_000).map(|i| event_id(FILL_PREFIX, i)).collect();
        let claims: Vec<String> = (0..100).map(|i| event_id(FILL_PREFIX, claims_from(1) + i)).collect();
        let mut all: Vec<(&String, bool)> =
            fill.iter().map(|id| (id, false)).chain(claims.iter().map(|id| (id, true))).collect();
        all.sort();
        // The claims, in key order, each have fill records between them and the next.
        let at: Vec<usize> = all.iter().enumerate().filter(|(_, (_, claim))| *claim).map(|(n, _)| n).collect();
        let adjacent = at.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(adjacent < 5, "{adjacent} of 99 neighbouring claims are next to each other");
        // Rounds and the fill never share an index.
        assert!(claims_from(0) > 1 << 36 && claims_from(2) - claims_from(1) == 1 << 32);
    }
}
