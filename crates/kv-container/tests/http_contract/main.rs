//! The KV container's HTTP contract, on its router in-process (`oneshot`, no socket) over a
//! real store in a temporary directory, on a clock the tests move: create-if-absent,
//! compare-and-swap by ETag, TTLs and deadlines by the store's clock, auth, error bodies.

mod support;

mod auth;
mod errors;
mod protocol;
mod time;
