//! A request's `data` as this plugin reads it: one pass over its text, strings borrowed from it.
//
// The daemon's request object carries more members than the plugin reads (user_id,
// credential_type, …); they are skipped as they are scanned. `tool_parameters` is read in the
// same pass (each parameter's value as `Param`; only strings with escapes, numbers and the
// rare object or array are copied), so a webhook payload (a long string full of escapes) is
// scanned once here instead of once per layer.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use dify_plugin::protocol::Name;

use crate::tools::params::{is_number_key, Params};

/// The members of a request's data that dispatch reads. A member of the wrong type reads as
/// absent, and a repeated one as its last value, as a JSON map would keep it.
#[derive(Debug, Default)]
pub struct RequestFields<'a> {
    pub kind: Option<Cow<'a, str>>,
    pub action: Option<Cow<'a, str>>,
    pub provider: Option<Cow<'a, str>>,
    pub tool: Option<Cow<'a, str>>,
    /// The credentials' JSON text: settings are read once per distinct text.
    pub credentials: Option<&'a RawValue>,
    pub tool_parameters: ToolParameters<'a>,
}

/// What `tool_parameters` held.
#[derive(Debug, Default)]
pub enum ToolParameters<'a> {
    /// Absent or `null`: no parameters.
    #[default]
    Absent,
    Object(Params<'a>),
    /// Something other than an object.
    NotObject,
}

impl<'de> Deserialize<'de> for RequestFields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = RequestFields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a request's data object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RequestFields<'de>, A::Error> {
                let mut data = RequestFields::default();
                while let Some(Name(name)) = map.next_key()? {
                    match &*name {
                        "type" => data.kind = map.next_value::<Text>()?.0,
                        "action" => data.action = map.next_value::<Text>()?.0,
                        "provider" => data.provider = map.next_value::<Text>()?.0,
                        "tool" => data.tool = map.next_value::<Text>()?.0,
                        "credentials" => data.credentials = Some(map.next_value()?),
                        "tool_parameters" => data.tool_parameters = map.next_value()?,
                        _ => drop(map.next_value::<IgnoredAny>()?),
                    }
                }
                Ok(data)
            }
        }
        d.deserialize_map(Members)
    }
}

/// A member that counts when it is a string (any other value is skipped and reads as None).
struct Text<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Owned(v.to_owned()))))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Some(Cow::Owned(v))))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_unit<E>(self) -> Result<Text<'de>, E> {
                Ok(Text(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Text<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
            // Objects, and numbers (serde_json's arbitrary precision hands them over as maps).
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Text<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Text(None))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for ToolParameters<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ToolParameters<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> Result<ToolParameters<'de>, E> {
                Ok(ToolParameters::Absent)
            }
            fn visit_bool<E>(self, _: bool) -> Result<ToolParameters<'de>, E> {
                Ok(ToolParameters::NotObject)
            }
            fn visit_i64<E>(self, _: i64) -> Result<ToolParameters<'de>, E> {
                Ok(ToolParameters::NotObject)
            }
            fn visit_u64<E>(self, _: u64) -> Result<ToolParameters<'de>, E> {
                Ok(ToolParameters::NotObject)
            }
            fn visit_f64<E>(self, _: f64) -> Result<ToolParameters<'de>, E> {
                Ok(ToolParameters::NotObject)
            }
            fn visit_str<E>(self, _: &str) -> Result<ToolParameters<'de>, E> {
                Ok(ToolParameters::NotObject)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolParameters<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(ToolParameters::NotObject)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ToolParameters<'de>, A::Error> {
                // A number arrives as a map whose only key is serde_json's (see `is_number_key`).
                match map.next_key::<Name>()? {
                    Some(Name(key)) if is_number_key(&key) => {
                        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                        Ok(ToolParameters::NotObject)
                    }
                    first => Params::read_members(first.map(|n| n.0), map).map(ToolParameters::Object),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::params::optional_str;

    #[test]
    fn one_pass_reads_the_members_dispatch_needs() {
        let text = r#"{"type":"tool","action":"invoke_tool","provider":5,"user_id":{"deep":[1,{"x":2}]},
            "credentials":{"kv_url":"redis://h"},"tool":"event_ingest","tool_parameters":{"event_id":"e\"1","n":1.50},
            "action":"invoke_tool"}"#;
        let d: RequestFields = serde_json::from_str(text).unwrap();
        assert_eq!(
            (d.kind.as_deref(), d.action.as_deref(), d.tool.as_deref()),
            (Some("tool"), Some("invoke_tool"), Some("event_ingest"))
        );
        assert_eq!(d.provider, None, "a number is not a provider name");
        assert_eq!(d.credentials.unwrap().get(), r#"{"kv_url":"redis://h"}"#);
        let ToolParameters::Object(p) = d.tool_parameters else { panic!("{:?}", d.tool_parameters) };
        assert_eq!(optional_str(&p, "event_id").unwrap().as_deref(), Some("e\"1"));
        assert_eq!(optional_str(&p, "n").unwrap().as_deref(), Some("1.50"));
        for (params, slot) in
            [("null", "Absent"), ("[1,{}]", "NotObject"), ("7", "NotObject"), ("\"x\"", "NotObject"), ("{}", "Object")]
        {
            let text = format!(r#"{{"tool_parameters":{params},"type":"tool"}}"#);
            let d: RequestFields = serde_json::from_str(&text).unwrap();
            assert!(format!("{:?}", d.tool_parameters).starts_with(slot), "{params}: {:?}", d.tool_parameters);
            assert_eq!(d.kind.as_deref(), Some("tool"), "the members after it are read");
        }
    }
}
