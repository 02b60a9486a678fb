//! The KV container: `stateful-tool kv serve` (an HTTP key-value store with conditional
//! writes, TTLs on its own clock and durable commits) and the `kv` admin commands.

pub mod admin;
pub mod server;
