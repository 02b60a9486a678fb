//! RSA key files: PKCS#1 PEM only, parsed as strictly as the daemon's Go loader; `ring`
//! holds the private key and verifies, so no RSA arithmetic of our own touches a secret.

use std::fs;
use std::path::Path;

use base64::alphabet::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use pkcs1::der::Decode;
use ring::signature::{RsaKeyPair, RsaPublicKeyComponents, RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY};

use super::error::KeyError;

/// The marketplace key embedded in the daemon (`pkg/license/public_key/PUBLIC_KEY.pem`).
pub const OFFICIAL_PUBLIC_KEY_PEM: &str = include_str!("official_marketplace.public.pem");

/// Go's `base64.StdEncoding`: padding required, `\r`/`\n` skipped, non-zero trailing
/// bits tolerated (the encoding is not `Strict`).
pub(crate) fn go_std_base64(text: &[u8]) -> Result<Vec<u8>, base64::DecodeError> {
    const ENGINE: GeneralPurpose = GeneralPurpose::new(
        &STANDARD,
        GeneralPurposeConfig::new()
            .with_decode_padding_mode(DecodePaddingMode::RequireCanonical)
            .with_decode_allow_trailing_bits(true),
    );
    let cleaned: Vec<u8> = text.iter().copied().filter(|b| *b != b'\r' && *b != b'\n').collect();
    ENGINE.decode(cleaned)
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
fn pem_block(data: &[u8], want: &'static str, what: &'static str) -> Result<Vec<u8>, KeyError> {
    match pem_decode(data) {
        None => Err(KeyError::NoPem { want }),
        Some((ty, _, _)) if ty != want => {
            let hint = match ty.as_str() {
                "PUBLIC KEY" => {
                    " (that is SPKI; the daemon needs PKCS#1: `openssl rsa -pubin -in KEY -RSAPublicKey_out`)"
                }
                "PRIVATE KEY" => " (that is PKCS#8; the daemon needs PKCS#1: `openssl rsa -in KEY -traditional`)",
                _ => "",
            };
            Err(KeyError::WrongType { found: ty, want, what, hint })
        }
        Some((_, _, rest)) if !rest.is_empty() => Err(KeyError::TrailingData),
        Some((_, der, _)) => Ok(der),
    }
}

/// Public keys we verify with: 1024 bits (the daemon's Go loader refuses less) up to 8192
/// (the most `ring` verifies).
pub(crate) const PUBLIC_KEY_BITS: std::ops::RangeInclusive<usize> = 1024..=8192;
/// Private keys we sign with: what `ring` signs with (also a multiple of 512 bits, see
/// [`signable_bits`]).
pub(crate) const PRIVATE_KEY_BITS: std::ops::RangeInclusive<usize> = 2048..=4096;

/// Whether `ring` signs with a key of this size: 2048, 2560, 3072, 3584 or 4096 bits.
pub(crate) fn signable_bits(bits: usize) -> bool {
    PRIVATE_KEY_BITS.contains(&bits) && bits.is_multiple_of(512)
}

/// Bit length of a big-endian unsigned integer.
pub(super) fn bit_len(be: &[u8]) -> usize {
    match be.iter().position(|b| *b != 0) {
        Some(i) => (be.len() - i) * 8 - be[i].leading_zeros() as usize,
        None => 0,
    }
}

/// An RSA public key: modulus and exponent, big-endian without leading zeros.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey {
    n: Vec<u8>,
    e: Vec<u8>,
}

impl PublicKey {
    /// Checks what `ring` will need to verify with the key, so an unusable key is reported
    /// when it is loaded instead of as a signature mismatch.
    fn new(n: &[u8], e: &[u8]) -> Result<PublicKey, KeyError> {
        let strip = |x: &[u8]| x[x.iter().position(|b| *b != 0).unwrap_or(x.len())..].to_vec();
        let (n, e) = (strip(n), strip(e));
        let bits = bit_len(&n);
        if bits < *PUBLIC_KEY_BITS.start() {
            return Err(KeyError::TooSmall(bits));
        }
        if bits > *PUBLIC_KEY_BITS.end() {
            return Err(KeyError::TooLarge(bits));
        }
        if n.last().is_some_and(|b| b & 1 == 0) {
            return Err(KeyError::EvenModulus);
        }
        let e_value = e.iter().fold(0u64, |acc, b| acc.saturating_mul(256).saturating_add(u64::from(*b)));
        if e.len() > 5 || !(3..=(1 << 33) - 1).contains(&e_value) || e_value & 1 == 0 {
            return Err(KeyError::Exponent);
        }
        Ok(PublicKey { n, e })
    }

    /// Modulus size in bits.
    pub(crate) fn bits(&self) -> usize {
        bit_len(&self.n)
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256 over `message`, as Go's `rsa.VerifyPKCS1v15` checks it
    /// (the signature must be exactly as long as the modulus).
    pub(crate) fn verify_pkcs1_sha256(&self, message: &[u8], signature: &[u8]) -> bool {
        let key = RsaPublicKeyComponents { n: &self.n, e: &self.e };
        key.verify(&RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY, message, signature).is_ok()
    }
}

/// An RSA private key, validated and held by `ring` (constant-time private-key operations).
pub struct PrivateKey {
    pair: RsaKeyPair,
}

impl PrivateKey {
    /// From PKCS#1 `RSAPrivateKey` DER; `ring` checks the key's consistency.
    pub(crate) fn from_pkcs1_der(der: &[u8]) -> Result<PrivateKey, KeyError> {
        let parsed = pkcs1::RsaPrivateKey::from_der(der).map_err(KeyError::NotPrivateKey)?;
        let bits = bit_len(parsed.modulus.as_bytes());
        if !signable_bits(bits) {
            return Err(KeyError::Unsignable(bits));
        }
        let pair = RsaKeyPair::from_der(der).map_err(KeyError::Rejected)?;
        Ok(PrivateKey { pair })
    }

    /// The public half, to verify what this key signed.
    pub fn public_key(&self) -> PublicKey {
        let parts: RsaPublicKeyComponents<Vec<u8>> = self.pair.public().into();
        PublicKey { n: parts.n, e: parts.e }
    }

    /// RSASSA-PKCS1-v1_5 over SHA-256(`data`). The signature is deterministic, so it is
    /// byte-identical to any correct signer's.
    pub(crate) fn sign_pkcs1_sha256(&self, data: &[u8]) -> Result<Vec<u8>, KeyError> {
        let mut signature = vec![0; self.pair.public().modulus_len()];
        self.pair
            .sign(&ring::signature::RSA_PKCS1_SHA256, &ring::rand::SystemRandom::new(), data, &mut signature)
            .map_err(|_| KeyError::Signing)?;
        Ok(signature)
    }
}

/// Parses a PKCS#1 `RSA PUBLIC KEY` PEM: 1024 to 8192 bits (`PUBLIC_KEY_BITS`).
pub fn public_key_from_pem(data: &[u8]) -> Result<PublicKey, KeyError> {
    let der = pem_block(data, "RSA PUBLIC KEY", "public key")?;
    let parsed = pkcs1::RsaPublicKey::from_der(&der).map_err(KeyError::NotPublicKey)?;
    PublicKey::new(parsed.modulus.as_bytes(), parsed.public_exponent.as_bytes())
}

/// Parses a PKCS#1 `RSA PRIVATE KEY` PEM of a size `ring` signs with (`signable_bits`).
pub fn private_key_from_pem(data: &[u8]) -> Result<PrivateKey, KeyError> {
    PrivateKey::from_pkcs1_der(&pem_block(data, "RSA PRIVATE KEY", "private key")?)
}

/// PEM text the way `openssl` writes it: 64-character lines, one final `\n`.
pub(super) fn pem_encode(label: &str, der: &[u8]) -> String {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut text = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        text.push_str(std::str::from_utf8(line).unwrap_or_default());
        text.push('\n');
    }
    text.push_str(&format!("-----END {label}-----\n"));
    text
}

/// Reads a key file and parses it with `parse`; either error names the file.
fn load_key<K>(path: &Path, parse: fn(&[u8]) -> Result<K, KeyError>) -> Result<K, KeyError> {
    let data = fs::read(path).map_err(|source| KeyError::Read { path: path.to_path_buf(), source })?;
    parse(&data).map_err(|e| KeyError::File { path: path.to_path_buf(), source: Box::new(e) })
}

/// Loads a PKCS#1 `RSA PUBLIC KEY` PEM file, as [`public_key_from_pem`] parses it.
pub fn load_public_key(path: &Path) -> Result<PublicKey, KeyError> {
    load_key(path, public_key_from_pem)
}

/// Loads a PKCS#1 `RSA PRIVATE KEY` PEM file, as [`private_key_from_pem`] parses it.
pub fn load_private_key(path: &Path) -> Result<PrivateKey, KeyError> {
    load_key(path, private_key_from_pem)
}

pub fn official_public_key() -> PublicKey {
    public_key_from_pem(OFFICIAL_PUBLIC_KEY_PEM.as_bytes()).expect("the embedded official key is valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DER of a PKCS#1 `RSAPublicKey` (lengths up to 65535 bytes).
    fn public_der(n: &[u8], e: &[u8]) -> Vec<u8> {
        fn tlv(tag: u8, body: &[u8]) -> Vec<u8> {
            let len = body.len();
            let mut out = vec![tag];
            match len {
                0..=127 => out.push(len as u8),
                128..=255 => out.extend([0x81, len as u8]),
                _ => out.extend([0x82, (len >> 8) as u8, len as u8]),
            }
            out.extend_from_slice(body);
            out
        }
        // DER: a leading zero only where the top bit would make the integer negative.
        let int = |x: &[u8]| tlv(0x02, &[if x[0] & 0x80 != 0 { &[0u8][..] } else { &[] }, x].concat());
        tlv(0x30, &[int(n), int(e)].concat())
    }

    fn key_of(n_bits: usize, e: &[u8]) -> Result<PublicKey, KeyError> {
        let mut n = vec![0xffu8; n_bits.div_ceil(8)];
        n[0] >>= (8 - n_bits % 8) % 8;
        public_key_from_pem(pem_encode("RSA PUBLIC KEY", &public_der(&n, e)).as_bytes())
    }

    #[test]
    fn public_keys_outside_what_ring_verifies_are_refused_when_loaded() {
        assert_eq!(key_of(1024, &[1, 0, 1]).unwrap().bits(), 1024);
        assert_eq!(key_of(8192, &[3]).unwrap().bits(), 8192);
        assert!(matches!(key_of(1023, &[1, 0, 1]), Err(KeyError::TooSmall(1023))));
        assert!(matches!(key_of(8193, &[1, 0, 1]), Err(KeyError::TooLarge(8193))));
        for e in [&[1u8][..], &[2], &[1, 0, 0], &[2, 0, 0, 0, 1]] {
            assert!(matches!(key_of(2048, e), Err(KeyError::Exponent)), "{e:?}");
        }
        let official = official_public_key();
        assert_eq!(official.bits(), 4096);
        assert!(!official.verify_pkcs1_sha256(b"x", &[0; 512]));
    }

    #[test]
    fn pem_lines_are_64_characters_with_one_final_newline() {
        let text = pem_encode("RSA PUBLIC KEY", &[7u8; 100]);
        assert!(
            text.starts_with("-----BEGIN RSA PUBLIC KEY-----\n") && text.ends_with("-----END RSA PUBLIC KEY-----\n")
        );
        assert_eq!(text.lines().nth(1).unwrap().len(), 64);
        assert_eq!(pem_block(text.as_bytes(), "RSA PUBLIC KEY", "public key").unwrap(), vec![7u8; 100]);
    }
}
