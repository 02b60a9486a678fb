//! A request's `data` object as the daemon sent it: JSON text, read by the plugin in one pass.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::message::Message;

/// The `data` of a request (`type`, `action`, and the action's fields) as JSON text: either
/// the object's own text, or the whole request line that carries it. A handler gets its data
/// already read into its own type ([`crate::Handler::Data`], in the same pass as the line);
/// this is for reading it again another way: [`RequestData::parse`] into another type,
/// borrowing from the text, or [`RequestData::to_value`] for a tree.
#[derive(Debug, Clone)]
pub struct RequestData(Text);

#[derive(Debug, Clone)]
enum Text {
    /// The `data` object's text.
    Object(Box<RawValue>),
    /// A request line (a JSON object with a `data` member that is an object).
    Line(Box<str>),
}

impl RequestData {
    /// `raw` when it is a JSON object; any other value is `None`.
    pub fn from_raw(raw: Box<RawValue>) -> Option<RequestData> {
        raw.get().starts_with('{').then_some(RequestData(Text::Object(raw)))
    }

    /// The text of `value` when it is an object (what a test or a runtime builds by hand).
    pub fn from_value(value: &Value) -> Option<RequestData> {
        match value {
            Value::Object(_) => serde_json::value::to_raw_value(value).ok().and_then(RequestData::from_raw),
            _ => None,
        }
    }

    /// The `data` of request line `line`, which the caller has read as a request (its `data`
    /// member is an object); nothing is parsed here.
    pub(crate) fn from_line(line: Box<str>) -> RequestData {
        RequestData(Text::Line(line))
    }

    /// The text this was made from: the object's, or the whole line's.
    pub(crate) fn source(&self) -> &str {
        match &self.0 {
            Text::Object(raw) => raw.get(),
            Text::Line(line) => line,
        }
    }

    /// The object read into `T`, which may borrow strings and raw members from the text.
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> serde_json::Result<T> {
        match &self.0 {
            Text::Object(raw) => serde_json::from_str(raw.get()),
            // The line read again by the one reader, its `data` into `T`.
            Text::Line(line) => {
                serde_json::from_str::<Message<T>>(line)?.data.ok_or_else(|| serde::de::Error::missing_field("data"))
            }
        }
    }

    /// The object's members, each as its JSON text (one pass, nothing copied).
    pub fn fields(&self) -> serde_json::Result<Fields<'_>> {
        self.parse()
    }

    /// The object as a tree. Its nesting is limited as serde_json limits it (128 levels).
    pub fn to_value(&self) -> serde_json::Result<Value> {
        self.parse()
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
        assert_eq!(d.source(), r#"{"action":"x","n":1.50}"#);
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

    #[test]
    fn a_line_reads_as_its_data_member() {
        let line = r#"{"session_id":"s","data":{"a":"old"},"context":{"x":[1]},"event":"request","data":{"a":"b\"c","n":1.50}}"#;
        let d = RequestData::from_line(line.into());
        let last: Value = serde_json::from_str(r#"{"a":"b\"c","n":1.50}"#).unwrap();
        assert_eq!(d.to_value().unwrap(), last, "the last data member");
        assert_eq!(d.fields().unwrap().get("n").unwrap().get(), "1.50");
        let missing = RequestData::from_line(r#"{"session_id":"s","event":"request"}"#.into());
        assert!(missing.to_value().unwrap_err().to_string().contains("missing field `data`"));
    }
}
