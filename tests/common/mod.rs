//! Helpers shared by the integration tests; a test file pulls them in with `mod common;`.
// Each test binary uses a different subset of the helpers.
#![allow(dead_code)]

pub mod kv;
