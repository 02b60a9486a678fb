//! `keygen`: RSA key generation (primes from `num-bigint-dig`), PKCS#1 encoding, and the
//! two key files; a generated key is loaded into `ring` and signs and verifies before any
//! file is written, so a bad key can never be written.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use num_bigint_dig::{BigUint, ModInverse, RandPrime};
use num_integer::Integer;
use pkcs1::der::asn1::UintRef;
use pkcs1::der::Encode;

use super::error::KeygenError;
use super::keys::{pem_encode, public_key_from_pem, signable_bits, PrivateKey};

/// The public exponent every common tool uses (and `ring`'s minimum for a private key).
const E: u32 = 65537;

/// PKCS#1 `RSAPrivateKey` and `RSAPublicKey` DER of a fresh two-prime key of exactly `bits` bits.
fn generate_der(bits: usize) -> Result<(Vec<u8>, Vec<u8>), KeygenError> {
    let mut rng = rand::rngs::OsRng;
    let one = BigUint::from(1u32);
    let e = BigUint::from(E);
    loop {
        // gen_prime sets the top two bits, so the product has exactly `bits` bits.
        let a = rng.gen_prime(bits / 2);
        let b = rng.gen_prime(bits - bits / 2);
        // p > q, the order ring's consistency check assumes (the CRT coefficient is q⁻¹ mod p).
        let (p, q) = if a > b { (a, b) } else { (b, a) };
        if p == q {
            continue;
        }
        let (p1, q1) = (&p - &one, &q - &one);
        let lambda = p1.lcm(&q1);
        // e must be invertible mod λ(n); when it is not, draw new primes.
        let Some(d) = e.clone().mod_inverse(&lambda).and_then(|d| d.to_biguint()) else {
            continue;
        };
        let n = &p * &q;
        if n.bits() != bits {
            continue;
        }
        let (dp, dq) = (&d % &p1, &d % &q1);
        let Some(qinv) = q.clone().mod_inverse(&p).and_then(|x| x.to_biguint()) else {
            continue;
        };
        let parts: Vec<Vec<u8>> = [&n, &e, &d, &p, &q, &dp, &dq, &qinv].iter().map(|x| x.to_bytes_be()).collect();
        let uint = |i: usize| UintRef::new(&parts[i]).map_err(KeygenError::Encode);
        let private = pkcs1::RsaPrivateKey {
            modulus: uint(0)?,
            public_exponent: uint(1)?,
            private_exponent: uint(2)?,
            prime1: uint(3)?,
            prime2: uint(4)?,
            exponent1: uint(5)?,
            exponent2: uint(6)?,
            coefficient: uint(7)?,
            other_prime_infos: None,
        };
        let public = pkcs1::RsaPublicKey { modulus: uint(0)?, public_exponent: uint(1)? };
        let encode = |r: pkcs1::der::Result<Vec<u8>>| r.map_err(KeygenError::Encode);
        return Ok((encode(private.to_der())?, encode(public.to_der())?));
    }
}

/// Generates a key pair of `bits` bits (2048 to 4096 in steps of 512) and returns its private and public
/// PEM (64-character lines, exactly one final `\n`), after proving the pair works: `ring`
/// accepts the private key, and a signature it makes verifies with the public PEM as read back.
pub fn generate_pem_pair(bits: usize) -> Result<(String, String), KeygenError> {
    if !signable_bits(bits) {
        return Err(KeygenError::Bits(bits));
    }
    let (private_der, public_der) = generate_der(bits)?;
    let private_pem = pem_encode("RSA PRIVATE KEY", &private_der);
    let public_pem = pem_encode("RSA PUBLIC KEY", &public_der);
    let key = PrivateKey::from_pkcs1_der(&private_der).map_err(KeygenError::SelfCheck)?;
    let public = public_key_from_pem(public_pem.as_bytes()).map_err(KeygenError::SelfCheck)?;
    let probe = b"stateful-tool keygen self-check";
    let signature = key.sign_pkcs1_sha256(probe).map_err(KeygenError::SelfCheck)?;
    if public != key.public_key() || !public.verify_pkcs1_sha256(probe, &signature) || public.bits() != bits {
        return Err(KeygenError::SelfCheckMismatch);
    }
    Ok((private_pem, public_pem))
}

fn create_new(path: &Path, mode: u32, text: &str) -> Result<(), KeygenError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|source| KeygenError::Create { path: path.to_path_buf(), source })?;
    // The umask may have narrowed the mode; set it exactly.
    file.set_permissions(fs::Permissions::from_mode(mode))
        .and_then(|()| file.write_all(text.as_bytes()))
        .and_then(|()| file.sync_all())
        .map_err(|source| {
            // A half-written key file is worse than none.
            let _ = fs::remove_file(path);
            KeygenError::Write { path: path.to_path_buf(), source }
        })
}

/// Makes sure `dir` exists (creating it, and missing parents, mode 0700: it will hold a
/// private key) and that a file can be created in it, so that a bad destination fails
/// before the slow key generation and before anything is written.
fn prepare_dir(dir: &Path) -> Result<(), KeygenError> {
    match fs::metadata(dir) {
        Ok(m) if !m.is_dir() => return Err(KeygenError::NotDirectory(dir.to_path_buf())),
        Ok(_) => {}
        Err(_) => fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| KeygenError::CreateDirectory { path: dir.to_path_buf(), source })?,
    }
    let probe = dir.join(format!(".keygen-probe-{}", std::process::id()));
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&probe)
        .map_err(|source| KeygenError::Probe { path: dir.to_path_buf(), source })?;
    fs::remove_file(&probe).map_err(|source| KeygenError::RemoveProbe { path: probe, source })
}

/// Writes `NAME.private.pem` (0600) and `NAME.public.pem` (0644) into `dir`; refuses to
/// overwrite either file, checking before spending time on key generation. Either both
/// files are written or neither is left behind.
pub fn write_key_pair(dir: &Path, name: &str, bits: usize) -> Result<(PathBuf, PathBuf), KeygenError> {
    if name.is_empty() || name.contains('/') {
        return Err(KeygenError::Name(name.to_string()));
    }
    if !signable_bits(bits) {
        return Err(KeygenError::Bits(bits));
    }
    let private = dir.join(format!("{name}.private.pem"));
    let public = dir.join(format!("{name}.public.pem"));
    for path in [&private, &public] {
        if fs::symlink_metadata(path).is_ok() {
            return Err(KeygenError::Exists(path.clone()));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::KeyError;

    #[test]
    fn keys_ring_cannot_sign_with_are_refused_when_loaded_and_good_ones_round_trip() {
        let (der, _) = generate_der(1024).unwrap();
        let err = PrivateKey::from_pkcs1_der(&der).err().expect("a 1024-bit key is refused");
        assert!(matches!(err, KeyError::Unsignable(1024)), "{err}");
        let (private, public) = generate_pem_pair(2048).unwrap();
        let key = super::super::keys::private_key_from_pem(private.as_bytes()).unwrap();
        let public = public_key_from_pem(public.as_bytes()).unwrap();
        assert_eq!((key.public_key().bits(), public.bits()), (2048, 2048));
        let signature = key.sign_pkcs1_sha256(b"data").unwrap();
        assert!(public.verify_pkcs1_sha256(b"data", &signature));
        assert!(!public.verify_pkcs1_sha256(b"date", &signature));
        assert!(matches!(generate_pem_pair(2056), Err(KeygenError::Bits(2056))));
    }
}
