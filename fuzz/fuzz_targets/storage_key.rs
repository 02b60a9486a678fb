//! Arbitrary (namespace, event id) pairs: the key of a valid pair is one URL-unreserved path
//! segment and parses back to exactly that pair (so no two pairs share a key).
#![no_main]

use libfuzzer_sys::fuzz_target;
use stateful_tool::store::key::{
    is_key_charset_safe, parse_storage_key, storage_key, validate_event_id, validate_namespace,
};

fuzz_target!(|input: (Option<String>, String)| {
    let (ns, id) = input;
    if validate_event_id(&id).is_err() || ns.as_deref().is_some_and(|n| validate_namespace(n).is_err()) {
        return;
    }
    let key = storage_key(ns.as_deref(), &id);
    assert!(is_key_charset_safe(&key), "{key}");
    assert!(key != "." && key != ".." && key.len() <= 1024, "{key}");
    assert_eq!(parse_storage_key(&key), Some((ns, id)), "{key}");
});
