//! proptest strategies for what the daemon, workflow nodes and LLM agents may send: JSON of
//! any shape, biased towards the field names and edge values the tools look at.

use proptest::prelude::*;
use serde_json::{Map, Value};

/// Numbers as JSON text (kept verbatim: `arbitrary_precision`), including the awkward ones.
pub(crate) fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| f.to_string()),
        (-3i64..90_000).prop_map(|n| n.to_string()),
        prop::sample::select(vec![
            "0",
            "-0",
            "1.0",
            "1.5",
            "86400",
            "86400.0",
            "86401",
            "4294967295",
            "4294967296",
            "1e3",
            "1E400",
            "-1e400",
            "18446744073709551616",
            "1e-400",
            "0.30000000000000004",
            "123456789012345678901234567890",
        ])
        .prop_map(str::to_owned),
    ]
    .prop_map(|text| serde_json::from_str(&text).expect("valid JSON number"))
}

/// Strings: short printable, any Unicode (control characters included), long, numeric-looking.
pub(crate) fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[A-Za-z0-9._-]{0,12}",
        2 => any::<String>(),
        1 => "\\PC{0,300}",
        1 => "[\\x00-\\x1f\\x7f\\u{80}-\\u{9f}a ]{0,8}",
        1 => prop::sample::select(vec![
            "created", "updated", "closed", "completed", "failed", "processing", " 5 ", "NaN", "inf", "-1", "1e3",
            "..", ".", "/", "%2F", "evt_x", "a~b", "🎉", "\u{0}", "\u{2028}",
        ])
        .prop_map(str::to_owned),
        1 => (1usize..=300).prop_map(|n| "x".repeat(n)),
    ]
}

/// Any JSON value, a few levels deep.
pub(crate) fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((string(), inner), 0..4).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// Tool parameters: the names the tools read, with values of any type, plus strangers.
pub(crate) fn params() -> impl Strategy<Value = Map<String, Value>> {
    let name = prop_oneof![
        8 => prop::sample::select(vec![
            "event_id", "event_type", "payload", "lease_seconds", "status", "attempt", "result",
        ])
        .prop_map(str::to_owned),
        1 => string(),
    ];
    let value = prop_oneof![
        3 => string().prop_map(Value::String),
        1 => number(),
        1 => json(),
    ];
    prop::collection::vec((name, value), 0..8).prop_map(|kv| kv.into_iter().collect())
}

/// Provider credentials that never point anywhere but the in-process store: only the
/// fields that change tool behaviour vary.
pub(crate) fn memory_credentials() -> impl Strategy<Value = Value> {
    let opt = |s: BoxedStrategy<Value>| prop_oneof![Just(None), s.prop_map(Some)];
    (
        opt(string().prop_map(Value::String).boxed()),
        opt(prop_oneof![string().prop_map(Value::String), json()].boxed()),
        opt(prop_oneof![string().prop_map(Value::String), number()].boxed()),
    )
        .prop_map(|(namespace, event_types, retention)| {
            let mut m = Map::new();
            m.insert("kv_url".into(), Value::String("memory://".into()));
            for (k, v) in [("namespace", namespace), ("event_types", event_types), ("retention", retention)] {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            Value::Object(m)
        })
}

/// Payload text as callers spell it: JSON compact, pretty, with every non-ASCII character or
/// every `/` escaped (Python's `json.dumps` and some webhook senders), JSON-like fragments
/// (mostly not JSON), and any text.
pub(crate) fn payload_text() -> impl Strategy<Value = String> {
    let spelled = (json(), 0u8..4).prop_map(|(v, spelling)| match spelling {
        0 => v.to_string(),
        1 => serde_json::to_string_pretty(&v).expect("a Value serialises"),
        2 => v.to_string().chars().fold(String::new(), |mut out, c| {
            if c.is_ascii() {
                out.push(c);
            } else {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
            out
        }),
        // `/` stands only inside strings in JSON text, so escaping every one keeps it JSON.
        _ => v.to_string().replace('/', "\\/"),
    });
    prop_oneof![
        4 => spelled,
        2 => "[\\[\\]{}\",:0-9eE.+ \\\\/ubfnrt-]{0,40}",
        1 => string(),
    ]
}
