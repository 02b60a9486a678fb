//! The printed tables (Markdown, ready for the README), the targets, and the JSON summary.

use std::fmt::Write;

use serde::Serialize;

use super::measure::Measure;
use super::suite::{Results, Row};

/// One performance target and how this run fared.
#[derive(Debug, Serialize)]
pub struct Target {
    pub name: String,
    pub measured: Option<f64>,
    pub limit: f64,
    /// `>=` or `<=`: which side of `limit` passes.
    pub rule: &'static str,
    /// None when this run did not measure it (a section or concurrency was left out).
    pub pass: Option<bool>,
}

fn target(name: &str, measured: Option<f64>, rule: &'static str, limit: f64) -> Target {
    let pass = measured.map(|m| if rule == ">=" { m >= limit } else { m <= limit });
    Target { name: name.to_owned(), measured, limit, rule, pass }
}

fn find<'a>(rows: &'a [Row], store: &str, op: &str, c: usize) -> Option<&'a Row> {
    rows.iter().find(|r| r.store == store && r.op == op && r.c == c)
}

fn max(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.fold(None, |m, v| Some(m.map_or(v, |m: f64| m.max(v))))
}

/// The raw operation a plugin operation is compared with.
fn raw_op(plugin_op: &str) -> &'static str {
    match plugin_op {
        "ingest_new" => "claim_new",
        "ingest_dup" => "claim_dup",
        _ => "read",
    }
}

pub fn targets(r: &Results) -> Vec<Target> {
    let ratio = |store: &str| {
        let p = find(&r.plugin, store, "ingest_new", 16)?;
        let raw = find(&r.raw, store, "claim_new", 16)?;
        Some(p.m.ops_per_s / raw.m.ops_per_s)
    };
    let ingests = r.plugin.iter().filter(|row| row.op.starts_with("ingest"));
    let rss_kib =
        max(r.plugin.iter().filter_map(|row| row.peak_rss_kib).chain([r.startup.idle_peak_rss_kib]).map(|k| k as f64))
            .filter(|&k| k > 0.0);
    let heartbeats =
        r.startup.first_heartbeat_ms.iter().copied().chain(r.plugin.iter().filter_map(|row| row.first_heartbeat_ms));
    vec![
        target("plugin/raw throughput, KV container, C=16", ratio("kv"), ">=", 0.5),
        target("plugin/raw throughput, Redis, C=16", ratio("redis"), ">=", 0.5),
        target(
            "plugin CPU per ingest, ms (worst run)",
            max(ingests.filter_map(|row| row.m.subject_cpu_ms_per_op)),
            "<=",
            0.3,
        ),
        target("plugin peak RSS, MB", rss_kib.map(|k| k * 1024.0 / 1e6), "<=", 20.0),
        target("spawn → first heartbeat, ms (worst spawn)", max(heartbeats), "<=", 50.0),
        target(
            "KV durable conditional PUTs/s, C=64",
            find(&r.kv, "immediate", "put_if_absent", 64).map(|row| row.m.ops_per_s),
            ">=",
            10_000.0,
        ),
    ]
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.digits$}"))
}

pub fn table(r: &Results, targets: &[Target]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Plugin over pipes vs the raw store (same atomic operation, C connections / sessions in flight):\n"
    );
    let _ = writeln!(
        s,
        "| store | operation | C | plugin ops/s | p50 ms | p99 ms | raw ops/s | raw p50 ms | raw p99 ms | plugin/raw \
         | plugin CPU ms/op | store CPU ms/op (plugin run) | peak RSS MB |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for p in &r.plugin {
        let raw = find(&r.raw, p.store, raw_op(p.op), p.c);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {:.3} | {} |",
            p.store,
            p.op,
            p.c,
            rate(&p.m),
            p.m.p50_ms,
            p.m.p99_ms,
            raw.map_or("–".to_owned(), |x| rate(&x.m)),
            opt(raw.map(|x| x.m.p50_ms), 2),
            opt(raw.map(|x| x.m.p99_ms), 2),
            opt(raw.map(|x| p.m.ops_per_s / x.m.ops_per_s), 2),
            opt(p.m.subject_cpu_ms_per_op, 3),
            p.m.store_cpu_ms_per_op,
            opt(p.peak_rss_kib.map(|k| k as f64 * 1024.0 / 1e6), 1),
        );
    }
    if r.plugin.is_empty() && !r.raw.is_empty() {
        rows(&mut s, "Raw store", &r.raw);
    }
    if !r.kv.is_empty() {
        rows(
            &mut s,
            "KV container alone (durability immediate = fsync before every acknowledgement; none = no fsync)",
            &r.kv,
        );
    }
    if r.plugin.iter().chain(&r.raw).chain(&r.kv).any(|row| row.m.capped) {
        let _ = writeln!(s, "\n\\* stopped at the per-run time cap before N operations (--max-run-secs).");
    }
    let hb = &r.startup.first_heartbeat_ms;
    if !hb.is_empty() {
        let mut sorted = hb.clone();
        sorted.sort_by(f64::total_cmp);
        let _ = writeln!(
            s,
            "\nStart-up: {} spawns, spawn → first heartbeat p50 {:.1} ms, max {:.1} ms; idle peak RSS {:.1} MB.",
            hb.len(),
            sorted[sorted.len() / 2],
            sorted[sorted.len() - 1],
            r.startup.idle_peak_rss_kib as f64 * 1024.0 / 1e6
        );
    }
    let _ = writeln!(s, "\n| target | measured | limit | result |\n|---|---:|---:|---|");
    for t in targets {
        let verdict = match t.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "not measured",
        };
        let _ = writeln!(s, "| {} | {} | {} {} | {verdict} |", t.name, opt(t.measured, 3), t.rule, t.limit);
    }
    s
}

/// Throughput, marked when the run hit its time cap.
fn rate(m: &Measure) -> String {
    format!("{:.0}{}", m.ops_per_s, if m.capped { "\\*" } else { "" })
}

fn rows(s: &mut String, title: &str, rows: &[Row]) {
    let _ = writeln!(s, "\n{title}:\n");
    let _ = writeln!(s, "| store | operation | C | ops/s | p50 ms | p99 ms | max ms | store CPU ms/op |");
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.3} |",
            r.store,
            r.op,
            r.c,
            rate(&r.m),
            r.m.p50_ms,
            r.m.p99_ms,
            r.m.max_ms,
            r.m.store_cpu_ms_per_op
        );
    }
}

/// One progress line per finished run, on stderr, so a long run shows it is alive.
pub fn progress(section: &str, r: &Row) {
    eprintln!(
        "  {section:<6} {:<9} {:<13} C={:<3} {:>8.0} ops/s  p50 {:>7.2} ms  p99 {:>7.2} ms  n={}{}{}",
        r.store,
        r.op,
        r.c,
        r.m.ops_per_s,
        r.m.p50_ms,
        r.m.p99_ms,
        r.m.ops,
        if r.m.capped { " (time cap)" } else { "" },
        if r.m.unexpected > 0 { format!("  UNEXPECTED {:?}", r.m.outcomes) } else { String::new() },
    );
}
