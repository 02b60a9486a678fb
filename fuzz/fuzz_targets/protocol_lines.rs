//! Arbitrary bytes as the daemon's input stream: the line decoder and the whole session loop
//! never panic, every output line is JSON, and every session a line identifies ends exactly
//! once (`tests/it/support/oracle.rs`, the checks `tests/it/prop_protocol.rs` runs too). Lines that
//! could run a tool are pinned to the in-process `memory://` store first, so no input can make
//! the plugin connect anywhere.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stateful_tool::App;
#[allow(dead_code)]
#[path = "../../tests/it/support/oracle.rs"]
mod oracle;
use event_store::{HostClock, StoreOptions};

fuzz_target!(|data: &[u8]| {
    let mut input = Vec::with_capacity(data.len());
    for line in data.split(|&b| b == b'\n') {
        input.extend(oracle::pin_to_memory(line));
        input.push(b'\n');
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    if let Err(e) = rt.block_on(oracle::check_session_loop(App::new(HostClock::system(), StoreOptions { allow_memory: true, ..StoreOptions::default() }), &input, 61, 8)) {
        panic!("{e}");
    }
});
