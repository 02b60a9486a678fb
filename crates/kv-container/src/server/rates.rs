//! The last 15 minutes of claims and write latency, in 10-second slots: what `/ui` draws.
//!
//! A fixed ring of [`SLOTS`] slots, each keyed by the start of its 10 s of wall time; a slot
//! whose key is older than the window is simply reused. Nothing grows, nothing needs an
//! external time-series store, and a restart starts an empty window (Prometheus keeps the
//! long history).

use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

/// Length of one slot.
pub(crate) const SLOT_MS: u64 = 10_000;
/// 90 × 10 s = the last 15 minutes.
pub(crate) const SLOTS: usize = 90;
/// Upper bounds of the write-latency buckets, in seconds: 50 µs × 2^i, the same bounds as
/// `kv_write_duration_seconds`, so the page's p99 and Prometheus's `histogram_quantile` agree.
const BOUNDS: usize = 16;

fn bound(i: usize) -> f64 {
    0.000_05 * f64::from(1u32 << i)
}

/// What the container can tell about a conditional write (see `claims`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    /// `If-None-Match: *` answered 201: a new event claimed.
    Accepted,
    /// `If-Match` swap to a `processing` record: a failed or expired event claimed again.
    Reclaimed,
    /// A create refused (412) because the same event (same fingerprint) is stored and live.
    Duplicate,
    /// A create refused because the stored record has another fingerprint.
    Conflict,
    /// A create refused where the bodies are not event records (another client).
    Other,
}

impl Claim {
    pub(crate) const ALL: [Claim; 5] =
        [Claim::Accepted, Claim::Reclaimed, Claim::Duplicate, Claim::Conflict, Claim::Other];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Claim::Accepted => "accepted",
            Claim::Reclaimed => "reclaimed",
            Claim::Duplicate => "duplicate",
            Claim::Conflict => "conflict",
            Claim::Other => "other",
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Slot {
    /// Start of the slot's 10 s (unix ms); 0 = never used.
    start_ms: u64,
    claims: [u64; 5],
    writes: u64,
    /// Writes per latency bucket; the last one is "slower than the largest bound".
    latency: [u64; BOUNDS + 1],
}

/// One slot as served by `/ui/api/rates` (counts; per second = count / 10).
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct Point {
    pub(crate) start_ms: u64,
    pub(crate) accepted: u64,
    pub(crate) reclaimed: u64,
    pub(crate) duplicate: u64,
    pub(crate) conflict: u64,
    pub(crate) other: u64,
    pub(crate) writes: u64,
    /// 99th percentile of the slot's write latency (linear within a bucket, as Prometheus's
    /// `histogram_quantile`); absent when the slot saw no writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) write_p99_ms: Option<f64>,
}

/// The ring; one short lock per recorded write (no allocation, no I/O under it).
pub(crate) struct Rates {
    slots: Mutex<[Slot; SLOTS]>,
}

impl Default for Rates {
    fn default() -> Self {
        Rates { slots: Mutex::new([Slot::default(); SLOTS]) }
    }
}

impl Rates {
    fn with_slot(&self, now_ms: u64, f: impl FnOnce(&mut Slot)) {
        let start_ms = now_ms - now_ms % SLOT_MS;
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let slot = &mut slots[(start_ms / SLOT_MS) as usize % SLOTS];
        if slot.start_ms != start_ms {
            *slot = Slot { start_ms, ..Slot::default() };
        }
        f(slot);
    }

    pub(crate) fn claim_at(&self, claim: Claim, now_ms: u64) {
        self.with_slot(now_ms, |s| s.claims[claim as usize] += 1);
    }

    /// One write request (`PUT`/`POST`/`DELETE /state/{key}`) answered after `took`.
    pub(crate) fn write_at(&self, took: Duration, now_ms: u64) {
        let secs = took.as_secs_f64();
        let bucket = (0..BOUNDS).find(|&i| secs <= bound(i)).unwrap_or(BOUNDS);
        self.with_slot(now_ms, |s| {
            s.writes += 1;
            s.latency[bucket] += 1;
        });
    }

    /// The window ending with the slot that holds `now_ms`, oldest first; slots nothing
    /// happened in are zeros.
    pub(crate) fn window(&self, now_ms: u64) -> Vec<Point> {
        let current = now_ms - now_ms % SLOT_MS;
        let slots = *self.slots.lock().unwrap_or_else(|p| p.into_inner());
        (0..SLOTS as u64)
            .rev()
            .map(|back| current.saturating_sub(back * SLOT_MS))
            .map(|start_ms| {
                let s = slots[(start_ms / SLOT_MS) as usize % SLOTS];
                let s = if s.start_ms == start_ms { s } else { Slot::default() };
                Point {
                    start_ms,
                    accepted: s.claims[Claim::Accepted as usize],
                    reclaimed: s.claims[Claim::Reclaimed as usize],
                    duplicate: s.claims[Claim::Duplicate as usize],
                    conflict: s.claims[Claim::Conflict as usize],
                    other: s.claims[Claim::Other as usize],
                    writes: s.writes,
                    write_p99_ms: quantile(&s.latency, 0.99).map(|q| q * 1000.0),
                }
            })
            .collect()
    }
}

/// The `q` quantile of a bucketed count, in seconds, the way `histogram_quantile` computes
/// it: linear inside the bucket the rank falls in; the overflow bucket reads as the largest bound.
fn quantile(buckets: &[u64; BOUNDS + 1], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, &n) in buckets.iter().enumerate() {
        if n > 0 && (below + n) as f64 >= rank {
            if i == BOUNDS {
                return Some(bound(BOUNDS - 1));
            }
            let lower = if i == 0 { 0.0 } else { bound(i - 1) };
            return Some(lower + (bound(i) - lower) * (rank - below as f64) / n as f64);
        }
        below += n;
    }
    Some(bound(BOUNDS - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_785_924_000_000;

    #[test]
    fn claims_land_in_their_slot_and_old_slots_are_reused() {
        let r = Rates::default();
        r.claim_at(Claim::Accepted, T0);
        r.claim_at(Claim::Accepted, T0 + 9_999);
        r.claim_at(Claim::Duplicate, T0 + 10_000);
        let w = r.window(T0 + 10_000);
        assert_eq!(w.len(), SLOTS);
        assert_eq!((w[SLOTS - 2].start_ms, w[SLOTS - 2].accepted), (T0, 2));
        assert_eq!((w[SLOTS - 1].accepted, w[SLOTS - 1].duplicate), (0, 1));
        // 15 minutes later the slot of T0 holds new data and the old counts are gone.
        let later = T0 + SLOTS as u64 * SLOT_MS;
        r.claim_at(Claim::Conflict, later);
        let w = r.window(later);
        assert_eq!((w[SLOTS - 1].accepted, w[SLOTS - 1].conflict), (0, 1));
        assert_eq!(w.iter().map(|p| p.accepted + p.duplicate).sum::<u64>(), 1, "only T0+10s is still in the window");
    }

    #[test]
    fn p99_follows_the_slow_tail() {
        let r = Rates::default();
        for _ in 0..98 {
            r.write_at(Duration::from_micros(40), T0);
        }
        for _ in 0..2 {
            r.write_at(Duration::from_millis(300), T0);
        }
        let p = &r.window(T0)[SLOTS - 1];
        assert_eq!(p.writes, 100);
        // The 99th write is in the 204.8–409.6 ms bucket.
        let p99 = p.write_p99_ms.unwrap();
        assert!((204.8..=409.6).contains(&p99), "{p99}");
        assert_eq!(r.window(T0 + SLOT_MS)[SLOTS - 1].write_p99_ms, None);
    }

    #[test]
    fn quantile_matches_histogram_quantile_arithmetic() {
        let mut b = [0u64; BOUNDS + 1];
        b[0] = 50;
        b[1] = 50;
        // rank 99 of 100: 49/50 of the way through (50 µs, 100 µs].
        let q = quantile(&b, 0.99).unwrap();
        assert!((q - (0.000_05 + 0.000_05 * 49.0 / 50.0)).abs() < 1e-12, "{q}");
        b = [0; BOUNDS + 1];
        b[BOUNDS] = 3;
        assert_eq!(quantile(&b, 0.99), Some(bound(BOUNDS - 1)));
        assert_eq!(quantile(&[0; BOUNDS + 1], 0.99), None);
    }
}
