//! Building, signing and verifying the .difypkg.
//!
//! [`build_package`] validates an allow-listed source tree and builds a deterministic zip;
//! [`write_key_pair`], [`sign_package`] and [`verify_bytes`] implement the daemon's signature
//! scheme byte for byte; the `validate_*` functions check a tree, an unzipped package or
//! package bytes by the daemon's and the SDK's rules. The library neither prints nor exits:
//! every failure is a typed error with its cause as `source()`, and the `stateful-tool` CLI
//! decides what to say. This file is the whole public surface; every module is private.
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
mod checksum;
mod decl_check;
mod error;
mod field_rules;
mod gofs;
mod keygen;
mod keys;
mod layout;
mod manifest_rules;
mod pack;
mod patterns;
#[cfg(test)]
mod reader_tests;
mod runtime_rules;
mod sign;
mod tool_rules;
mod trigger_rules;
mod validate;
mod verify;
mod yamlcheck;
mod zipread;

// The archive: the target architectures, the strict reader and the deterministic writer.
pub use arch::Arch;
pub use archive::{read_package, write_zip, Package, PackageFile};
// Building a package from a source tree.
pub use pack::{build_package, build_package_with_readme, plan_package, write_atomically, Built, Plan};
// Validation, and the vocabularies the daemon and the SDK accept in declarations.
pub use manifest_rules::MANIFEST_TAGS;
pub use tool_rules::{PARAMETER_FORMS, PARAMETER_TYPES, PROVIDER_TAGS};
pub use validate::{
    validate_package_bytes, validate_package_dir, validate_plugin_dir, validate_trigger_event,
    validate_trigger_provider, Problem, Report,
};
// Keys, signing and verification, as the daemon does them.
pub use keygen::{generate_pem_pair, write_key_pair};
pub use keys::{
    load_private_key, load_public_key, official_public_key, private_key_from_pem, public_key_from_pem, PrivateKey,
    PublicKey, OFFICIAL_PUBLIC_KEY_PEM,
};
pub use sign::{sign_package, Category, Signed};
pub use verify::{verify_bytes, CategoryInfo, Verification, Verified};
// The errors, each with its cause as `source()`.
pub use error::{
    ArchiveError, CategoryError, ChecksumError, CommentError, EntryError, EntryRefusal, KeyError, KeygenError,
    NameError, ReadError, SignError, ValidationError, VerifyError, ZipError,
};
