//! Arbitrary JSON as tool parameters: never a panic; `param_invalid` exactly when the store
//! was not touched (the store here is down, so anything that passed validation reached it).
#![no_main]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use stateful_tool::error::ErrorClass;
use stateful_tool::store::{Clock, Created, Current, EventStore, Probe, StoreClock, StoreError, Swapped, Version};
use stateful_tool::tools::{self, Settings};

struct Down {
    calls: AtomicUsize,
    clock: StoreClock,
}

impl Down {
    fn fail(&self) -> StoreError {
        self.calls.fetch_add(1, Ordering::SeqCst);
        StoreError::Unreachable("fuzz".into(), "down".into())
    }
}

impl EventStore for Down {
    async fn create(&self, _: &str, _: &[u8], _: Duration, _: Duration) -> Result<Created, StoreError> {
        Err(self.fail())
    }
    async fn read(&self, _: &str, _: Duration) -> Result<Option<Current>, StoreError> {
        Err(self.fail())
    }
    async fn swap(&self, _: &str, _: &Version, _: &[u8], _: Duration, _: Duration) -> Result<Swapped, StoreError> {
        Err(self.fail())
    }
    async fn release(&self, _: &str, _: &str, _: Option<&[u8]>, _: Duration, _: Duration) -> Result<bool, StoreError> {
        Err(self.fail())
    }
    async fn probe(&self) -> Result<Probe, StoreError> {
        Ok(Probe::default())
    }
    fn clock(&self) -> &StoreClock {
        &self.clock
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let Ok(Value::Object(params)) = serde_json::from_slice::<Value>(rest) else { return };
    let tool = tools::Tool::ALL[which as usize % tools::Tool::ALL.len()];
    let settings = Settings::from_credentials(&json!({"kv_url": "memory://"})).unwrap();
    let store = Down { calls: AtomicUsize::new(0), clock: StoreClock::new(Clock::system()) };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let err = rt.block_on(tool.invoke(&store, &settings, &params)).expect_err("the store is down");
    let untouched = store.calls.load(Ordering::SeqCst) == 0;
    assert_eq!(err.class == ErrorClass::ParamInvalid, untouched, "{} {params:?}: {err:?}", tool.name());
});
