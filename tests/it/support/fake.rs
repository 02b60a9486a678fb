//! Misbehaving stores for fault tests: one that never answers, one that answers nonsense.

use std::io::{Read, Write};
use std::net::TcpListener;

/// Accepts connections and never answers (a store slower than any timeout). Returns its port.
pub(crate) fn silent_store() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = vec![];
        for c in l.incoming().flatten() {
            held.push(c);
        }
    });
    port
}

/// Answers every request on every connection with `response` (raw bytes), then closes.
pub(crate) fn canned_store(response: &'static [u8]) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let _ = c.set_read_timeout(Some(std::time::Duration::from_millis(200)));
                let _ = c.read(&mut buf);
                let _ = c.write_all(response);
            });
        }
    });
    port
}

/// A port with nothing listening (connection refused).
pub(crate) fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
