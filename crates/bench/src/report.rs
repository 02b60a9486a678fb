//! The printed tables (Markdown, ready for the README), the targets, and the JSON summary.

use std::fmt::Write;

use serde::Serialize;

use super::instructions::{main_figure, Caller, IN_FLIGHT, LAYOUTS, LONG, SHORT, TARGET_WORKFLOW_REDIS};
use super::measure::{kib_to_mb, Measure};
use super::results::{Results, Row};

/// One performance target and how this run fared.
#[derive(Debug, Serialize)]
pub(crate) struct Target {
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

/// The median of `values` (the upper one of an even count); None when empty.
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

/// Plugin/raw throughput of new ingests vs new claims.
fn ratio(r: &Results, store: &str, c: usize) -> Option<f64> {
    let p = find(&r.plugin, store, "ingest_new", c)?;
    let raw = find(&r.raw, store, "claim_new", c)?;
    Some(p.m.ops_per_s / raw.m.ops_per_s)
}

/// Peak RSS (VmHWM) in MB over the plugin processes at concurrency `c` (all when None),
/// and the idle start-up ones when all.
fn peak_rss_mb(r: &Results, c: Option<usize>) -> Option<f64> {
    let rows = r.plugin.iter().filter(|row| c.is_none_or(|c| row.c == c)).filter_map(|row| row.peak_rss_kib);
    let idle = c.is_none().then_some(r.startup.idle_peak_rss_kib);
    max(rows.chain(idle).filter(|&k| k > 0).map(kib_to_mb))
}

pub(crate) fn targets(r: &Results) -> Vec<Target> {
    let redis_cpu_us = median(
        r.plugin
            .iter()
            .filter(|row| row.store == "redis" && row.op.starts_with("ingest") && matches!(row.c, 16 | 64))
            .filter_map(|row| row.m.subject_cpu_ms_per_op.map(|ms| ms * 1000.0))
            .collect(),
    );
    let heartbeats =
        r.startup.first_heartbeat_ms.iter().copied().chain(r.plugin.iter().filter_map(|row| row.first_heartbeat_ms));
    // Issue 27's targets.
    let mut all = vec![
        target("plugin/raw throughput, KV container, C=16", ratio(r, "kv", 16), ">=", 0.85),
        target("plugin/raw throughput, KV container, C=64", ratio(r, "kv", 64), ">=", 0.85),
        target("plugin/raw throughput, Redis, C=16", ratio(r, "redis", 16), ">=", 0.6),
        target("plugin/raw throughput, Redis, C=64", ratio(r, "redis", 64), ">=", 0.6),
        target("plugin/raw throughput, Redis Cluster, C=16", ratio(r, "redis-cluster", 16), ">=", 0.6),
        target("plugin/raw throughput, Redis Cluster, C=64", ratio(r, "redis-cluster", 64), ">=", 0.6),
        target("plugin CPU per ingest, Redis path, µs (median of C=16 and C=64)", redis_cpu_us, "<=", 10.0),
        target(
            "KV durable conditional PUTs/s, C=64",
            find(&r.kv, "immediate", "put_if_absent", 64).map(|row| row.m.ops_per_s),
            ">=",
            60_000.0,
        ),
        target("plugin peak RSS through the whole bench, MB", peak_rss_mb(r, None), "<=", 16.0),
        target("spawn → first heartbeat, ms (worst spawn)", max(heartbeats), "<=", 50.0),
        target(
            "burst of sessions written at once: share answered",
            r.burst.as_ref().map(|b| b.answered as f64 / b.sessions as f64),
            ">=",
            1.0,
        ),
        target(
            "burst of sessions written at once: plugin peak RSS, MB",
            r.burst.as_ref().map(|b| b.peak_rss_mb()),
            "<=",
            super::burst::PEAK_RSS_LIMIT_MB,
        ),
    ];
    // Only when the section ran (it needs valgrind, and --quick leaves it out).
    let ir = r.instructions.iter().find(|c| c.store == "redis" && c.caller == Caller::Workflow.name());
    if let Some(c) = ir {
        let name = "instructions per workflow-node ingest, Redis (callgrind)";
        all.push(target(name, Some(c.per_ingest), "<=", TARGET_WORKFLOW_REDIS));
    }
    all
}

/// Instructions per ingest by backend and caller kind, next to main's figure where known.
fn instruction_table(s: &mut String, r: &Results) {
    if r.instructions.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nPlugin instructions per call: a new event_ingest by caller kind, and the trigger's dispatch (a new \
         delivery claimed at the door) and invoke (a run taking that claim) (user space, callgrind: fresh \
         processes fed {SHORT} and {LONG} lines, {IN_FLIGHT} in flight, difference ÷ {}; the median of \
         {LAYOUTS} stack starts, their lowest and highest beside it):\n",
        LONG - SHORT
    );
    let _ =
        writeln!(s, "| store | call | instructions per call | layouts: low – high | main (2bde3f2) | vs main |\n|---|---|---:|---:|---:|---:|");
    for c in &r.instructions {
        let main = main_figure(c.store, c.caller);
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {:.0} – {:.0} | {} | {} |",
            c.store,
            c.caller,
            c.per_ingest,
            c.per_layout.first().unwrap_or(&c.per_ingest),
            c.per_layout.last().unwrap_or(&c.per_ingest),
            opt(main, 0),
            opt(main.map(|m| c.per_ingest / m), 2)
        );
    }
}

/// What the plugin's peak RSS is made of at each concurrency: its private memory, the rest
/// being the mapped executable and libraries (clean file pages, shared with the page cache).
fn memory_line(s: &mut String, r: &Results) {
    let mut parts = Vec::new();
    for row in r.plugin.iter().filter(|row| row.op == "ingest_new") {
        if let (Some(peak), Some(private)) = (row.peak_rss_kib, row.private_rss_kib) {
            parts.push(format!(
                "{} C={}: {:.1} MB = {:.1} private + {:.1} mapped",
                row.store,
                row.c,
                kib_to_mb(peak),
                kib_to_mb(private),
                kib_to_mb(peak.saturating_sub(private))
            ));
        }
    }
    if !parts.is_empty() {
        let _ = writeln!(s, "\nPlugin peak RSS (VmHWM) = private memory (RssAnon at the end of the runs) + mapped binary and libraries: {}.", parts.join("; "));
    }
}

/// Plugin CPU per ingest by stage, next to the whole process's CPU per ingest at C=16; the
/// rest is the runtime, tasks, pipes and scheduling around the stages.
fn stage_table(s: &mut String, r: &Results) {
    if r.stages.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nPlugin CPU per ingest by stage, µs (thread CPU time of each library stage in-process on the same \
         request lines; the store client one call at a time against the same store, so it carries the wake-ups \
         that C=16 shares out, and the rest can come out negative), and the whole plugin process \
         (user+sys from /proc, new ingests at C=16):\n"
    );
    let _ = writeln!(
        s,
        "| store | parse line | params | canonicalise+hash | encode record | store client | answer | stages sum \
         | whole process | rest (runtime, pipes, tasks) |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for st in &r.stages {
        let whole = find(&r.plugin, st.store, "ingest_new", 16).and_then(|row| row.m.subject_cpu_ms_per_op);
        let whole = whole.map(|ms| ms * 1000.0);
        let _ = writeln!(
            s,
            "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} |",
            st.store,
            st.parse_us,
            st.params_us,
            st.canon_hash_us,
            st.encode_us,
            st.store_client_us,
            st.answer_us,
            st.sum_us(),
            opt(whole, 1),
            opt(whole.map(|w| w - st.sum_us()), 1),
        );
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.digits$}"))
}

pub(crate) fn table(r: &Results, targets: &[Target]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Plugin over pipes vs the raw store (same atomic operation, C connections / sessions in flight):\n"
    );
    let _ = writeln!(
        s,
        "| store | operation | C | plugin ops/s | p50 ms | p99 ms | raw ops/s | raw p50 ms | raw p99 ms | plugin/raw \
         | plugin CPU µs/op | store CPU ms/op (plugin run) | peak RSS MB |"
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
            opt(p.m.subject_cpu_ms_per_op.map(|ms| ms * 1000.0), 1),
            p.m.store_cpu_ms_per_op,
            opt(p.peak_rss_kib.map(kib_to_mb), 1),
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
    for durability in ["immediate", "none"] {
        if let Some(row) = find(&r.kv, durability, "put_if_absent", 64) {
            let _ = writeln!(
                s,
                "\nKV container ({durability}) conditional PUTs at C=64: {:.0}/s, p50 {:.2} ms, p99 {:.2} ms.",
                row.m.ops_per_s, row.m.p50_ms, row.m.p99_ms
            );
        }
    }
    if let Some(b) = &r.burst {
        let _ = writeln!(s, "\n{}", b.summary());
    }
    stage_table(&mut s, r);
    instruction_table(&mut s, r);
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
            kib_to_mb(r.startup.idle_peak_rss_kib)
        );
    }
    memory_line(&mut s, r);
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
pub(crate) fn progress(section: &str, r: &Row) {
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
