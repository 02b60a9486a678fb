//! Both canonical writers (the fast pass and the serde writer) against the `Value`-based form they replaced, input by input.

use serde_json::Value;

use super::canonical_json;

/// The previous implementation, kept as the reference: parse into `Value`, write sorted.
fn reference(payload: &str) -> Option<Vec<u8>> {
    fn write(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                out.push(b'{');
                for (i, (k, val)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut *out, k).unwrap();
                    out.push(b':');
                    write(val, out);
                }
                out.push(b'}');
            }
            Value::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(item, out);
                }
                out.push(b']');
            }
            scalar => serde_json::to_writer(&mut *out, scalar).unwrap(),
        }
    }
    let v: Value = serde_json::from_str(payload).ok()?;
    let mut out = Vec::new();
    write(&v, &mut out);
    Some(out)
}

fn corpus() -> Vec<String> {
    let mut c: Vec<String> = [
        r#"{"b":1,"a":{"y":[1,2,{"z":null,"c":true}],"x":"s"}}"#,
        "{ \"b\": {\"x\": \"s\", \"y\": [1, 2]},\n \"a\": 1 }",
        r#"{"a":1,"a":2,"b":0,"a":3}"#,
        r#"{"":0,"é":1,"e":2,"E":3,"😀":4,"\u00e9":5,"a\"b":6,"a\\b":7,"a\nb":8,"\u0000":9}"#,
        r#"[1.50,1e5,1E+05,-0,-0.0,0,18446744073709551615,18446744073709551616,-9223372036854775808,-9223372036854775809]"#,
        r#"{"id":12345678901234567890123,"f":3.141592653589793238462643383279,"e":-1.0e-400,"big":1e400}"#,
        r#""just a string with \"escapes\" and \u263a and \ud83d\ude00""#,
        r#""\u007f\u001f\/\b\f\n\r\t""#,
        "42",
        "-7",
        "true",
        "null",
        "[]",
        "{}",
        "  {\"a\" : [ ] , \"b\" : { } }  \n",
        r#"{"$serde_json::private::Number":"12"}"#,
        r#"{"$serde_json::private::Number":"1.50"}"#,
        r#"{"$serde_json::private::Number":"x"}"#,
        r#"{"$serde_json::private::Number":12}"#,
        r#"{"$serde_json::private::Number":"12","b":1}"#,
        r#"{"a":1,"$serde_json::private::Number":"12"}"#,
        r#"{"nested":{"$serde_json::private::Number":"007"}}"#,
        r#"[{"$serde_json::private::Number":"-"},{"$serde_json::private::Number":"-007"}]"#,
        r#"[{"$serde_json::private::Number":"-12"},{"$serde_json::private::Number":"-0"},{"$serde_json::private::Number":"0"}]"#,
        r#"[{"$serde_json::private::Number":"1e5"},{"$serde_json::private::Number":" 1"},{"$serde_json::private::Number":""}]"#,
        // Not JSON: hashed as text by both.
        "",
        " ",
        "{",
        r#"{"a":1,}"#,
        "[1,2]x",
        "01",
        "1.",
        "NaN",
        r#""\ud800""#,
        r#"{"a":"\x"}"#,
        "'single'",
        "plain text payload",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for depth in [126, 127, 128, 129, 200] {
        c.push(format!("{}{}", "[".repeat(depth), "]".repeat(depth)));
        c.push(format!("{}1{}", "{\"k\":".repeat(depth), "}".repeat(depth)));
    }
    c
}

#[test]
fn same_canonical_text_as_the_value_based_form() {
    for payload in corpus() {
        let (ours, theirs) = (canonical_json(&payload), reference(&payload));
        assert_eq!(
            ours.as_deref().map(String::from_utf8_lossy),
            theirs.as_deref().map(String::from_utf8_lossy),
            "payload {payload:?}"
        );
    }
}

/// Numbers below `n` from a fixed seed (xorshift64): the same documents on every run.
fn draws(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

#[test]
fn same_canonical_text_for_generated_documents() {
    // A deterministic pseudo-random mix of objects, arrays, repeated keys and scalars.
    let mut next = draws(0x2545_f491_4f6c_dd1d);
    fn gen(next: &mut dyn FnMut(u64) -> u64, depth: u32) -> String {
        let keys = ["a", "b", "B", "é", "a b", "\\\"q\\\"", "\\u00e9", "k1", "k10", "k2"];
        let scalars =
            ["0", "-1", "2.50", "1e-7", "true", "false", "null", "\"s\"", "\"\\n\\u0001\"", "123456789012345678901"];
        match if depth > 4 { 0 } else { next(4) } {
            0 | 1 => scalars[next(scalars.len() as u64) as usize].to_string(),
            2 => {
                let items: Vec<String> = (0..next(4)).map(|_| gen(next, depth + 1)).collect();
                format!("[{}]", items.join(" , "))
            }
            _ => {
                let entries: Vec<String> = (0..next(6))
                    .map(|_| format!("\"{}\": {}", keys[next(keys.len() as u64) as usize], gen(next, depth + 1)))
                    .collect();
                format!("{{{}}}", entries.join(","))
            }
        }
    }
    for _ in 0..3000 {
        let doc = gen(&mut next, 0);
        assert_eq!(canonical_json(&doc), reference(&doc), "document {doc}");
    }
}

/// The README's list of which number spellings are the same event: the exponent marker is
/// normalised (`e`, `E`, `e+`, `E+`), every digit is kept as written.
#[test]
fn number_spellings_are_the_same_event_only_as_documented() {
    let c = |s: &str| String::from_utf8(canonical_json(&format!("[{s}]")).unwrap()).unwrap();
    for same in [["1e2", "1E2"], ["1e2", "1e+2"], ["1E+2", "1e2"], ["1.5E-3", "1.5e-3"]] {
        assert_eq!(c(same[0]), c(same[1]), "{same:?}");
    }
    for differ in
        [["1e2", "100"], ["1.0", "1"], ["-0", "0"], ["0.10", "0.1"], ["10e1", "1e2"], ["1e02", "1e2"], ["1.0e2", "1e2"]]
    {
        assert_ne!(c(differ[0]), c(differ[1]), "{differ:?}");
    }
    assert_eq!(c("1e2"), "[1e+2]");
}

/// Deterministic documents in the shapes webhook bodies take (and some they rarely do):
/// members in any order, repeated names, white space, escapes of every kind in values.
fn webhook_like(count: usize) -> Vec<String> {
    let mut next = draws(0x9e37_79b9_7f4a_7c15);
    fn gen(next: &mut dyn FnMut(u64) -> u64, depth: u32) -> String {
        let names = ["id", "type", "data", "amount", "a", "B", "é", "😀", "", "k1", "k10", "k2", "id"];
        let scalars = [
            "0",
            "-0",
            "-0.0",
            "7",
            "-12",
            "1.50",
            "19.90",
            "0.1",
            "123456789012345678901234567890",
            "3.14159265358979323846",
            "1e3",
            "true",
            "false",
            "null",
            r#""""#,
            r#""plain text""#,
            r#""a \"quoted\" word""#,
            r#""back\\slash""#,
            r#""line\nbreak\ttab\r\b\f""#,
            r#""\/path\/to""#,
            r#""caf\u00e9 \u00E9""#,
            r#""\u0041\u0000\u001f\u007f""#,
            r#""\ud83d\ude00 and \uD83D\uDE00""#,
            r#""\u0022\u005c""#,
            r#""raw é 😀 ~""#,
            r#""\ud800""#,
            r#""\x""#,
        ];
        let space = [" ", "", "", "\n  ", "\t"];
        let sp = |next: &mut dyn FnMut(u64) -> u64| space[next(space.len() as u64) as usize];
        match if depth > 4 { 0 } else { next(4) } {
            0 | 1 => scalars[next(scalars.len() as u64) as usize].to_string(),
            2 => {
                let items: Vec<String> = (0..next(4)).map(|_| gen(next, depth + 1)).collect();
                format!("[{}{}]", items.join(&format!(",{}", sp(next))), sp(next))
            }
            _ => {
                let entries: Vec<String> = (0..next(6))
                    .map(|_| {
                        let name = names[next(names.len() as u64) as usize];
                        format!("{}\"{name}\"{}:{}{}", sp(next), sp(next), sp(next), gen(next, depth + 1))
                    })
                    .collect();
                format!("{{{}{}}}", entries.join(","), sp(next))
            }
        }
    }
    (0..count).map(|_| gen(&mut next, 0)).collect()
}

#[test]
fn the_fast_pass_writes_what_the_serde_writer_writes() {
    let docs: Vec<String> = corpus().into_iter().chain(webhook_like(5000)).collect();
    let mut answered = 0;
    for doc in &docs {
        if let Some(fast) = crate::canonical_fast::canonical(doc) {
            answered += 1;
            let serde = super::canonical_json_by_serde(doc).map(String::from_utf8);
            assert_eq!(Some(String::from_utf8(fast).unwrap()), serde.ok().map(Result::unwrap), "document {doc}");
        }
        assert_eq!(canonical_json(doc), reference(doc), "document {doc}");
    }
    // The fast pass must carry the ordinary case, or it is only a cost.
    assert!(answered * 2 > docs.len(), "the fast pass answered {answered} of {}", docs.len());
}

#[test]
fn the_fast_pass_carries_ordinary_bodies_and_leaves_the_rest() {
    let fast = |doc: &str| crate::canonical_fast::canonical(doc).map(|t| String::from_utf8(t).unwrap());
    // Python's json.dumps (spaces, ASCII escapes), unsorted members, a repeated name.
    assert_eq!(
        fast(
            r#"{"type": "order.updated", "id": "evt_1", "data": {"total": "44.80", "who": "Jos\u00e9"}, "id": "evt_2"}"#
        )
        .as_deref(),
        Some(r#"{"data":{"total":"44.80","who":"José"},"id":"evt_2","type":"order.updated"}"#)
    );
    assert_eq!(fast(r#"[1.50, -0, "a\/b", "\u001F\u0022"]"#).as_deref(), Some(r#"[1.50,-0,"a/b","\u001f\""]"#));
    // Left to serde_json: exponents, escaped names, the number token, lone surrogates, deep
    // nesting, and whatever is not JSON.
    for doc in [
        "[1e5]",
        r#"{"a\u0062":1}"#,
        r#"{"$serde_json::private::Number":"1"}"#,
        r#""\udc00""#,
        &format!("{}{}", "[".repeat(101), "]".repeat(101)),
        "[1,]",
        "01",
        "[1.]",
        "\"a\u{1}\"",
        "{\"a\":1}x",
        "",
    ] {
        assert_eq!(fast(doc), None, "{doc:?}");
    }
}
