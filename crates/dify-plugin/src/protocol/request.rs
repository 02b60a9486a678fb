//! A request's `data` object as the daemon sent it: JSON text, read by the plugin in one pass.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// The `data` of a request (`type`, `action`, and the action's fields), kept as the JSON text
/// it arrived as. Parsing it into a tree up front cost more than a tool call's own work, so a
/// handler reads it once, into the shape it wants, borrowing from the text
/// ([`RequestData::parse`]); [`RequestData::to_value`] gives a tree to those that need one.
#[derive(Debug, Clone)]
pub struct RequestData(Box<RawValue>);

impl RequestData {
    /// `raw` when it is a JSON object; any other value is `None`.
    pub fn from_raw(raw: Box<RawValue>) -> Option<RequestData> {
        raw.get().starts_with('{').then_some(RequestData(raw))
    }

    /// The text of `value` when it is an object (what a test or a runtime builds by hand).
    pub fn from_value(value: &Value) -> Option<RequestData> {
        match value {
            Value::Object(_) => serde_json::value::to_raw_value(value).ok().map(RequestData),
            _ => None,
        }
    }

    /// The object's JSON text, as it came.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    /// The object read into `T`, which may borrow strings and raw members from the text.
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> serde_json::Result<T> {
        serde_json::from_str(self.0.get())
    }

    /// The object's members, each as its JSON text (one pass, nothing copied).
    pub fn fields(&self) -> serde_json::Result<Fields<'_>> {
        Fields::parse(self.0.get())
    }

    /// The object as a tree. Its nesting is limited as serde_json limits it (128 levels); the
    /// text itself was only checked to be JSON, at any depth.
    pub fn to_value(&self) -> serde_json::Result<Value> {
        serde_json::from_str(self.0.get())
    }
}

/// A JSON object's members, each as its raw JSON text, borrowed from the object's text. A
/// repeated name reads as its last value, as a JSON map would keep it.
#[derive(Debug, Default, Clone)]
pub struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Fields<'a> {
    /// The members of `object`, the text of a JSON object (anything else is an error).
    pub fn parse(object: &'a str) -> serde_json::Result<Fields<'a>> {
        serde_json::from_str(object)
    }

    /// The member `name`'s JSON text.
    pub fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.0.iter().rev().find(|(key, _)| key == name).map(|(_, raw)| *raw)
    }

    /// The member `name` when it is a string (`None` when it is absent or of another type).
    pub fn str(&self, name: &str) -> Option<Cow<'a, str>> {
        self.get(name).and_then(raw_str)
    }

    /// The members in order (a repeated name appears each time).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &'a RawValue)> + '_ {
        self.0.iter().map(|(key, raw)| (key.as_ref(), *raw))
    }
}

/// The string `raw` holds, borrowed when it has no escapes; `None` when it is not a string.
pub fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\\') {
        serde_json::from_str::<String>(text).ok().map(Cow::Owned)
    } else {
        // Valid JSON (the text was parsed) without a backslash holds no escape and no raw
        // control character: its characters are the string's.
        Some(Cow::Borrowed(inner))
    }
}

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(Name(key)) = map.next_key()? {
                    members.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Fields(members))
            }
        }
        d.deserialize_map(Members)
    }
}

/// A member name (or any string), borrowed from the text when it has no escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_objects_are_request_data() {
        let tree: Value = serde_json::from_str(r#"{"action": "x", "n": 1.50}"#).unwrap();
        let d = RequestData::from_value(&tree).unwrap();
        assert_eq!(d.text(), r#"{"action":"x","n":1.50}"#);
        assert_eq!(d.to_value().unwrap()["action"], "x");
        assert!(RequestData::from_value(&json!([1])).is_none());
        assert!(RequestData::from_raw(RawValue::from_string("\"{\"".into()).unwrap()).is_none());
        #[derive(Deserialize)]
        struct Action<'a> {
            action: &'a str,
        }
        assert_eq!(d.parse::<Action>().unwrap().action, "x", "borrowed from the text");
    }

    #[test]
    fn fields_are_members_as_text_and_the_last_of_a_name_wins() {
        let text = r#"{"a": "x", "b\u0041": {"k": [1]}, "c": "q\"\n", "n": 1.50, "a": "y", "z": null}"#;
        let f = Fields::parse(text).unwrap();
        assert_eq!(f.str("a").as_deref(), Some("y"));
        assert!(matches!(f.str("a"), Some(Cow::Borrowed(_))));
        assert_eq!(f.get("bA").unwrap().get(), r#"{"k": [1]}"#);
        assert_eq!(f.str("c").as_deref(), Some("q\"\n"));
        assert_eq!(f.get("n").unwrap().get(), "1.50");
        assert_eq!((f.str("n"), f.str("z"), f.str("missing")), (None, None, None));
        assert_eq!(f.iter().count(), 6);
        assert!(Fields::parse("[1]").is_err() && Fields::parse("\"a\"").is_err());
        let d = RequestData::from_value(&json!({"type": "tool"})).unwrap();
        assert_eq!(d.fields().unwrap().str("type").as_deref(), Some("tool"));
    }
}
