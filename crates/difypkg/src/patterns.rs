//! Hand-written matchers for the daemon's and SDK's patterns (no regex crate in the tree).

fn all_chars(s: &str, ok: impl Fn(char) -> bool) -> bool {
    s.chars().all(ok)
}

fn is_slug_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'
}

/// Go's `\w`: ASCII letters, digits, underscore.
fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_digits(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
}

/// `^[a-z0-9_-]{1,64}$`
pub(crate) fn is_author(s: &str) -> bool {
    (1..=64).contains(&s.len()) && all_chars(s, is_slug_char)
}

/// `^[a-z0-9_-]{1,128}$`
pub(crate) fn is_plugin_name(s: &str) -> bool {
    (1..=128).contains(&s.len()) && all_chars(s, is_slug_char)
}

/// `^[a-zA-Z0-9_-]+$` (tool provider and tool identity names).
pub(crate) fn is_identity_name(s: &str) -> bool {
    !s.is_empty() && all_chars(s, |c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Splits `X.Y.Z[-suffix]` into numeric parts and the optional suffix (without `-`).
fn split_version(s: &str) -> (Vec<&str>, Option<&str>) {
    match s.split_once('-') {
        Some((release, suffix)) => (release.split('.').collect(), Some(suffix)),
        None => (s.split('.').collect(), None),
    }
}

fn suffix_ok(suffix: Option<&str>) -> bool {
    match suffix {
        None => true,
        Some(x) => (1..=16).contains(&x.len()) && all_chars(x, is_word_char),
    }
}

/// The daemon's manifest `version` tag: `^\d{1,4}(\.\d{1,4}){2}(-\w{1,16})?$`.
pub(crate) fn is_daemon_version(s: &str) -> bool {
    let (parts, suffix) = split_version(s);
    parts.len() == 3 && parts.iter().all(|p| is_digits(p, 1, 4)) && suffix_ok(suffix)
}

/// Version part of the unique identifier: `([0-9]{1,4})(\.[0-9]{1,4}){1,3}(-\w{1,16})?`.
fn is_identifier_version(s: &str) -> bool {
    let (parts, suffix) = split_version(s);
    (2..=4).contains(&parts.len()) && parts.iter().all(|p| is_digits(p, 1, 4)) && suffix_ok(suffix)
}

/// `^(?:([a-z0-9_-]{1,64})\/)?([a-z0-9_-]{1,255}):<version>@[a-f0-9]{32,64}$`
pub(crate) fn is_unique_identifier(s: &str) -> bool {
    let Some((head, checksum)) = s.rsplit_once('@') else {
        return false;
    };
    let checksum_ok =
        (32..=64).contains(&checksum.len()) && all_chars(checksum, |c| c.is_ascii_digit() || ('a'..='f').contains(&c));
    let Some((who, version)) = head.split_once(':') else {
        return false;
    };
    let who_ok = match who.split_once('/') {
        Some((author, name)) => is_author(author) && is_slug(name, 255),
        None => is_slug(who, 255),
    };
    checksum_ok && who_ok && is_identifier_version(version)
}

fn is_slug(s: &str, max: usize) -> bool {
    (1..=max).contains(&s.len()) && all_chars(s, is_slug_char)
}

/// Whether google/uuid's `Parse` would accept `s` (only the forms an author can take:
/// 36 characters with dashes, or 32 bare hex digits).
pub(crate) fn looks_like_uuid(s: &str) -> bool {
    let hex = |c: char| c.is_ascii_hexdigit();
    match s.len() {
        32 => all_chars(s, hex),
        36 => s.char_indices().all(|(i, c)| if [8, 13, 18, 23].contains(&i) { c == '-' } else { hex(c) }),
        _ => false,
    }
}

/// Consumes an optional PEP 440 separator followed by one of `words` and optional digits.
fn eat_segment<'a>(s: &'a str, words: &[&str], need_sep: bool) -> Option<&'a str> {
    let (rest, had_sep) = match s.strip_prefix(['-', '_', '.']) {
        Some(r) => (r, true),
        None => (s, false),
    };
    if need_sep && !had_sep {
        return None;
    }
    let word = words.iter().find(|w| rest.starts_with(**w))?;
    let rest = &rest[word.len()..];
    let after_sep = rest.strip_prefix(['-', '_', '.']).unwrap_or(rest);
    let digits = after_sep.bytes().take_while(u8::is_ascii_digit).count();
    Some(if digits > 0 { &after_sep[digits..] } else { rest })
}

/// Whether `s` is a valid PEP 440 public version (what `packaging.Version` accepts,
/// without epochs or local parts, which our versions never need).
pub(crate) fn is_pep440(s: &str) -> bool {
    let s = s.to_ascii_lowercase();
    // Release segment: N(.N)*, stopping before a dot that does not start a number.
    let b = s.as_bytes();
    let mut release_len = 0;
    loop {
        let digits = b[release_len..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return false;
        }
        release_len += digits;
        if b.get(release_len) == Some(&b'.') && b.get(release_len + 1).is_some_and(u8::is_ascii_digit) {
            release_len += 1;
        } else {
            break;
        }
    }
    let mut rest = &s[release_len..];
    // Longest spellings first so `preview` is not read as `pre` + garbage.
    let pre = ["alpha", "beta", "preview", "pre", "rc", "a", "b", "c"];
    if let Some(r) = eat_segment(rest, &pre, false) {
        rest = r;
    }
    // Post release: `-N` or [sep](post|rev|r)[sep][N].
    if let Some(r) = rest.strip_prefix('-').filter(|r| r.starts_with(|c: char| c.is_ascii_digit())) {
        rest = r.trim_start_matches(|c: char| c.is_ascii_digit());
    } else if let Some(r) = eat_segment(rest, &["post", "rev", "r"], false) {
        rest = r;
    }
    if let Some(r) = eat_segment(rest, &["dev"], false) {
        rest = r;
    }
    rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        for ok in ["0.0.1", "1.2.3", "1234.0.0", "1.0.0-rc1", "1.0.0-1", "1.0.0-post1"] {
            assert!(is_daemon_version(ok) && is_pep440(ok), "{ok}");
        }
        assert!(is_daemon_version("1.0.0-foo") && !is_pep440("1.0.0-foo"));
        for bad in ["v1.0.0", "1.0", "1.0.0+x", "12345.0.0", "1.0.0-", "1..0"] {
            assert!(!is_daemon_version(bad), "{bad}");
        }
        for ok in ["1.0.0", "1.0", "1.0a1", "1.0.0.dev3", "2.0b", "1.0.post2", "1.0rc1.dev2"] {
            assert!(is_pep440(ok), "{ok}");
        }
        for bad in ["", "v1", "1.0.0-foo", "1.0x", ".1"] {
            assert!(!is_pep440(bad), "{bad}");
        }
    }

    #[test]
    fn names_and_uuids() {
        assert!(is_author("acme") && !is_author("Acme") && !is_author(""));
        assert!(is_plugin_name("stateful_tool") && !is_plugin_name("a.b"));
        assert!(is_identity_name("Counter_2") && !is_identity_name("counter.v2"));
        assert!(looks_like_uuid("123e4567-e89b-12d3-a456-426614174000"));
        assert!(looks_like_uuid("123e4567e89b12d3a456426614174000"));
        assert!(!looks_like_uuid("acme"));
    }

    #[test]
    fn identifiers() {
        let sum = "a".repeat(64);
        assert!(is_unique_identifier(&format!("acme/x:0.0.1@{sum}")));
        assert!(is_unique_identifier(&format!("x:1.2@{sum}")));
        assert!(!is_unique_identifier(&format!("acme/x:v0.0.1@{sum}")));
        assert!(!is_unique_identifier("acme/x:0.0.1@abc"));
    }
}
