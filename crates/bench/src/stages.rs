//! Plugin CPU per ingest by stage: each library stage of the ingest path, timed in-process
//! on the bench's own request lines, so a regression in the whole-process figure points at
//! its stage.
//
// Thread CPU time (CLOCK_THREAD_CPUTIME_ID), not wall time: on a shared machine other
// processes stretch wall time but not the CPU this thread spends. The bench runs on one
// thread (a current-thread runtime), so the store-client stage counts the client, the
// runtime and the socket syscalls of that one request, as in the plugin.

use std::hint::black_box;
use std::time::Duration;

use anyhow::Context;
use dify_plugin::protocol::outbound::write_answer_end_lines;
use dify_plugin::protocol::{Fields, Inbound};
use event_store::key::storage_key;
use event_store::record::fingerprint;
use event_store::{Created, EventStore, HostClock, StoreCache, Write};
use serde::Serialize;
use serde_json::{json, Value};
use stateful_tool::{Answer, IngestRequest, Params, Settings};

/// Microseconds of CPU per ingest spent in each stage.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Stages {
    /// `kv` or `redis`.
    pub store: &'static str,
    /// The daemon's line → envelope and `data` tree (`Inbound::parse`).
    pub parse_us: f64,
    /// Credentials → settings, and the ingest parameters checked (fingerprint excluded).
    pub params_us: f64,
    /// Payload canonicalised and hashed (`fingerprint`).
    pub canon_hash_us: f64,
    /// The fresh record built and encoded (`Record::to_bytes`, timestamps, claim id).
    pub encode_us: f64,
    /// One conditional create through the plugin's own store client, sequentially.
    pub store_client_us: f64,
    /// The answer serialised into the text, json and end lines.
    pub answer_us: f64,
}

impl Stages {
    pub(crate) fn sum_us(&self) -> f64 {
        self.parse_us + self.params_us + self.canon_hash_us + self.encode_us + self.store_client_us + self.answer_us
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only writes the timespec we pass; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Mean CPU µs of `f(i)` over `rounds` passes of `n` items, after one warm-up pass.
fn per_call(n: usize, rounds: usize, mut f: impl FnMut(usize)) -> f64 {
    (0..n).for_each(&mut f);
    let t0 = thread_cpu();
    for _ in 0..rounds {
        (0..n).for_each(&mut f);
    }
    (thread_cpu() - t0).as_secs_f64() * 1e6 / (n * rounds) as f64
}

/// A request line's credentials (as a tree) and its `tool_parameters` (their JSON text).
fn request_parts(line: &[u8]) -> anyhow::Result<(Value, String)> {
    let data = Inbound::parse(line).map_err(|e| anyhow::anyhow!(e.message))?.data.context("no data")?;
    let fields = Fields::parse(data.get())?;
    let params = fields.get("tool_parameters").context("no tool_parameters")?.get().to_owned();
    Ok((serde_json::from_str(fields.get("credentials").map_or("null", |c| c.get()))?, params))
}

fn ingest_request(params: &str, settings: &Settings) -> anyhow::Result<IngestRequest> {
    IngestRequest::parse(&Params::parse(params)?, settings).map_err(|e| anyhow::anyhow!(e.message))
}

/// Times every stage over about `calls` calls on `lines` (ingest request lines for `url`);
/// the store stage creates `keys` (fresh ones) through the plugin's client for that URL.
pub(crate) async fn measure(
    store: &'static str,
    url: &str,
    lines: &[Vec<u8>],
    keys: &[String],
    calls: usize,
) -> anyhow::Result<Stages> {
    let n = lines.len().clamp(1, 2000);
    let rounds = (calls / n).max(1);
    let parts = lines[..n].iter().map(|l| request_parts(l)).collect::<anyhow::Result<Vec<_>>>()?;
    let settings = Settings::from_credentials(&parts[0].0).map_err(|e| anyhow::anyhow!(e.message))?;
    let reqs = parts.iter().map(|(_, p)| ingest_request(p, &settings)).collect::<anyhow::Result<Vec<_>>>()?;

    let parse_us = per_call(n, rounds, |i| drop(black_box(Inbound::parse(black_box(&lines[i])))));
    let with_fp = per_call(n, rounds, |i| {
        let s = Settings::from_credentials(&parts[i].0);
        drop(black_box(s.map(|s| ingest_request(&parts[i].1, &s))));
    });
    let canon_hash_us = per_call(n, rounds, |i| {
        drop(black_box(fingerprint(&reqs[i].event_type, black_box(reqs[i].payload.as_deref()))));
    });
    let record = |i: usize| {
        // A copy of the request, as the plugin's claim path owns its request and moves it in.
        let (req, now) = (reqs[i].clone(), 1_780_000_000_000i64 + i as i64);
        req.first_claim(now, event_store::record::new_claim_id())
    };
    let encode_us = per_call(n, rounds, |i| {
        let rec = record(i);
        drop(black_box(rec.to_bytes()));
        drop(black_box(rec));
    });
    let record_only = per_call(n, rounds, |i| drop(black_box(record(i))));
    let (mut out, mut scratch) = (Vec::new(), Vec::new());
    let answer_us = per_call(n, rounds, |i| {
        let key = storage_key(None, &reqs[i].event_id);
        let answer = Answer::new("accepted")
            .field("accepted", json!(true))
            .field("duplicate", json!(false))
            .field("retry", json!(false))
            .record(record(i), &key);
        out.clear();
        // As the daemon relays an agent strategy's call: sentence and json, no variables.
        write_answer_end_lines(&mut out, &mut scratch, "00000001-0000-4000-8000-000000000001", &answer, false);
        black_box(&out);
    }) - record_only;

    let cache = StoreCache::new(HostClock::system(), event_store::StoreOptions::default());
    let client = cache
        .get(&event_store::StoreConfig { url: url.to_owned(), token: None, min_replicas: 0 })
        .await
        .map_err(|e| anyhow::anyhow!("store client for {url}: {e}"))?;
    let value = record(0).to_bytes();
    let retention = Duration::from_secs(7 * 24 * 3600);
    let (warm, timed) = keys.split_at(keys.len() / 10);
    for k in warm {
        client.create(k, Write { value: &value, ttl: retention, until: None }, Duration::from_secs(5)).await?;
    }
    let t0 = thread_cpu();
    for k in timed {
        if !matches!(
            client.create(k, Write { value: &value, ttl: retention, until: None }, Duration::from_secs(5)).await?,
            Created::Created
        ) {
            anyhow::bail!("stage bench: {k} already existed");
        }
    }
    let store_client_us = (thread_cpu() - t0).as_secs_f64() * 1e6 / timed.len().max(1) as f64;
    Ok(Stages {
        store,
        parse_us,
        params_us: (with_fp - canon_hash_us).max(0.0),
        canon_hash_us,
        encode_us,
        store_client_us,
        answer_us: answer_us.max(0.0),
    })
}
