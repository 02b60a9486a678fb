//! Raw-store load: the same atomic claims (and reads) sent straight to the store over C connections.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::measure::{micros_since, Measure, Meter, Tally};
use super::wire::{Http, Resp};
use super::workload::TTL_MS;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Store {
    Kv,
    Redis,
}

/// What each operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// KV `PUT If-None-Match: *` / Redis `SET NX GET PX`: outcome `created` or `exists`.
    Claim,
    /// KV `GET` / Redis `GET`: outcome `found` or `missing`.
    Read,
}

enum Client {
    Kv(Http),
    Redis(Resp),
}

impl Client {
    async fn connect(store: Store, addr: SocketAddr) -> std::io::Result<Client> {
        Ok(match store {
            Store::Kv => Client::Kv(Http::connect(addr).await?),
            Store::Redis => Client::Redis(Resp::connect(addr).await?),
        })
    }

    async fn call(&mut self, op: Op, key: &str, value: &[u8]) -> std::io::Result<&'static str> {
        Ok(match (self, op) {
            (Client::Kv(h), Op::Claim) => match h.put_if_absent(key, value, TTL_MS).await? {
                201 => "created",
                412 => "exists",
                _ => "error:status",
            },
            (Client::Kv(h), Op::Read) => match h.get(key).await? {
                200 => "found",
                404 => "missing",
                _ => "error:status",
            },
            (Client::Redis(r), Op::Claim) => {
                if r.set_nx_get(key, value, TTL_MS).await? {
                    "created"
                } else {
                    "exists"
                }
            }
            (Client::Redis(r), Op::Read) => {
                if r.get(key).await? {
                    "found"
                } else {
                    "missing"
                }
            }
        })
    }
}

/// One raw run: `keys` split dynamically over `c` connections; stops early at `cap`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    store: Store,
    addr: SocketAddr,
    store_pid: u32,
    op: Op,
    keys: Arc<Vec<String>>,
    value: Arc<Vec<u8>>,
    c: usize,
    cap: Duration,
    expected: &str,
) -> anyhow::Result<Measure> {
    let mut clients = Vec::with_capacity(c);
    for _ in 0..c {
        clients.push(Client::connect(store, addr).await.with_context(|| format!("connecting to {addr}"))?);
    }
    let next = Arc::new(AtomicUsize::new(0));
    let meter = Meter::start(None, store_pid);
    let deadline = Instant::now() + cap;
    let mut workers = tokio::task::JoinSet::new();
    for mut client in clients {
        let (next, keys, value) = (next.clone(), keys.clone(), value.clone());
        workers.spawn(async move {
            let mut lat = Vec::with_capacity(keys.len() / c + 1);
            let mut tally = Tally::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= keys.len() || Instant::now() >= deadline {
                    return Ok::<_, std::io::Error>((lat, tally));
                }
                let t = Instant::now();
                let outcome = client.call(op, &keys[i], &value).await?;
                lat.push(micros_since(t));
                tally.add(outcome);
            }
        });
    }
    let (mut lat, mut tally) = (Vec::with_capacity(keys.len()), Tally::default());
    while let Some(done) = workers.join_next().await {
        let (l, t) = done.context("a load worker panicked")?.context("raw store call failed")?;
        lat.extend(l);
        tally.merge(t);
    }
    let capped = lat.len() < keys.len();
    Ok(meter.finish(lat, tally, expected, capped))
}
