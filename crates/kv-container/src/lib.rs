//! The KV container: `stateful-tool kv serve` (an HTTP key-value store with conditional
//! writes, TTLs on its own clock and durable commits) and the `kv` admin commands.
//!
//! Layout: `server` is the container (routes, engine, group-commit writer, TTL purge, the
//! offline `check`/`compact`/`inventory`); `admin` is the `kv` subcommands an operator runs
//! (`serve` and `check` hand over to `server`, the rest talk to a running store or a data
//! directory).
//!
//! The public surface is this list and nothing else: the binary's `kv` subcommand
//! ([`KvCommand`], [`run`]), the router the contract tests drive in-process ([`Container`],
//! [`ServerClock`]), and what a test reads from a stopped store's data directory
//! ([`inventory`]).

#![warn(missing_docs)]

mod admin;
mod server;

pub use admin::{run, KvCommand};
pub use server::{inventory, Container, Inventory, ServerClock};
