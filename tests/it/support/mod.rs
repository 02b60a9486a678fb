//! Test fixtures shared by the integration test modules: real servers and the real
//! binary. Each test module uses a different subset of them.
#![allow(dead_code)]

pub mod arb;
pub mod browser;
pub mod child_log;
pub mod daemon;
pub mod fake;
pub mod kv;
pub mod kv_pki;
pub mod lifecycle;
pub mod load;
pub mod oracle;
pub mod package;
pub mod plugin;
pub mod postgres;
pub mod property;
pub mod proxy;
pub mod redis;
pub mod redis_ha;
pub mod redis_tls;
pub mod scenarios;
pub mod store_time;
