//! Property tests (proptest, where coverage-guided fuzzing needs a nightly toolchain) of the
//! tool layer: arbitrary parameters and credentials never panic, invalid input is
//! `param_invalid` and never touches the store, valid input always does; the storage-key
//! encoding is charset-safe, injective and round-trips through `parse_storage_key`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::arb;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Map, Value};
use stateful_tool::error::ErrorClass;
use stateful_tool::store::key::{is_key_charset_safe, parse_storage_key, storage_key, validate_event_id};
use stateful_tool::store::memory::MemoryStore;
use stateful_tool::store::{Clock, Created, Current, EventStore, Probe, StoreClock, StoreError, Swapped, Version};
use stateful_tool::tools::{self, Settings};

/// Counts every store call; answers from `inner`, or fails every call when `inner` is None.
struct Counting {
    inner: Option<MemoryStore>,
    calls: AtomicUsize,
    clock: StoreClock,
}

impl Counting {
    fn new(working: bool) -> Counting {
        let inner = working.then(|| MemoryStore::new(Clock::system(), 0));
        Counting { inner, calls: AtomicUsize::new(0), clock: StoreClock::new(Clock::system()) }
    }
    fn down() -> StoreError {
        StoreError::Unreachable("test".into(), "down".into())
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl EventStore for Counting {
    async fn create(&self, key: &str, value: &[u8], ttl: Duration, t: Duration) -> Result<Created, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match &self.inner {
            Some(s) => s.create(key, value, ttl, t).await,
            None => Err(Self::down()),
        }
    }
    async fn read(&self, key: &str, t: Duration) -> Result<Option<Current>, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match &self.inner {
            Some(s) => s.read(key, t).await,
            None => Err(Self::down()),
        }
    }
    async fn swap(
        &self,
        key: &str,
        expected: &Version,
        value: &[u8],
        ttl: Duration,
        t: Duration,
    ) -> Result<Swapped, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match &self.inner {
            Some(s) => s.swap(key, expected, value, ttl, t).await,
            None => Err(Self::down()),
        }
    }
    async fn release(
        &self,
        key: &str,
        claim_id: &str,
        restore: Option<&[u8]>,
        ttl: Duration,
        t: Duration,
    ) -> Result<bool, StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match &self.inner {
            Some(s) => s.release(key, claim_id, restore, ttl, t).await,
            None => Err(Self::down()),
        }
    }
    async fn probe(&self) -> Result<Probe, StoreError> {
        Ok(Probe::default())
    }
    fn clock(&self) -> &StoreClock {
        match &self.inner {
            Some(s) => s.clock(),
            None => &self.clock,
        }
    }
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() })
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// Runs the tool a request names, as dispatch does (an unknown name never reaches a store).
async fn invoke<S: EventStore>(
    name: &str,
    store: &S,
    settings: &Settings,
    params: &serde_json::Map<String, serde_json::Value>,
) -> Result<tools::Answer, stateful_tool::error::ToolError> {
    tools::Tool::from_name(name)?.invoke(store, settings, params).await
}

fn tool() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(tools::Tool::ALL.map(tools::Tool::name).to_vec()).prop_map(str::to_owned),
        1 => arb::string(),
    ]
}

/// Against a store that is down: an answer is `param_invalid` exactly when the store was not
/// touched; anything that passed validation reached the store (and became upstream_error).
#[test]
fn invalid_parameters_never_reach_the_store() {
    let settings = Settings::from_credentials(&json!({"kv_url": "memory://"})).unwrap();
    runner(1500)
        .run(&(tool(), arb::params()), |(tool, params)| {
            let store = Counting::new(false);
            let err = block_on(invoke(&tool, &store, &settings, &params)).expect_err("the store is down");
            let untouched = store.calls() == 0;
            prop_assert_eq!(
                err.class == ErrorClass::ParamInvalid,
                untouched,
                "{} {:?}: {:?} after {} store calls",
                tool,
                params,
                err,
                store.calls()
            );
            if !untouched {
                prop_assert_eq!(err.class, ErrorClass::UpstreamError);
            }
            prop_assert!(!err.message.is_empty());
            Ok(())
        })
        .unwrap();
}

/// Against a working store, a random sequence of calls with random settings: every answer is
/// one of the documented outcomes or error classes (never upstream_error: the store works),
/// and a `param_invalid` call made no store call.
#[test]
fn random_call_sequences_give_documented_answers() {
    let outcomes =
        ["accepted", "duplicate", "found", "not_found", "completed", "failed", "already_completed", "already_failed"];
    let ids = prop::sample::select(vec!["E1", "E2", "a/b", "🎉"]);
    let call = (tool(), arb::params(), ids, any::<bool>());
    runner(300)
        .run(&(arb::memory_credentials(), prop::collection::vec(call, 1..12)), |(creds, calls)| {
            let Ok(settings) = Settings::from_credentials(&creds) else {
                return Ok(());
            };
            let store = Counting::new(true);
            for (tool, mut params, id, fix_id) in calls {
                // Half the calls reuse a few ids (and a configured type) so records build up.
                if fix_id {
                    params.insert("event_id".into(), json!(id));
                    params.insert("event_type".into(), json!(settings.event_types[0]));
                }
                let before = store.calls();
                match block_on(invoke(&tool, &store, &settings, &params)) {
                    Ok(a) => {
                        let v = a.to_value();
                        prop_assert!(outcomes.contains(&v["outcome"].as_str().unwrap_or("")), "{v}")
                    }
                    Err(e) if e.class == ErrorClass::ParamInvalid => prop_assert_eq!(store.calls(), before),
                    Err(e) => prop_assert!(
                        matches!(e.class, ErrorClass::Conflict | ErrorClass::NotFound),
                        "{tool} {params:?}: {e:?}"
                    ),
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Credentials of any shape parse or are `param_invalid`; never a panic.
#[test]
fn arbitrary_credentials_are_settings_or_param_invalid() {
    let creds = prop_oneof![
        arb::json(),
        arb::memory_credentials(),
        prop::collection::vec(
            (
                prop::sample::select(vec![
                    "kv_url",
                    "kv_token",
                    "namespace",
                    "event_types",
                    "retention",
                    "default_lease_seconds"
                ]),
                arb::json()
            ),
            0..6
        )
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect::<Map<_, _>>())),
    ];
    runner(1000)
        .run(&creds, |c| {
            if let Err(e) = Settings::from_credentials(&c) {
                prop_assert_eq!(e.class, ErrorClass::ParamInvalid);
            }
            Ok(())
        })
        .unwrap();
}

fn event_id() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z0-9._-]{1,40}",
        "[A-Za-z0-9._~/%: -]{1,40}",
        "\\PC{1,80}",
        "[\\PC&&[^\\x00-\\x7f]]{1,63}",
        "[A-Za-z0-9+/=]{1,40}",
    ]
    .prop_filter("a valid id", |id| validate_event_id(id).is_ok())
}

fn namespace() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        Just(None),
        "[A-Za-z0-9._-]{1,64}".prop_filter("not a dot segment", |n| n != "." && n != "..").prop_map(Some)
    ]
}

/// The key of any valid id is one safe URL path segment, within the KV container's key rules,
/// and decodes back to exactly its (namespace, id).
#[test]
fn storage_keys_are_safe_and_round_trip() {
    runner(4000)
        .run(&(namespace(), event_id()), |(ns, id)| {
            let key = storage_key(ns.as_deref(), &id);
            prop_assert!(is_key_charset_safe(&key), "{key}");
            prop_assert!(key.bytes().all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b)), "{key}");
            prop_assert!(!key.contains('/') && !key.contains('%') && !key.contains(':'), "{key}");
            prop_assert!(key != "." && key != ".." && key.starts_with("evt"), "{key}");
            prop_assert!((4..=1024).contains(&key.len()), "{key}");
            prop_assert_eq!(parse_storage_key(&key), Some((ns.clone(), id.clone())), "{}", key);
            Ok(())
        })
        .unwrap();
}

/// Two different (namespace, id) pairs never share a key, including ids built to look like
/// another id's encoding.
#[test]
fn storage_keys_are_injective() {
    let pair = || (namespace(), event_id());
    let lookalike = (namespace(), event_id()).prop_map(|(ns, id)| {
        // The base64url text of an id is itself a plain id: the two must stay apart.
        use base64::Engine;
        (ns, base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes()))
    });
    runner(4000)
        .run(&(pair(), prop_oneof![pair(), lookalike]), |((ns1, id1), (ns2, id2))| {
            let (k1, k2) = (storage_key(ns1.as_deref(), &id1), storage_key(ns2.as_deref(), &id2));
            prop_assert_eq!(k1 == k2, (ns1, id1) == (ns2, id2), "{} / {}", k1, k2);
            Ok(())
        })
        .unwrap();
}

/// Validation accepts exactly 1–255 bytes of UTF-8 without control characters.
#[test]
fn event_id_validation_matches_its_rule() {
    runner(3000)
        .run(&arb::string(), |id| {
            let expected = (1..=255).contains(&id.len()) && !id.chars().any(char::is_control);
            prop_assert_eq!(validate_event_id(&id).is_ok(), expected, "{:?}", id);
            Ok(())
        })
        .unwrap();
}

/// Keys that no valid (namespace, id) produces are refused by the parser (it never invents one).
#[test]
fn parse_storage_key_only_accepts_what_storage_key_makes() {
    runner(3000)
        .run(&"(evt)?[_~]{0,2}[A-Za-z0-9._~-]{0,20}", |key| {
            if let Some((ns, id)) = parse_storage_key(&key) {
                prop_assert_eq!(storage_key(ns.as_deref(), &id), key);
            }
            Ok(())
        })
        .unwrap();
}
