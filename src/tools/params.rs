//! Reading tool parameters the way workflow nodes and LLM agents actually send them.

use std::borrow::Cow;
use std::fmt;
use std::sync::LazyLock;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use dify_plugin::protocol::Name;

use crate::error::ToolError;

/// Whether `key`, the first key of a map a visitor is handed, says the map is a number:
/// serde_json (`arbitrary_precision`) hands a number over as a one-entry map under a key of
/// its own. The key is learnt from serde_json once, by reading a number, rather than spelled
/// out here: it is serde_json's private business. (Should serde_json stop handing numbers
/// over as maps, no key is learnt and no map is taken for a number.)
pub(crate) fn is_number_key(key: &str) -> bool {
    static KEY: LazyLock<Option<String>> = LazyLock::new(|| {
        struct FirstKey;
        impl<'de> Visitor<'de> for FirstKey {
            type Value = Option<String>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<String>, A::Error> {
                let key = map.next_key::<String>()?;
                if key.is_some() {
                    map.next_value::<IgnoredAny>()?;
                }
                Ok(key)
            }
        }
        serde_json::Deserializer::from_str("1.5").deserialize_any(FirstKey).ok().flatten()
    });
    KEY.as_deref() == Some(key)
}

/// A call's `tool_parameters`, read in the same pass as the rest of the request: each
/// member's value, its strings borrowed from the request's text where they had no escapes.
/// A repeated name reads as its last value, as a JSON map would keep it.
#[derive(Debug, Default, Clone)]
pub struct Params<'a>(Vec<(Cow<'a, str>, Param<'a>)>);

/// What a parameter holds.
#[derive(Debug, Clone)]
pub(crate) enum Param<'a> {
    /// `null` (an absent parameter reads the same).
    Null,
    Bool,
    Str(Cow<'a, str>),
    /// A number, as serde_json keeps it (every digit as written).
    Number(String),
    /// An object or an array (rare: an agent passing a JSON payload as an object).
    Composite(Value),
}

impl<'a> Params<'a> {
    /// The parameters in `object`, the text of a JSON object (anything else is an error).
    pub fn parse(object: &'a str) -> serde_json::Result<Params<'a>> {
        serde_json::from_str(object)
    }

    fn get(&self, name: &str) -> &Param<'a> {
        self.0.iter().rev().find(|(key, _)| key == name).map_or(&Param::Null, |(_, value)| value)
    }
}

impl<'de> Deserialize<'de> for Params<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ParamsVisitor)
    }
}

struct ParamsVisitor;

impl<'de> Visitor<'de> for ParamsVisitor {
    type Value = Params<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of tool parameters")
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Params<'de>, A::Error> {
        Params::read_members(None, map)
    }
}

impl<'de> Params<'de> {
    /// Reads an object's members: `first`, a name already read from `map` (the request reader
    /// reads one to tell a number from an object), then the rest of `map`.
    pub(crate) fn read_members<A: MapAccess<'de>>(
        first: Option<Cow<'de, str>>,
        mut map: A,
    ) -> Result<Params<'de>, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(6));
        if let Some(name) = first {
            members.push((name, map.next_value()?));
        }
        while let Some(Name(name)) = map.next_key()? {
            members.push((name, map.next_value()?));
        }
        Ok(Params(members))
    }
}

impl<'de> Deserialize<'de> for Param<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ParamVisitor)
    }
}

/// Mirrors serde_json's `Value` visitor, keeping strings borrowed and numbers as text.
struct ParamVisitor;

impl<'de> Visitor<'de> for ParamVisitor {
    type Value = Param<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Param<'de>, E> {
        Ok(Param::Bool)
    }
    fn visit_i64<E>(self, v: i64) -> Result<Param<'de>, E> {
        Ok(Param::Number(v.to_string()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Param<'de>, E> {
        Ok(Param::Number(v.to_string()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Param<'de>, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Param::Null, |n| Param::Number(n.to_string())))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Param<'de>, E> {
        Ok(Param::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<Param<'de>, E> {
        Ok(Param::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<Param<'de>, E> {
        Ok(Param::Str(Cow::Owned(v)))
    }
    fn visit_unit<E>(self) -> Result<Param<'de>, E> {
        Ok(Param::Null)
    }
    fn visit_none<E>(self) -> Result<Param<'de>, E> {
        Ok(Param::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Param<'de>, D::Error> {
        Param::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Param<'de>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Value>()? {
            items.push(item);
        }
        Ok(Param::Composite(Value::Array(items)))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Param<'de>, A::Error> {
        let Some(Name(first)) = map.next_key()? else {
            return Ok(Param::Composite(Value::Object(Map::new())));
        };
        if is_number_key(&first) {
            return Ok(Param::Number(map.next_value::<String>()?));
        }
        // As `Value` builds a map: a repeated key keeps its first place and its last value.
        let mut members = Map::new();
        members.insert(first.into_owned(), map.next_value()?);
        while let Some((key, value)) = map.next_entry::<String, Value>()? {
            members.insert(key, value);
        }
        Ok(Param::Composite(Value::Object(members)))
    }
}

/// A required string. Numbers are accepted as their decimal text (agents often send ids as
/// numbers); anything else is a clear `param_invalid`. An empty string is reported as empty,
/// not as missing: a workflow that maps an empty variable needs to hear that.
pub(crate) fn required_str(params: &Params, name: &str) -> Result<String, ToolError> {
    if matches!(params.get(name), Param::Str(s) if s.is_empty()) {
        return Err(ToolError::param(match name {
            "event_id" => "event_id is empty: pass the unique id the source system gave this event".to_owned(),
            _ => format!("{name} is empty: pass a value"),
        }));
    }
    optional_str(params, name)?.ok_or_else(|| ToolError::param(format!("{name} is required")))
}

/// An optional string; null and "" mean absent. Objects and arrays are accepted as their
/// (compact) JSON text, so an agent passing a JSON payload object is understood.
pub(crate) fn optional_str(params: &Params, name: &str) -> Result<Option<String>, ToolError> {
    match params.get(name) {
        Param::Null => Ok(None),
        Param::Str(s) if s.is_empty() => Ok(None),
        Param::Str(s) => Ok(Some(s.clone().into_owned())),
        Param::Number(n) => Ok(Some(n.clone())),
        Param::Composite(v) => Ok(Some(v.to_string())),
        Param::Bool => Err(ToolError::param(format!("{name} must be text, not true/false"))),
    }
}

/// An optional payload: text as given, except Dify's `str()` of an object or array (a
/// workflow variable wired straight to the field), which is read back as the JSON text it
/// came from, so it gets the same fingerprint and stored form as that JSON.
pub(crate) fn optional_payload(params: &Params, name: &str) -> Result<Option<String>, ToolError> {
    Ok(optional_str(params, name)?.map(|text| match super::pyrepr::json_from_python_repr(&text) {
        // Valid JSON stays as it is (e.g. `[1, 2]` reads the same in both languages).
        Some(json) if serde_json::from_str::<serde::de::IgnoredAny>(&text).is_err() => json,
        _ => text,
    }))
}

/// An optional whole number within `min..=max`; numeric strings are accepted.
pub(crate) fn optional_int(params: &Params, name: &str, min: i64, max: i64) -> Result<Option<i64>, ToolError> {
    let bad = || ToolError::param(format!("{name} must be a whole number from {min} to {max}"));
    let n = match params.get(name) {
        Param::Null => return Ok(None),
        Param::Str(s) if s.trim().is_empty() => return Ok(None),
        Param::Str(s) => s.trim().parse::<f64>().map_err(|_| bad())?,
        Param::Number(n) => n.parse::<f64>().map_err(|_| bad())?,
        Param::Bool | Param::Composite(_) => return Err(bad()),
    };
    if n.fract() != 0.0 || n < min as f64 || n > max as f64 {
        return Err(bad());
    }
    Ok(Some(n as i64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::testing::params as p;
    use serde_json::json;

    #[test]
    fn strings() {
        let m = p(json!({"a": "x", "b": 12, "c": "", "d": null, "e": {"k": 1}, "f": true}));
        assert_eq!(required_str(&m, "a").unwrap(), "x");
        assert_eq!(required_str(&m, "b").unwrap(), "12");
        assert!(required_str(&m, "c").unwrap_err().message.contains("c is empty"));
        assert!(required_str(&m, "d").unwrap_err().message.contains("required"));
        assert_eq!(optional_str(&m, "e").unwrap().unwrap(), r#"{"k":1}"#);
        assert!(optional_str(&m, "f").is_err());
        assert_eq!(optional_str(&m, "zz").unwrap(), None);
    }

    #[test]
    fn text_of_every_shape() {
        let m = Params::parse(
            r#"{"n": 1.50, "big": 12345678901234567890123, "o": {"b": 1, "a": [1, 2.0], "b": 3}, "e": "a\"b\u00e9"}"#,
        )
        .unwrap();
        assert_eq!(optional_str(&m, "n").unwrap().as_deref(), Some("1.50"), "a number as it was written");
        assert_eq!(optional_str(&m, "big").unwrap().as_deref(), Some("12345678901234567890123"));
        assert_eq!(
            optional_str(&m, "o").unwrap().as_deref(),
            Some(r#"{"b":3,"a":[1,2.0]}"#),
            "compact, as Value keeps it"
        );
        assert_eq!(optional_str(&m, "e").unwrap().as_deref(), Some("a\"bé"));
        let deep = format!(r#"{{"d": {}{}}}"#, "[".repeat(200), "]".repeat(200));
        assert!(Params::parse(&deep).unwrap_err().to_string().contains("recursion limit"));
        let m = Params::parse(r#"{"a": "x", "a": null, "b": "y", "b": "z"}"#).unwrap();
        assert_eq!((optional_str(&m, "a").unwrap(), optional_str(&m, "b").unwrap().as_deref()), (None, Some("z")));
    }

    #[test]
    fn numbers_are_told_from_objects_without_naming_serde_jsons_key() {
        let m = Params::parse(r#"{"n": -0.50, "o": {"n": 1}}"#).unwrap();
        assert!(matches!(m.get("n"), Param::Number(n) if n == "-0.50"), "{m:?}");
        assert!(matches!(m.get("o"), Param::Composite(Value::Object(_))), "{m:?}");
        assert!(!is_number_key("n") && !is_number_key(""));
    }

    #[test]
    fn ints() {
        let m = p(json!({"a": 3, "b": "4", "c": 1.5, "d": -1, "e": "x", "f": 3.0}));
        assert_eq!(optional_int(&m, "a", 0, 10).unwrap(), Some(3));
        assert_eq!(optional_int(&m, "b", 0, 10).unwrap(), Some(4));
        assert_eq!(optional_int(&m, "f", 0, 10).unwrap(), Some(3));
        assert!(optional_int(&m, "c", 0, 10).is_err());
        assert!(optional_int(&m, "d", 0, 10).is_err());
        assert!(optional_int(&m, "e", 0, 10).is_err());
        assert_eq!(optional_int(&m, "zz", 0, 10).unwrap(), None);
    }
}
