//! Test fixtures shared by the integration test modules: real servers and the real
//! binary. Each test module uses a different subset of them.
#![allow(dead_code)]

pub(crate) mod arb;
pub(crate) mod browser;
pub(crate) mod child_log;
pub(crate) mod daemon;
pub(crate) mod fake;
pub(crate) mod kv;
pub(crate) mod kv_pki;
pub(crate) mod lifecycle;
pub(crate) mod load;
pub(crate) mod oracle;
pub(crate) mod package;
pub(crate) mod plugin;
pub(crate) mod postgres;
pub(crate) mod property;
pub(crate) mod proxy;
pub(crate) mod redis;
pub(crate) mod redis_ha;
pub(crate) mod redis_tls;
pub(crate) mod scenarios;
pub(crate) mod store_time;
