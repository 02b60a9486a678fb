//! Declarations (manifest, provider, tools) embedded from the package YAML files.
