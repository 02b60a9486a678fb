//! Declarations (manifest, provider, tools) embedded from the package YAML files.
//! (Temporary stub until the declaration files land.)

pub fn tool(_name: &str) -> Option<&'static serde_json::Value> {
    None
}
