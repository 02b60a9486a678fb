//! `stateful-tool-bench`: the plugin over real pipes vs the raw stores, and the KV container alone.
//
// A crate of its own so the shipped plugin does not carry it. It spawns the real release
// `stateful-tool` (plugin and KV container) and `redis-server` on ephemeral loopback ports
// with temporary data directories, and kills all of them before it exits.
//
// The building blocks: processes, wire clients, load loops, report.
mod burst;
mod cluster;
mod config;
mod instructions;
mod measure;
mod plugin;
mod postgres;
mod procs;
mod raw;
mod report;
mod results;
mod scale;
mod scale_keep;
mod scale_load;
mod scale_postgres;
mod scale_redis;
mod scale_rows;
mod scale_table;
mod stages;
mod started;
mod suite;
mod wire;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use serde_json::json;

use config::Config;
use procs::{load1, machine, TempDir};
use raw::Store;

#[derive(Parser)]
#[command(name = "stateful-tool-bench", about = "Benchmarks: plugin vs raw store, KV container durability")]
struct Args {
    /// The `stateful-tool` binary (plugin and KV container). Default: next to this executable.
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// Tiny runs for a CI smoke test (finishes well under a minute).
    #[arg(long)]
    quick: bool,
    /// Operations per measured run (default 20000; 200 with --quick).
    #[arg(long)]
    n: Option<usize>,
    /// Where the JSON summary goes.
    #[arg(long, default_value = "target/bench/summary.json")]
    out: PathBuf,
    /// Sessions / connections in flight.
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    concurrency: Vec<usize>,
    /// Longest a single run may take; it then stops early and reports what it did (default 10 s; 2 s with --quick).
    #[arg(long)]
    max_run_secs: Option<f64>,
    /// Sections to run: startup, stages, instructions (instructions per ingest under
    /// callgrind; left out by --quick unless named), plugin, raw, kv, cluster (plugin and raw
    /// rows on a Redis Cluster the bench starts; with the plugin and/or raw sections), postgres
    /// (the same on a PostgreSQL server the bench starts), burst (10,000 sessions at once),
    /// scale (the KV container filled to --scale-records, and Redis and/or PostgreSQL beside
    /// it when --backends names them; left out by --quick unless named).
    /// Default: all.
    #[arg(long, value_delimiter = ',')]
    sections: Option<Vec<String>>,
    /// Backends for the plugin, raw and scale sections: kv, redis, postgres. postgres is for
    /// the scale section only (the plugin and raw rows on PostgreSQL are the postgres
    /// section's); the scale section always fills the KV container.
    #[arg(long, value_delimiter = ',', default_value = "kv,redis")]
    backends: Vec<String>,
    /// Run the plugin under this command (space-separated), e.g. for callgrind:
    /// `--plugin-wrapper "valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p"`.
    #[arg(long)]
    plugin_wrapper: Option<String>,
    /// Sizes the scale section fills the KV container to, one row each (default 1000000;
    /// 2000 with --quick).
    #[arg(long, value_delimiter = ',')]
    scale_records: Option<Vec<u64>>,
    /// `--cache-mb` of the KV container in the scale section.
    #[arg(long, default_value_t = 256)]
    scale_cache_mb: u64,
    /// Seconds of new claims at 500/s the scale section measures each time (default 10; 1
    /// with --quick): 500 a second, so its p99 is the 5·SECS-th slowest.
    #[arg(long)]
    scale_claim_secs: Option<f64>,
    /// Keep the scale section's store in DIR after the run, with what it holds
    /// (scale-bench.json); a later run with the same DIR measures that store again and fills
    /// only what a larger size needs.
    #[arg(long)]
    scale_data: Option<std::path::PathBuf>,
    /// The redis-server binary.
    #[arg(long, env = "REDIS_SERVER", default_value = "redis-server")]
    redis_server: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stateful-tool-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    // One thread for the load generator: the plugin and the store get the other core.
    match rt.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => {
            eprintln!("stateful-tool-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn config(args: &Args) -> anyhow::Result<Config> {
    let plugin = match &args.plugin {
        Some(p) => p.clone(),
        None => std::env::current_exe()?.with_file_name("stateful-tool"),
    };
    anyhow::ensure!(plugin.is_file(), "no plugin binary at {} (build it, or pass --plugin)", plugin.display());
    let (mut backends, mut scale_postgres) = (Vec::new(), false);
    for b in &args.backends {
        match b.as_str() {
            "kv" => backends.push(Store::Kv),
            "redis" => backends.push(Store::Redis),
            // The scale section's only: the plugin and raw sections keep to kv and redis.
            "postgres" => scale_postgres = true,
            other => anyhow::bail!("unknown backend {other:?} (kv, redis, postgres)"),
        }
    }
    let n = args.n.unwrap_or(if args.quick { 200 } else { 20_000 }).max(1);
    Ok(Config {
        plugin,
        wrapper: args.plugin_wrapper.as_deref().unwrap_or("").split_whitespace().map(str::to_owned).collect(),
        redis: args.redis_server.clone(),
        n,
        warmup: (n / 10).clamp(1, 1000),
        spawns: if args.quick { 3 } else { 20 },
        concurrency: args.concurrency.clone(),
        cap: Duration::from_secs_f64(args.max_run_secs.unwrap_or(if args.quick { 2.0 } else { 10.0 })),
        backends,
        sections: args.sections.clone().unwrap_or_else(|| {
            let all =
                ["startup", "stages", "instructions", "plugin", "raw", "kv", "cluster", "postgres", "burst", "scale"];
            all.into_iter()
                .filter(|s| !(args.quick && ["instructions", "scale"].contains(s)))
                .map(str::to_owned)
                .collect()
        }),
        stage_calls: if args.quick { 1_000 } else { 50_000 },
        stage_creates: if args.quick { 50 } else { 2_000 },
        burst_sessions: if args.quick { burst::QUICK_SESSIONS } else { burst::SESSIONS },
        callgrind_dir: args.out.parent().unwrap_or(std::path::Path::new(".")).join("callgrind"),
        scale_records: {
            let mut sizes =
                args.scale_records.clone().unwrap_or_else(|| vec![if args.quick { 2_000 } else { 1_000_000 }]);
            sizes.sort_unstable();
            sizes
        },
        scale_cache_mb: args.scale_cache_mb,
        scale_claim_secs: args.scale_claim_secs.unwrap_or(if args.quick { 1.0 } else { 10.0 }).max(0.1),
        scale_data: args.scale_data.clone(),
        scale_postgres,
    })
}

/// Runs everything; Ok(false) when some operation answered something it should not have.
async fn run(args: Args) -> anyhow::Result<bool> {
    let cfg = config(&args)?;
    let tmp = TempDir::new()?;
    let load_before = load1();
    eprintln!(
        "stateful-tool-bench: plugin {}, N={}, C={:?}, load average {load_before:.2}",
        cfg.plugin.display(),
        cfg.n,
        cfg.concurrency
    );
    // A hard bound on the whole run; children die with their guards on every exit path.
    // The scale section fills at a few thousand records a second: its share grows with the size.
    let scale_secs =
        if cfg.wants("scale") { 300 + cfg.scale_records.iter().max().copied().unwrap_or(0) / 500 } else { 0 };
    let budget = Duration::from_secs(if args.quick { 120 } else { 1800 } + scale_secs);
    let results = tokio::select! {
        r = tokio::time::timeout(budget, suite::run(&cfg, &tmp, report::progress)) => {
            r.map_err(|_| anyhow::anyhow!("the benchmark exceeded its {budget:?} budget"))??
        }
        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted"),
    };
    let targets = report::targets(&results);
    println!("{}", report::table(&results, &targets));
    if let Some(scale) = &results.scale {
        println!("{}", scale_table::table(scale));
    }
    let load_after = load1();
    let all_runs = results.plugin.iter().chain(&results.raw).chain(&results.kv);
    let foreign = all_runs.clone().map(|r| r.m.foreign_cpu_cores).fold(0.0, f64::max);
    let ok = all_runs.clone().all(|r| r.m.unexpected == 0)
        && results.burst.as_ref().is_none_or(|b| b.m.unexpected == 0 && b.answered == b.sessions);
    println!(
        "Noise: load average {load_before:.2} before, {load_after:.2} after; other processes used at most \
         {foreign:.2} cores during any run.{}",
        if ok { "" } else { " SOME OPERATIONS ANSWERED UNEXPECTEDLY (see the summary)." }
    );
    let summary = json!({
        "version": 1,
        "config": {
            "n": cfg.n, "warmup": cfg.warmup, "concurrency": cfg.concurrency, "quick": args.quick,
            "max_run_secs": cfg.cap.as_secs_f64(), "plugin": cfg.plugin.display().to_string(),
            "plugin_wrapper": cfg.wrapper,
        },
        "machine": machine(&cfg.redis),
        "noise": {"load1_before": load_before, "load1_after": load_after, "max_foreign_cpu_cores": foreign},
        "startup": results.startup,
        "plugin": results.plugin,
        "raw": results.raw,
        "kv": results.kv,
        "stages": results.stages,
        "burst": results.burst,
        "instructions": results.instructions,
        "scale": results.scale,
        "targets": targets,
        "all_outcomes_as_expected": ok,
    });
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&args.out, serde_json::to_vec_pretty(&summary)?)
        .with_context(|| format!("writing {}", args.out.display()))?;
    eprintln!("summary written to {}", args.out.display());
    Ok(ok)
}
