//! The integration tests: one crate, so the world is linked once. Each module drives real
//! processes (the plugin binary, our KV container, redis-server) on 127.0.0.1 ephemeral ports.
//! Run one area with `cargo test --test it <module>::`.

// Shared fixtures: servers, the plugin over pipes, fault proxies, scenarios.
mod support;

// The store backends through the real binary: outcomes, races, lifecycle, keys, retention.
mod backend_kv;
mod backend_postgres;
mod backend_redis;
// Redis Cluster and Sentinel, PostgreSQL standbys, built by the tests: scenarios, validation,
// failover under load.
mod postgres_commit_wait;
mod postgres_failover;
mod postgres_validate;
mod redis_cluster;
mod redis_ha_tls;
mod redis_persistence;
mod redis_sentinel;
mod redis_tls;

// Faults: a store that crashes, is slow or loses answers; a plugin killed mid-flight.
mod chaos_plugin_kill;
mod chaos_slow_store;
mod chaos_store_crash;
mod exactly_once;
mod held_requests;

// The KV container on its own: protocol, auth, limits, TTL, durability, hostile clients.
mod kv_auth;
mod kv_check;
mod kv_compact;
mod kv_concurrency;
mod kv_connections;
mod kv_damage;
mod kv_defences;
mod kv_durability;
mod kv_files;
mod kv_fsync;
mod kv_limits;
mod kv_namespaces;
mod kv_protocol;
mod kv_rotation;
mod kv_tls;
mod kv_ttl;

// Operating it: the daemon launch log, metrics, inspection, backups, service files.
mod daemon_logs;
mod daemon_quiet;
mod deploy;
mod kv_metrics;
mod kv_ops;
// The status page in a real browser (headless Chromium over WebDriver), the alert rules
// (promtool) and the Grafana dashboard checked against a real `/metrics`.
mod kv_alerts;
mod kv_ui;

// The runtime protocol: stdio sessions, the spec's transcripts, remote TCP, serverless HTTP,
// and the Python shim the daemon starts; what Dify's callers make of our answers, and what
// an admin and a model see of the plugin in Dify.
mod dify_callers;
mod dify_face;
mod dify_screens;
mod protocol;
mod protocol_vectors;
mod remote;
mod serverless;
mod shim;
mod store_client_limits;

// The trigger package: dedup at the door (both backends), the captured daemon lines replayed.
mod trigger_answers;
mod trigger_captures;
mod trigger_door;
mod trigger_start;

// The signed package through the binary and `make package`, the trigger package, the
// marketplace check (difypkg's own contract is tested in crates/difypkg/tests/).
mod marketplace;
mod package_cli;
mod package_cli_keys;
mod package_cli_script;
mod package_trigger;

// Property tests (proptest) of the line decoder, tool parameters and KV request handling.
mod prop_kv;
mod prop_protocol;
mod prop_tools;

// A new user's first hour: `make run`/`make test` scripts, first-contact messages, help.
mod first_run;
mod first_run_make;

// The long soak (`--ignored`, run by CI on release). The bench's smoke run is the bench
// crate's own test (crates/bench/tests/quick.rs).
mod soak;
