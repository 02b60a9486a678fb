//! Building, signing and verifying the .difypkg.
//!
//! [`pack::build_package`] validates an allow-listed source tree and builds a deterministic
//! zip; [`keys`], [`sign`] and [`verify`] implement the daemon's signature scheme byte for
//! byte. The library neither prints nor exits: every failure is a typed error with its cause
//! as `source()`, and the `stateful-tool` CLI decides what to say.
//!
//! Package contents: `manifest.yaml`, `README.md`, `PRIVACY.md`, `requirements.txt`,
//! `main.py`, the provider YAML named in `plugins.tools`, the tool YAML it lists, the
//! icons named by manifest and provider (under `_assets/`), and `bin/stateful-tool-<arch>`
//! per binary. Nothing else from the source tree is read, except the README file given
//! instead, packaged as `README.md`. When the packaged arches differ
//! from `meta.arch`, the manifest written into the package has its `arch:` list replaced
//! by exactly the packaged arches (only those lines change; the source file is untouched)
//! and the build's notes say so.

mod arch;
mod archive;
pub mod checksum;
mod decl_check;
mod error;
mod field_rules;
pub mod gofs;
mod keygen;
pub mod keys;
mod layout;
pub mod manifest_rules;
pub mod pack;
mod patterns;
mod runtime_rules;
pub mod sign;
pub mod tool_rules;
pub mod trigger_rules;
mod validate;
pub mod verify;
pub mod yamlcheck;
pub mod zipread;

pub use arch::Arch;
pub use archive::{read_package, write_zip, Package, PackageFile};
pub use error::{
    ArchiveError, CategoryError, ChecksumError, CommentError, EntryError, EntryRefusal, KeyError, KeygenError,
    NameError, ReadError, SignError, ValidationError, VerifyError, ZipError,
};
pub use validate::{validate_package_bytes, validate_package_dir, validate_plugin_dir, Problem, Report};
