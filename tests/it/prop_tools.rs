//! Property tests (proptest, where coverage-guided fuzzing needs a nightly toolchain) of the
//! tool layer: arbitrary parameters and credentials never panic, invalid input is
//! `param_invalid` and never touches the store, valid input always does; the storage-key
//! encoding is charset-safe, injective and round-trips through `parse_storage_key`; a
//! payload's canonical text does not depend on which writer made it.

use crate::support::oracle::{self, CountingStore};
use crate::support::{arb, property};
use event_store::key::{parse_storage_key, storage_key, validate_event_id};
use event_store::EventStore;
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use stateful_tool::{Answer, ErrorClass, Params, Settings, Tool, ToolError};

/// Failing cases proptest found, replayed before every run.
const REGRESSIONS: &str = "tests/it/proptest-regressions/prop_tools.txt";

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// Runs the tool a request names, as dispatch does (an unknown name never reaches a store).
async fn invoke<S: EventStore>(
    name: &str,
    store: &S,
    settings: &Settings,
    params: &serde_json::Map<String, serde_json::Value>,
) -> Result<Answer, ToolError> {
    // As the daemon sends them: the parameters' JSON text, read as dispatch reads it.
    let text = serde_json::Value::Object(params.clone()).to_string();
    let params = Params::parse(&text).expect("an object's text");
    Tool::from_name(name)?.invoke(store, settings, &params).await
}

fn tool() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(Tool::ALL.map(Tool::name).to_vec()).prop_map(str::to_owned),
        1 => arb::string(),
    ]
}

/// Against a store that is down: an answer is `param_invalid` exactly when the store was not
/// touched; anything that passed validation reached the store (and became upstream_error).
#[test]
fn invalid_parameters_never_reach_the_store() {
    let settings = Settings::from_credentials(&json!({"kv_url": "memory://"})).unwrap();
    property::check(
        REGRESSIONS,
        "invalid_parameters_never_reach_the_store",
        1500,
        &(tool(), arb::params()),
        |(tool, params)| {
            let store = CountingStore::down();
            let err = block_on(invoke(&tool, &store, &settings, &params)).expect_err("the store is down");
            oracle::check_error_against_down_store(&err, store.calls())
                .map_err(|e| TestCaseError::fail(format!("{tool} {params:?}: {e}")))?;
            Ok(())
        },
    );
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
    property::check(
        REGRESSIONS,
        "random_call_sequences_give_documented_answers",
        300,
        &(arb::memory_credentials(), prop::collection::vec(call, 1..12)),
        |(creds, calls)| {
            let Ok(settings) = Settings::from_credentials(&creds) else {
                return Ok(());
            };
            let store = CountingStore::working();
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
        },
    );
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
    property::check(REGRESSIONS, "arbitrary_credentials_are_settings_or_param_invalid", 1000, &creds, |c| {
        if let Err(e) = Settings::from_credentials(&c) {
            prop_assert_eq!(e.class, ErrorClass::ParamInvalid);
        }
        Ok(())
    });
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

/// A payload's canonical text (what its fingerprint hashes) is the same whether the fast pass
/// or the serde writer makes it, for JSON in any spelling and for what is not JSON.
#[test]
fn canonical_text_does_not_depend_on_the_writer() {
    property::check(
        REGRESSIONS,
        "canonical_text_does_not_depend_on_the_writer",
        4000,
        &arb::payload_text(),
        |payload| {
            oracle::check_canonical(&payload).map_err(TestCaseError::fail)?;
            Ok(())
        },
    );
}

/// The key of any valid id is one safe URL path segment, within the KV container's key rules,
/// and decodes back to exactly its (namespace, id).
#[test]
fn storage_keys_are_safe_and_round_trip() {
    property::check(
        REGRESSIONS,
        "storage_keys_are_safe_and_round_trip",
        4000,
        &(namespace(), event_id()),
        |(ns, id)| {
            oracle::check_storage_key(ns.as_deref(), &id).map_err(TestCaseError::fail)?;
            Ok(())
        },
    );
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
    property::check(
        REGRESSIONS,
        "storage_keys_are_injective",
        4000,
        &(pair(), prop_oneof![pair(), lookalike]),
        |((ns1, id1), (ns2, id2))| {
            let (k1, k2) = (storage_key(ns1.as_deref(), &id1), storage_key(ns2.as_deref(), &id2));
            prop_assert_eq!(k1 == k2, (ns1, id1) == (ns2, id2), "{} / {}", k1, k2);
            Ok(())
        },
    );
}

/// Validation accepts exactly 1–255 bytes of UTF-8 without control characters.
#[test]
fn event_id_validation_matches_its_rule() {
    property::check(REGRESSIONS, "event_id_validation_matches_its_rule", 3000, &arb::string(), |id| {
        let expected = (1..=255).contains(&id.len()) && !id.chars().any(char::is_control);
        prop_assert_eq!(validate_event_id(&id).is_ok(), expected, "{:?}", id);
        Ok(())
    });
}

/// Keys that no valid (namespace, id) produces are refused by the parser (it never invents one).
#[test]
fn parse_storage_key_only_accepts_what_storage_key_makes() {
    property::check(
        REGRESSIONS,
        "parse_storage_key_only_accepts_what_storage_key_makes",
        3000,
        &"(evt)?[_~]{0,2}[A-Za-z0-9._~-]{0,20}",
        |key| {
            if let Some((ns, id)) = parse_storage_key(&key) {
                prop_assert_eq!(storage_key(ns.as_deref(), &id), key);
            }
            Ok(())
        },
    );
}
