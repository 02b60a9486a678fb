//! Test fixtures shared by the integration tests: real servers and the real binary.
#![allow(dead_code)]

pub mod fake;
pub mod lifecycle;
pub mod plugin;
pub mod redis;
pub mod scenarios;
