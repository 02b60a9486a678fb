//! Certificates for the KV container's TLS tests, made by the test itself (rcgen): a CA, a
//! server certificate for 127.0.0.1 it signed, an expired one, one for another name, client
//! certificates, and a second CA that signs a client certificate the server must refuse.

use std::path::{Path, PathBuf};

use rcgen::{
    date_time_ymd, BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

/// A directory of PEM files, removed on drop. Each `name` has `<name>.pem` and `<name>.key`.
pub(crate) struct Pki {
    dir: tempfile::TempDir,
}

struct Ca {
    cert: Certificate,
    key: KeyPair,
}

fn ca(name: &str) -> Ca {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate().unwrap();
    Ca { cert: p.self_signed(&key).unwrap(), key }
}

/// A leaf for `names` (DNS names; `127.0.0.1` becomes an IP address), for a server or a client.
fn leaf(issuer: &Ca, names: &[&str], client: bool, expired: bool) -> (Certificate, KeyPair) {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(DnType::CommonName, names[0]);
    for n in names {
        p.subject_alt_names.push(match n.parse() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName((*n).try_into().unwrap()),
        });
    }
    p.extended_key_usages =
        vec![if client { ExtendedKeyUsagePurpose::ClientAuth } else { ExtendedKeyUsagePurpose::ServerAuth }];
    if expired {
        p.not_before = date_time_ymd(2020, 1, 1);
        p.not_after = date_time_ymd(2020, 1, 2);
    }
    let key = KeyPair::generate().unwrap();
    (p.signed_by(&key, &issuer.cert, &issuer.key).unwrap(), key)
}

impl Pki {
    pub(crate) fn make() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, cert: &Certificate, key: &KeyPair| {
            std::fs::write(dir.path().join(format!("{name}.pem")), cert.pem()).unwrap();
            std::fs::write(dir.path().join(format!("{name}.key")), key.serialize_pem()).unwrap();
        };
        let (root, other) = (ca("kv-test-ca"), ca("kv-other-ca"));
        write("ca", &root.cert, &root.key);
        write("other-ca", &other.cert, &other.key);
        for (name, issuer, names, client, expired) in [
            ("server", &root, &["127.0.0.1", "localhost"][..], false, false),
            ("expired", &root, &["127.0.0.1"][..], false, true),
            ("wrong-name", &root, &["kv.elsewhere.example"][..], false, false),
            ("client", &root, &["plugin"][..], true, false),
            ("other-client", &other, &["plugin"][..], true, false),
        ] {
            let (cert, key) = leaf(issuer, names, client, expired);
            write(name, &cert, &key);
        }
        Pki { dir }
    }

    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `<name>.pem`.
    pub(crate) fn cert(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.pem"))
    }

    /// `<name>.key`.
    pub(crate) fn key(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.key"))
    }

    /// `kv serve` arguments serving `name`'s certificate.
    pub(crate) fn serve_args(&self, name: &str) -> Vec<String> {
        let (cert, key) = (self.cert(name), self.key(name));
        vec!["--tls-cert".into(), cert.display().to_string(), "--tls-key".into(), key.display().to_string()]
    }
}
