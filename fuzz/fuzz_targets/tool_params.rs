//! Arbitrary text as tool parameters, read as dispatch reads them: never a panic; `param_invalid` exactly when the store
//! was not touched (the store here is down, so anything that passed validation reached it).
//! The check is `tests/it/support/oracle.rs`'s, shared with `tests/it/prop_tools.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
#[allow(dead_code)]
#[path = "../../tests/it/support/oracle.rs"]
mod oracle;

use oracle::CountingStore;
use stateful_tool::{Params, Settings, Tool};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let Ok(params) = Params::parse(text) else { return };
    let tool = Tool::ALL[which as usize % Tool::ALL.len()];
    let settings = Settings::from_credentials(&json!({"kv_url": "memory://"})).unwrap();
    let store = CountingStore::down();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let err = rt.block_on(tool.invoke(&store, &settings, &params)).expect_err("the store is down");
    if let Err(e) = oracle::check_error_against_down_store(&err, store.calls()) {
        panic!("{} {params:?}: {e}", tool.name());
    }
});
