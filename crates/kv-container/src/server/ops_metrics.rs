//! The operators' figures beside the request metrics: claims by outcome, write latency,
//! health, the record census, the connection cap, start and backup times. They feed both
//! `/metrics` (and so `deploy/prometheus/alerts.yaml`) and the status page's ring buffer.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use super::rates::{Claim, Rates};
use super::record::system_now_ms;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: &'static str,
}

/// Record counts by status, as the census last found them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Census {
    pub(crate) processing: u64,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
    /// Values that are not event records.
    pub(crate) other: u64,
    /// `processing` past their lease, or older than the stuck age with no lease.
    pub(crate) stuck: u64,
    /// Of `stuck`: claims the trigger made at its door that no workflow run took within
    /// their start window (the sender was told `accepted`; nothing ran).
    pub(crate) never_started: u64,
}

impl Census {
    /// From the counts kept by category (`counts::Counts`); a category the census does not
    /// name yet counts as `other`.
    pub(crate) fn from_counts(
        counts: &std::collections::BTreeMap<String, u64>,
        stuck: u64,
        never_started: u64,
    ) -> Census {
        let mut c = Census { stuck, never_started, ..Census::default() };
        for (category, &n) in counts {
            match category.as_str() {
                "processing" => c.processing += n,
                "completed" => c.completed += n,
                "failed" => c.failed += n,
                _ => c.other += n,
            }
        }
        c
    }
}

pub(crate) struct OpsMetrics {
    claims: Family<OutcomeLabels, Counter>,
    write_seconds: Histogram,
    healthy: Gauge,
    records: Family<StatusLabels, Gauge>,
    stuck: Gauge,
    never_started: Gauge,
    max_connections: Gauge,
    start_time: Gauge,
    last_backup: Gauge,
    /// The last 15 minutes, for `/ui`.
    pub(crate) rates: Rates,
}

fn gauge(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl OpsMetrics {
    pub(crate) fn register(registry: &mut Registry) -> OpsMetrics {
        let claims = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "claims",
            "Conditional writes judged as claims: accepted, reclaimed, duplicate, conflict, other",
            claims.clone(),
        );
        for c in Claim::ALL {
            // Every outcome is exported from the start (at 0), so rate() sees the first one.
            drop(claims.get_or_create(&OutcomeLabels { outcome: c.as_str() }));
        }
        let write_seconds = Histogram::new(exponential_buckets(0.000_05, 2.0, 16));
        registry.register_with_unit(
            "write_duration",
            "Time from a write request (PUT, POST, DELETE of a key) to its answer",
            Unit::Seconds,
            write_seconds.clone(),
        );
        let healthy = Gauge::default();
        registry.register("healthy", "1 while GET /healthz answers ok, else 0", healthy.clone());
        let records = Family::<StatusLabels, Gauge>::default();
        registry.register(
            "records",
            "Live keys by record status (counts kept as writes happen, read at most seconds ago)",
            records.clone(),
        );
        let stuck = Gauge::default();
        registry.register(
            "stuck_records",
            "processing records past their lease, or older than --stuck-after-seconds with no lease",
            stuck.clone(),
        );
        let never_started = Gauge::default();
        registry.register(
            "never_started_records",
            "claims the trigger made at its door that no workflow run took within their start window (of stuck_records)",
            never_started.clone(),
        );
        let max_connections = Gauge::default();
        registry.register("max_connections", "The connection cap (--max-connections)", max_connections.clone());
        let start_time = Gauge::default();
        registry.register_with_unit("start_time", "Unix time the server started", Unit::Seconds, start_time.clone());
        start_time.set(gauge(system_now_ms() / 1000));
        let last_backup = Gauge::default();
        registry.register_with_unit(
            "last_backup_timestamp",
            "Unix time of the last complete online backup (GET /backup) since start; 0 = none",
            Unit::Seconds,
            last_backup.clone(),
        );
        OpsMetrics {
            claims,
            write_seconds,
            healthy,
            records,
            stuck,
            never_started,
            max_connections,
            start_time,
            last_backup,
            rates: Rates::default(),
        }
    }

    pub(crate) fn claim(&self, claim: Claim) {
        self.claims.get_or_create(&OutcomeLabels { outcome: claim.as_str() }).inc();
        self.rates.claim_at(claim, system_now_ms());
    }

    pub(crate) fn write_done(&self, took: Duration) {
        self.write_seconds.observe(took.as_secs_f64());
        self.rates.write_at(took, system_now_ms());
    }

    pub(crate) fn set_healthy(&self, ok: bool) {
        self.healthy.set(i64::from(ok));
    }

    pub(crate) fn set_census(&self, c: &Census) {
        for (status, n) in
            [("processing", c.processing), ("completed", c.completed), ("failed", c.failed), ("other", c.other)]
        {
            self.records.get_or_create(&StatusLabels { status }).set(gauge(n));
        }
        self.stuck.set(gauge(c.stuck));
        self.never_started.set(gauge(c.never_started));
    }

    pub(crate) fn set_max_connections(&self, n: usize) {
        self.max_connections.set(gauge(n as u64));
    }

    pub(crate) fn max_connections(&self) -> i64 {
        self.max_connections.get()
    }

    pub(crate) fn started_s(&self) -> i64 {
        self.start_time.get()
    }

    /// An online backup streamed completely; `taken_ms` is its snapshot time.
    pub(crate) fn backup_taken(&self, taken_ms: u64) {
        self.last_backup.set(gauge(taken_ms / 1000));
    }

    pub(crate) fn last_backup_s(&self) -> i64 {
        self.last_backup.get()
    }
}
