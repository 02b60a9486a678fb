//! The store layer: the few atomic operations the tools need, one module per backend.
//!
//! Every claim is ONE atomic store operation (`create`); every later transition is a
//! compare-and-swap (`swap`) against the version that was read, so two deliveries can never
//! both win, and a late writer can never overwrite a newer state.

mod any;
mod cache;
pub mod canonical;
mod canonical_fast;
mod canonical_order;
mod clock;
mod contract;
mod error;
pub mod hosts;
pub mod json_text;
pub mod key;
mod kv_client;
mod kv_http;
pub mod kv_tls;
pub mod kv_wire;
/// The in-process store, a test double: only with the `testkit` feature, never in the plugin.
#[cfg(feature = "testkit")]
pub mod memory;
pub mod postgres;
pub mod record;
mod redis;
pub mod url;

pub use cache::{StoreCache, StoreConfig, StoreOptions};
#[cfg(feature = "testkit")]
pub use clock::ClockHand;
pub use clock::{HostClock, StoreClock, StoreDeadline};
pub use contract::{Created, Current, EventStore, Probe, Rollback, Swapped, Version, Write};
pub use error::{Cause, StoreError};
