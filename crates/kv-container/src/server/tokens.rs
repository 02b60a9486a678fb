//! The tokens file (`--tokens-file`): which bearer tokens are valid, and for which namespaces.
//!
//! One `NAMESPACE TOKEN` pair per line; `*` is every namespace (and the operator routes:
//! backup, listing everything, metrics). A token may be written as `sha256:<64 hex>`, the
//! digest of the real token, so the file need not hold the secret. Blank lines and lines
//! starting with `#` are ignored. The same namespace may have several tokens (rotation), and
//! one token may be listed for several namespaces. Only digests are ever kept in memory, and
//! no error message repeats a token.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use event_store::key::{validate_namespace, MAX_NAMESPACE_BYTES};

/// What a token may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `*`: every key and the operator routes.
    All,
    /// Keys of these namespaces only (`evt_<ns>~…`).
    Namespaces(Vec<String>),
}

impl Scope {
    /// True when `key` lies inside the scope: `evt_<ns>~` starts it for one of its namespaces.
    pub(crate) fn covers_key(&self, key: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Namespaces(list) => list.iter().any(|ns| key_in_namespace(key, ns)),
        }
    }
}

/// `evt_<ns>~…`: `~` never occurs in a namespace, so the first `~` ends it unambiguously.
pub(crate) fn key_in_namespace(key: &str, ns: &str) -> bool {
    key.strip_prefix("evt_").and_then(|rest| rest.strip_prefix(ns)).is_some_and(|rest| rest.starts_with('~'))
}

/// The key prefix of namespace `ns`.
pub(crate) fn namespace_prefix(ns: &str) -> String {
    format!("evt_{ns}~")
}

/// The valid tokens, as digests with the namespace each one opens.
#[derive(Debug, Clone, Default)]
pub(crate) struct Table {
    entries: Vec<([u8; 32], Option<String>)>,
}

impl Table {
    /// One token meaning `*` (`--token`, `--token-file`, `KV_TOKEN`).
    pub(crate) fn single(token: &str) -> anyhow::Result<Table> {
        // An empty KV_TOKEN is far more likely a deployment mistake than a wish for no
        // auth; refusing to start beats silently serving an open store.
        anyhow::ensure!(!token.is_empty(), "the KV token must not be empty");
        Ok(Table { entries: vec![(Sha256::digest(token.as_bytes()).into(), None)] })
    }

    /// Parses a tokens file; an error names the line and what is wrong with it.
    pub(crate) fn parse(text: &str) -> Result<Table, String> {
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            entries.push(parse_line(line).map_err(|why| format!("line {}: {why}", n + 1))?);
        }
        if entries.is_empty() {
            return Err("no tokens: write one `NAMESPACE TOKEN` pair per line (`*` for every namespace)".into());
        }
        Ok(Table { entries })
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The scope of `token`, or `None` when no line holds it. Every entry is compared (in
    /// constant time, on fixed-size digests), whichever matches: timing tells neither which
    /// line matched nor how much of a token was right.
    pub(crate) fn scope_of(&self, token: &str) -> Option<Scope> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut all = false;
        let mut found = false;
        let mut namespaces = Vec::new();
        for (d, ns) in &self.entries {
            if bool::from(digest.ct_eq(d)) {
                found = true;
                match ns {
                    None => all = true,
                    Some(ns) => namespaces.push(ns.clone()),
                }
            }
        }
        match (found, all) {
            (false, _) => None,
            (true, true) => Some(Scope::All),
            (true, false) => Some(Scope::Namespaces(namespaces)),
        }
    }
}

fn parse_line(line: &str) -> Result<([u8; 32], Option<String>), String> {
    let mut fields = line.split_whitespace();
    let (Some(ns), Some(token)) = (fields.next(), fields.next()) else {
        return Err("expected `NAMESPACE TOKEN` (two fields), found one".into());
    };
    if fields.next().is_some() {
        return Err("expected `NAMESPACE TOKEN` (two fields), found more (a token holds no blanks)".into());
    }
    let ns = match ns {
        "*" => None,
        // Not echoed: with the fields swapped by mistake, this one is the token.
        ns if validate_namespace(ns).is_err() => {
            return Err(format!(
                "the namespace must be `*` or 1–{MAX_NAMESPACE_BYTES} characters from A-Z a-z 0-9 . _ - \
                 (`NAMESPACE TOKEN`, in this order)"
            ))
        }
        ns => Some(ns.to_owned()),
    };
    let digest = match token.strip_prefix("sha256:") {
        Some(hex_text) => {
            let bytes = hex::decode(hex_text)
                .ok()
                .filter(|b| b.len() == 32)
                .ok_or("a `sha256:` token must be followed by exactly 64 hexadecimal digits")?;
            bytes.try_into().map_err(|_| "sha256 digest of the wrong length")?
        }
        None => {
            // The token travels in an HTTP header: only visible ASCII can be sent.
            if !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err("the token must be visible ASCII characters (it is sent in an HTTP header)".into());
            }
            Sha256::digest(token.as_bytes()).into()
        }
    };
    Ok((digest, ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn namespaces_stars_digests_and_comments() {
        let digest = hex::encode(Sha256::digest(b"hashed"));
        let text =
            format!("# ops\n\n* root\nacme a1\nacme a2\nbeta b1\n  beta sha256:{digest}  \nacme shared\nbeta shared\n");
        let t = Table::parse(&text).unwrap();
        assert_eq!(t.len(), 7);
        assert_eq!(t.scope_of("root"), Some(Scope::All));
        assert_eq!(t.scope_of("a1"), Some(Scope::Namespaces(vec!["acme".into()])));
        assert_eq!(t.scope_of("a2"), Some(Scope::Namespaces(vec!["acme".into()])));
        assert_eq!(t.scope_of("hashed"), Some(Scope::Namespaces(vec!["beta".into()])));
        assert_eq!(t.scope_of(&format!("sha256:{digest}")), None, "the digest itself is not a token");
        assert_eq!(t.scope_of("shared"), Some(Scope::Namespaces(vec!["acme".into(), "beta".into()])));
        assert_eq!(t.scope_of("a"), None);
        assert_eq!(t.scope_of(""), None);
    }

    #[test]
    fn malformed_lines_are_named_without_the_token() {
        for (text, line, why) in [
            ("* ok\nacme\n", 2, "two fields"),
            ("acme zq1 zq2\n", 1, "more"),
            ("\n\nbad/ns t\n", 3, "namespace"),
            ("zq:swapped/token acme\n", 1, "in this order"),
            ("acme sha256:abc\n", 1, "64 hexadecimal"),
            ("# only a comment\n", 0, "no tokens"),
            ("acme t\u{e9}st\n", 1, "visible ASCII"),
        ] {
            let e = Table::parse(text).unwrap_err();
            if line > 0 {
                assert!(e.starts_with(&format!("line {line}: ")), "{text:?}: {e}");
            }
            assert!(e.contains(why), "{text:?}: {e}");
            assert!(!e.contains("t\u{e9}st") && !e.contains("zq"), "{e}");
        }
    }

    #[test]
    fn keys_belong_to_exactly_their_namespace() {
        let s = Scope::Namespaces(vec!["acme".into()]);
        assert!(s.covers_key("evt_acme~E1"));
        assert!(s.covers_key("evt_acme~~ZXZ0"));
        for other in ["evt_acme", "evt_acme2~E1", "evt_acm~E1", "evt_E1", "evt~YWNtZQ", "evt_beta~acme~", "x_acme~1"] {
            assert!(!s.covers_key(other), "{other}");
        }
        assert!(Scope::All.covers_key("anything"));
    }

    proptest! {
        /// Any text: parsing never panics; an error names a line that exists (or says the
        /// file has no tokens), and never repeats a field longer than a namespace can be.
        #[test]
        fn parser_never_panics_and_names_a_real_line(text in "(\\PC{0,40}\n?){0,8}") {
            match Table::parse(&text) {
                Ok(t) => prop_assert!(t.len() > 0),
                Err(e) => {
                    let lines = text.lines().count();
                    match e.strip_prefix("line ").and_then(|r| r.split(':').next()).and_then(|n| n.parse::<usize>().ok()) {
                        Some(n) => prop_assert!(n >= 1 && n <= lines, "{e}"),
                        None => prop_assert!(e.starts_with("no tokens"), "{e}"),
                    }
                }
            }
        }

        /// Generated well-formed files: every token is found with exactly its namespaces.
        #[test]
        fn well_formed_files_round_trip(
            pairs in proptest::collection::vec(("[a-z]{1,5}|\\*", "[!-~]{1,20}", any::<bool>()), 1..12)
        ) {
            let mut text = String::new();
            for (ns, token, hashed) in &pairs {
                let shown = if *hashed { format!("sha256:{}", hex::encode(Sha256::digest(token.as_bytes()))) } else { token.clone() };
                text.push_str(&format!("{ns} {shown}\n"));
            }
            let t = Table::parse(&text).unwrap();
            for (_, token, _) in &pairs {
                let lines: Vec<&String> = pairs.iter().filter(|(_, t2, _)| t2 == token).map(|(ns, _, _)| ns).collect();
                let expected = if lines.iter().any(|ns| *ns == "*") {
                    Scope::All
                } else {
                    Scope::Namespaces(lines.into_iter().cloned().collect())
                };
                prop_assert_eq!(t.scope_of(token), Some(expected));
            }
        }
    }
}
