//! Reads Dify's `str()` of an object back as the JSON it came from (a strict, small parser).
//
// A workflow tool node casts an object or array wired straight to a string parameter with
// Python's `str(value)`, so the JSON body `{"id": 7, "ok": true}` reaches us as
// `{'id': 7, 'ok': True}`. Only the exact text `str()` writes for a dict or list of JSON
// values is converted; anything else (other spacing, tuples, sets, non-string keys,
// `inf`/`nan`, bytes, lone surrogates) is not a repr of JSON and stays text.

/// The JSON text of `text` when `text` is exactly Python's `str()` of a dict or list made of
/// JSON values; `None` otherwise.
pub(crate) fn json_from_python_repr(text: &str) -> Option<String> {
    if !(text.starts_with('{') || text.starts_with('[')) || !first_key_fits(text) {
        return None;
    }
    let mut p = Parser { t: text, s: text.as_bytes(), i: 0, out: String::with_capacity(text.len()), depth: 0 };
    p.value()?;
    (p.i == p.s.len()).then_some(p.out)
}

/// False when `text` is a dict whose first key is not followed by `: `, as `str()` always
/// writes it. Most payloads are JSON objects, and compact JSON (`{"id":…`) fails here without
/// the parser's allocations. Where a key ends is where the parser's `string` ends it: at the
/// first quote of its kind that no backslash escapes.
fn first_key_fits(text: &str) -> bool {
    let s = text.as_bytes();
    let (Some(b'{'), Some(&quote @ (b'\'' | b'"'))) = (s.first(), s.get(1)) else { return true };
    let mut i = 2;
    while let Some(&b) = s.get(i) {
        match b {
            b'\\' => i += 2,
            _ if b == quote => return s[i + 1..].starts_with(b": "),
            _ => i += 1,
        }
    }
    false
}

/// Deepest nesting converted; deeper input stays text (and never exhausts the stack).
const MAX_DEPTH: usize = 128;

struct Parser<'a> {
    /// The text, and its bytes (the parser steps through bytes, and takes `&str` slices at
    /// quotes, which are always character boundaries).
    t: &'a str,
    s: &'a [u8],
    i: usize,
    out: String,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, lit: &str) -> bool {
        let ok = self.s[self.i..].starts_with(lit.as_bytes());
        if ok {
            self.i += lit.len();
        }
        ok
    }

    fn value(&mut self) -> Option<()> {
        match self.peek()? {
            b'{' => self.container(b'}', true),
            b'[' => self.container(b']', false),
            b'\'' | b'"' => self.string(),
            b'-' | b'0'..=b'9' => self.number(),
            _ => {
                let json = [("True", "true"), ("False", "false"), ("None", "null")]
                    .into_iter()
                    .find_map(|(python, json)| self.eat(python).then_some(json))?;
                self.out.push_str(json);
                Some(())
            }
        }
    }

    /// `{k: v, …}` / `[v, …]` with exactly the `, ` and `: ` separators `str()` writes.
    fn container(&mut self, close: u8, dict: bool) -> Option<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        self.out.push(self.s[self.i] as char);
        self.i += 1;
        let mut keys = Vec::new();
        if self.peek()? != close {
            loop {
                if dict {
                    let start = self.out.len();
                    // Dict keys from JSON are strings; a repeated key cannot come from a dict.
                    if !matches!(self.peek()?, b'\'' | b'"') {
                        return None;
                    }
                    self.string()?;
                    let key = self.out[start..].to_owned();
                    if keys.contains(&key) {
                        return None;
                    }
                    keys.push(key);
                    if !self.eat(": ") {
                        return None;
                    }
                    self.out.push(':');
                }
                self.value()?;
                if self.eat(", ") {
                    self.out.push(',');
                } else {
                    break;
                }
            }
        }
        (self.peek()? == close).then_some(())?;
        self.out.push(close as char);
        self.i += 1;
        self.depth -= 1;
        Some(())
    }

    /// Python's int and float `repr`: `-?digits`, `-?digits.digits`, optional `e[+-]digits`.
    fn number(&mut self) -> Option<()> {
        let start = self.i;
        self.eat("-");
        let int = self.digits()?;
        if int.len() > 1 && int.starts_with('0') {
            return None;
        }
        if self.eat(".") {
            self.digits()?;
        }
        if self.eat("e") {
            if !(self.eat("+") || self.eat("-")) {
                return None;
            }
            self.digits()?;
        }
        self.out.push_str(std::str::from_utf8(&self.s[start..self.i]).ok()?);
        Some(())
    }

    fn digits(&mut self) -> Option<&str> {
        let start = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
        (self.i > start).then(|| std::str::from_utf8(&self.s[start..self.i]).expect("ASCII digits"))
    }

    /// A str `repr`: single quotes, or double quotes when the text has `'` and no `"`;
    /// escapes `\\ \' \n \r \t \xhh \uhhhh \Uhhhhhhhh`; no raw control characters.
    fn string(&mut self) -> Option<()> {
        let quote = self.s[self.i];
        self.i += 1;
        let text = self.t.get(self.i..)?;
        let mut value = String::new();
        let mut chars = text.char_indices();
        let end = loop {
            let (at, c) = chars.next()?;
            match c {
                '\\' => {
                    let (_, e) = chars.next()?;
                    let decoded = match e {
                        '\\' => '\\',
                        '\'' if quote == b'\'' => '\'',
                        'n' => '\n',
                        'r' => '\r',
                        't' => '\t',
                        'x' => hex(&mut chars, 2)?,
                        'u' => hex(&mut chars, 4)?,
                        'U' => hex(&mut chars, 8)?,
                        _ => return None,
                    };
                    value.push(decoded);
                }
                c if c as u32 == quote as u32 => break at,
                // `'` inside double quotes is literal; `"` inside single quotes too, but a
                // double-quoted repr never holds `"` (Python would have used single quotes).
                c if (c as u32) < 0x20 || c == '\u{7f}' => return None,
                c => value.push(c),
            }
        };
        if quote == b'"' && !value.contains('\'') {
            return None;
        }
        self.i += end + 1;
        self.out.push_str(&serde_json::to_string(&value).ok()?);
        Some(())
    }
}

/// `n` hex digits as a char (a lone surrogate is no char: not convertible).
fn hex(chars: &mut std::str::CharIndices<'_>, n: usize) -> Option<char> {
    let mut code = 0u32;
    for _ in 0..n {
        code = code * 16 + chars.next()?.1.to_digit(16)?;
    }
    char::from_u32(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use event_store::record::fingerprint;

    #[test]
    fn dify_str_of_a_json_object_reads_back_as_that_json() {
        // (what Python's str() writes for json.loads(json), the JSON)
        let cases = [
            ("{'id': 7, 'ok': True}", r#"{"id":7,"ok":true}"#),
            ("{}", "{}"),
            ("[]", "[]"),
            ("[{'a': None, 'b': [1, -2.5, 1e+16, 1.5e-07]}, 'x']", r#"[{"a":null,"b":[1,-2.5,1e+16,1.5e-07]},"x"]"#),
            (r#"{"it's": "say \"hi\"" }"#, ""),
            (r#"{"it's": 'both \' and "'}"#, r#"{"it's":"both ' and \""}"#),
            (
                r"{'esc': 'a\\b\n\t\r\x00\x7f\u200b\U0001f389 é🎉'}",
                "{\"esc\":\"a\\\\b\\n\\t\\r\\u0000\u{7f}\u{200b}🎉 é🎉\"}",
            ),
            (
                "{'nested': {'deep': {'list': [[], {}]}}, 'f': False}",
                r#"{"nested":{"deep":{"list":[[],{}]}},"f":false}"#,
            ),
        ];
        for (repr, json) in cases {
            match json {
                "" => assert_eq!(json_from_python_repr(repr), None, "{repr}"),
                _ => {
                    let got = json_from_python_repr(repr).unwrap_or_else(|| panic!("{repr} not converted"));
                    assert_eq!(got, json, "{repr}");
                    let parsed: serde_json::Value = serde_json::from_str(&got).unwrap();
                    assert_eq!(parsed, serde_json::from_str::<serde_json::Value>(json).unwrap());
                }
            }
        }
    }

    #[test]
    fn the_converted_text_fingerprints_like_the_json_text() {
        let json = r#"{ "ok" : true, "id": 7, "tags": ["a", "b"], "n": null }"#;
        let repr = "{'ok': True, 'id': 7, 'tags': ['a', 'b'], 'n': None}";
        let converted = json_from_python_repr(repr).unwrap();
        assert_eq!(fingerprint("created", Some(&converted)), fingerprint("created", Some(json)));
    }

    #[test]
    fn the_first_key_probe_only_turns_away_what_the_parser_refuses() {
        let parse = |text: &str| {
            let mut p = Parser { t: text, s: text.as_bytes(), i: 0, out: String::new(), depth: 0 };
            p.value().and_then(|()| (p.i == p.s.len()).then_some(p.out))
        };
        for text in [
            r#"{"id":"evt_1","n":5}"#,
            r#"{"id": "evt_1", "n": 5}"#,
            r#"{'id': 'evt_1', 'n': 5}"#,
            r#"{'it\'s': 1}"#,
            r#"{"it's": 1}"#,
            r#"{'a\\': 1}"#,
            r#"{'a\x41': 1}"#,
            r#"{'unterminated: 1}"#,
            r#"{'k' : 1}"#,
            r#"{'k':1}"#,
            "{}",
            "{ }",
            "[1, 2]",
            r#"{'é': 'ü'}"#,
        ] {
            let fits = first_key_fits(text);
            if !fits {
                assert_eq!(parse(text), None, "{text}");
            }
            assert_eq!(json_from_python_repr(text), if fits { parse(text) } else { None }, "{text}");
        }
        assert!(!first_key_fits(r#"{"id":"evt_1"}"#));
        assert!(first_key_fits(r#"{'id': 'evt_1'}"#));
    }

    #[test]
    fn anything_str_does_not_write_for_json_values_stays_text() {
        for text in [
            "",
            "plain text",
            "{'a':1}",
            "{'a' : 1}",
            "{'a': 1,'b': 2}",
            "{ 'a': 1}",
            "{'a': 1} ",
            "{1: 'a'}",
            "{'a': (1, 2)}",
            "{1, 2}",
            "{'a': inf}",
            "{'a': nan}",
            "{'a': b'x'}",
            "{'a': 01}",
            "{'a': 1.}",
            "{'a': 1e5}",
            "{'a': 1, 'a': 2}",
            "{'a': '\\ud800'}",
            "{'a': '\\q'}",
            "{'a': 'x\ny'}",
            "{'a': \"x\"}",
            "{'a': true}",
            "{'a': 1",
            "['a',]",
            "'just a string'",
            "7",
        ] {
            assert_eq!(json_from_python_repr(text), None, "{text:?}");
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(json_from_python_repr(&deep), None, "nesting beyond the limit stays text");
        let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert_eq!(json_from_python_repr(&ok).as_deref(), Some(ok.as_str()));
    }
}
