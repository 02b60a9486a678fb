//! Building blocks of `stateful-tool-bench`: processes, wire clients, load loops, report.

pub mod burst;
pub mod cluster;
pub mod config;
pub mod instructions;
pub mod measure;
pub mod plugin;
pub mod postgres;
pub mod procs;
pub mod raw;
pub mod report;
pub mod results;
pub mod stages;
pub mod started;
pub mod suite;
pub mod wire;
pub mod workload;
