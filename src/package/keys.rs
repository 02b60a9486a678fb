//! RSA key files: PKCS#1 PEM only, parsed as strictly as the daemon's Go loader, and keygen.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::alphabet::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use rsa::pkcs1::der::Decode;
use rsa::pkcs1::{DecodeRsaPrivateKey, EncodeRsaPrivateKey, EncodeRsaPublicKey, LineEnding};
use rsa::traits::PublicKeyParts;
use rsa::{BigUint, RsaPrivateKey, RsaPublicKey};

/// The marketplace key embedded in the daemon (`pkg/license/public_key/PUBLIC_KEY.pem`).
pub const OFFICIAL_PUBLIC_KEY_PEM: &str = include_str!("official_marketplace.public.pem");

/// Go's `base64.StdEncoding`: padding required, `\r`/`\n` skipped, non-zero trailing
/// bits tolerated (the encoding is not `Strict`).
pub fn go_std_base64(text: &[u8]) -> Result<Vec<u8>, String> {
    const ENGINE: GeneralPurpose = GeneralPurpose::new(
        &STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
            .with_decode_allow_trailing_bits(true),
    );
    let cleaned: Vec<u8> = text.iter().copied().filter(|b| *b != b'\r' && *b != b'\n').collect();
    ENGINE.decode(cleaned).map_err(|e| e.to_string())
}

/// Go's `getLine`: the line without its break and trailing blanks, and what follows it.
fn get_line(data: &[u8]) -> (&[u8], &[u8]) {
    let (line, rest) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &data[data.len()..]),
    };
    let end = line.iter().rposition(|b| !matches!(b, b' ' | b'\t' | b'\r')).map_or(0, |i| i + 1);
    (&line[..end], rest)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Go's `pem.Decode` (without header support): the first well-formed block's type and
/// DER bytes, and the data after its END line.
fn pem_decode(data: &[u8]) -> Option<(String, Vec<u8>, &[u8])> {
    let mut rest = data;
    loop {
        rest = if let Some(r) = rest.strip_prefix(b"-----BEGIN ") {
            r
        } else {
            let i = find(rest, b"\n-----BEGIN ")?;
            &rest[i + 12..]
        };
        let (type_line, after) = get_line(rest);
        rest = after;
        let Some(ty) = type_line.strip_suffix(b"-----") else {
            continue;
        };
        let (end, trailer_at) = if rest.starts_with(b"-----END ") {
            (0, 9)
        } else {
            match find(rest, b"\n-----END ") {
                Some(i) => (i, i + 10),
                None => continue,
            }
        };
        let trailer = &rest[trailer_at..];
        let Some(after_end) = trailer.strip_prefix(ty).and_then(|t| t.strip_prefix(b"-----")) else {
            continue;
        };
        if !get_line(after_end).0.is_empty() {
            continue;
        }
        let body: Vec<u8> = rest[..end].iter().copied().filter(|b| *b != b' ' && *b != b'\t').collect();
        let Ok(der) = go_std_base64(&body) else {
            continue;
        };
        return Some((String::from_utf8_lossy(ty).into_owned(), der, get_line(after_end).1));
    }
}

/// The daemon's `LoadPublicKey`/`LoadPrivateKey` framing: one PEM block of type `want`,
/// nothing after its END line but one line break.
fn pem_block(data: &[u8], want: &str, what: &str) -> Result<Vec<u8>, String> {
    match pem_decode(data) {
        None => Err(format!("no PEM block found (expected `-----BEGIN {want}-----`)")),
        Some((ty, _, _)) if ty != want => {
            let hint = match ty.as_str() {
                "PUBLIC KEY" => {
                    " (that is SPKI; the daemon needs PKCS#1: `openssl rsa -pubin -in KEY -RSAPublicKey_out`)"
                }
                "PRIVATE KEY" => " (that is PKCS#8; the daemon needs PKCS#1: `openssl rsa -in KEY -traditional`)",
                _ => "",
            };
            Err(format!("found a `{ty}` PEM block, but the {what} must be `{want}` (PKCS#1){hint}"))
        }
        Some((_, _, rest)) if !rest.is_empty() => {
            Err("extra data included in the PEM block: nothing may follow the END line except one line break".into())
        }
        Some((_, der, _)) => Ok(der),
    }
}

/// Parses a PKCS#1 `RSA PUBLIC KEY` PEM. Like Go's crypto/rsa, keys under 1024 bits are
/// refused; keys up to 16384 bits are accepted.
pub fn public_key_from_pem(data: &[u8]) -> Result<RsaPublicKey, String> {
    let der = pem_block(data, "RSA PUBLIC KEY", "public key")?;
    let parsed = rsa::pkcs1::RsaPublicKey::from_der(&der).map_err(|e| format!("not a PKCS#1 RSA public key: {e}"))?;
    let n = BigUint::from_bytes_be(parsed.modulus.as_bytes());
    let e = BigUint::from_bytes_be(parsed.public_exponent.as_bytes());
    let key = RsaPublicKey::new_with_max_size(n, e, 16384).map_err(|e| format!("unusable RSA public key: {e}"))?;
    if key.n().bits() < 1024 {
        return Err(format!("the key has {} bits; the daemon refuses keys under 1024 bits", key.n().bits()));
    }
    Ok(key)
}

/// Parses a PKCS#1 `RSA PRIVATE KEY` PEM.
pub fn private_key_from_pem(data: &[u8]) -> Result<RsaPrivateKey, String> {
    let der = pem_block(data, "RSA PRIVATE KEY", "private key")?;
    RsaPrivateKey::from_pkcs1_der(&der).map_err(|e| format!("not a PKCS#1 RSA private key: {e}"))
}

fn read_key_file(path: &Path) -> Result<Vec<u8>, String> {
    fs::read(path).map_err(|e| format!("key file {}: {e}", path.display()))
}

pub fn load_public_key(path: &Path) -> Result<RsaPublicKey, String> {
    public_key_from_pem(&read_key_file(path)?).map_err(|e| format!("key file {}: {e}", path.display()))
}

pub fn load_private_key(path: &Path) -> Result<RsaPrivateKey, String> {
    private_key_from_pem(&read_key_file(path)?).map_err(|e| format!("key file {}: {e}", path.display()))
}

pub fn official_public_key() -> RsaPublicKey {
    public_key_from_pem(OFFICIAL_PUBLIC_KEY_PEM.as_bytes()).expect("the embedded official key is valid")
}

/// Generates a key pair; both PEMs use 64-character lines and end in exactly one `\n`.
pub fn generate_pem_pair(bits: usize) -> Result<(String, String), String> {
    if !(1024..=16384).contains(&bits) {
        return Err(format!("--bits {bits}: choose 1024 to 16384 (4096 recommended)"));
    }
    let key = RsaPrivateKey::new(&mut rand::rngs::OsRng, bits).map_err(|e| format!("key generation failed: {e}"))?;
    let private = key.to_pkcs1_pem(LineEnding::LF).map_err(|e| e.to_string())?;
    let public = key.to_public_key().to_pkcs1_pem(LineEnding::LF).map_err(|e| e.to_string())?;
    Ok((private.to_string(), public))
}

fn create_new(path: &Path, mode: u32, text: &str) -> Result<(), String> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    // The umask may have narrowed the mode; set it exactly.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .and_then(|()| file.write_all(text.as_bytes()))
        .and_then(|()| file.sync_all())
        .map_err(|e| {
            // A half-written key file is worse than none.
            let _ = fs::remove_file(path);
            format!("cannot write {}: {e}", path.display())
        })
}

/// Makes sure `dir` exists (creating it, and missing parents, mode 0700: it will hold a
/// private key) and that a file can be created in it, so that a bad destination fails
/// before the slow key generation and before anything is written.
fn prepare_dir(dir: &Path) -> Result<(), String> {
    match fs::metadata(dir) {
        Ok(m) if !m.is_dir() => {
            return Err(format!("--out-dir {}: that path is a file, not a directory", dir.display()))
        }
        Ok(_) => {}
        Err(_) => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("cannot create the directory {}: {e}", dir.display()))?,
    }
    let probe = dir.join(format!(".keygen-probe-{}", std::process::id()));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&probe)
        .map_err(|e| format!("cannot write into {}: {e}", dir.display()))?;
    fs::remove_file(&probe).map_err(|e| format!("cannot remove {}: {e}", probe.display()))
}

/// Writes `NAME.private.pem` (0600) and `NAME.public.pem` (0644) into `dir`; refuses to
/// overwrite either file, checking before spending time on key generation. Either both
/// files are written or neither is left behind.
pub fn write_key_pair(dir: &Path, name: &str, bits: usize) -> Result<(PathBuf, PathBuf), String> {
    if name.is_empty() || name.contains('/') {
        return Err(format!("--name `{name}`: must be a plain file name prefix"));
    }
    if !(1024..=16384).contains(&bits) {
        return Err(format!("--bits {bits}: choose 1024 to 16384 (4096 recommended)"));
    }
    let private = dir.join(format!("{name}.private.pem"));
    let public = dir.join(format!("{name}.public.pem"));
    for path in [&private, &public] {
        if fs::symlink_metadata(path).is_ok() {
            return Err(format!("{} already exists; refusing to overwrite it", path.display()));
        }
    }
    prepare_dir(dir)?;
    let (private_pem, public_pem) = generate_pem_pair(bits)?;
    create_new(&private, 0o600, &private_pem)?;
    if let Err(e) = create_new(&public, 0o644, &public_pem) {
        // A private key without its public half is useless and a secret left lying around.
        let _ = fs::remove_file(&private);
        return Err(e);
    }
    Ok((private, public))
}
