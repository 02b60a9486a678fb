//! Certificates for TLS tests, made by the test itself with openssl: a CA, a server
//! certificate for 127.0.0.1 it signed, an expired one, and a second CA that signed nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::redis::Access;

const MAKE_CERTS: &str = r"
set -e
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca
openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.pem -days 2 -subj /CN=other-ca
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1
printf 'subjectAltName=IP:127.0.0.1\n' > san.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile san.ext
touch index.txt; echo 1000 > serial
printf '[ca]\ndefault_ca=d\n[d]\ndatabase=index.txt\nserial=serial\nnew_certs_dir=.\ndefault_md=sha256\npolicy=p\n[p]\ncommonName=supplied\n' > ca.cnf
openssl ca -batch -notext -config ca.cnf -cert ca.pem -keyfile ca.key -in server.csr -out expired.pem \
  -startdate 20200101000000Z -enddate 20200102000000Z -extfile san.ext
";

/// A directory of certificates, removed on drop.
pub(crate) struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    pub(crate) fn make() -> Certs {
        let dir = tempfile::tempdir().unwrap();
        let out =
            Command::new("bash").arg("-c").arg(MAKE_CERTS).current_dir(dir.path()).output().expect("bash and openssl");
        assert!(out.status.success(), "making the test CA failed: {}", String::from_utf8_lossy(&out.stderr));
        Certs { dir }
    }

    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA that signed the server certificates.
    pub(crate) fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A CA that signed none of them: trusting it alone must refuse every server.
    pub(crate) fn other_ca(&self) -> PathBuf {
        self.dir.path().join("other-ca.pem")
    }

    /// TLS-only access with these certificates, and `password` if any.
    pub(crate) fn access(&self, password: Option<&str>) -> Access {
        Access { tls: Some(self.dir.path().to_owned()), password: password.map(str::to_owned) }
    }
}
