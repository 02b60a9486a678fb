//! difypkg's contract, through its public API only: the spec's vectors (verdicts, checksums,
//! byte-exact signing), building a package from a tree, and validation's problems.

/// The fixtures of this crate; `fixtures.rs` reads them from here.
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

mod fixtures;

// Our own package from the fixture tree: determinism, layout, signing, tampering.
mod pack;
// Broken declarations and layouts, each problem naming its file and field.
mod validate;
// The vectors the daemon's own verifier and signer produced.
mod vectors;
