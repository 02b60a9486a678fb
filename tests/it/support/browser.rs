//! A real headless Chromium (Debian's `chromium` + `chromium-driver`, installed by
//! scripts/ensure-ui-tools.sh) driven over WebDriver: chromedriver speaks JSON over HTTP, so
//! reqwest and serde_json are the whole client.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// The W3C name of an element reference in WebDriver answers.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

pub(crate) struct Browser {
    driver: Child,
    port: u16,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on an ephemeral loopback port and opens a session of a fresh,
    /// headless Chromium that talks to nothing but the pages it is sent to.
    pub(crate) async fn start() -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut driver = Command::new("chromedriver")
            .args(["--port=0", "--allowed-ips=127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver is missing: run scripts/ensure-ui-tools.sh (as root) to install chromium-driver");
        let port = started_port(&mut driver);
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
        ];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}}}});
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        let mut b = Browser { driver, port, session: String::new(), http, _profile: profile };
        let answer = b.call(reqwest::Method::POST, "/session", Some(caps)).await;
        b.session = answer["sessionId"].as_str().expect("a session id").to_owned();
        b
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let mut req = self.http.request(method.clone(), &url);
        if let Some(b) = body {
            req = req.header("content-type", "application/json").body(b.to_string());
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status();
        let v: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
        assert!(status.is_success(), "WebDriver {method} {path}: {status} {v}");
        v["value"].clone()
    }

    async fn session_call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body).await
    }

    pub(crate) async fn goto(&self, url: &str) {
        self.session_call(reqwest::Method::POST, "/url", Some(json!({"url": url}))).await;
    }

    /// The element `css` selects (WebDriver waits for nothing: callers poll first).
    pub(crate) async fn find(&self, css: &str) -> String {
        let v = self
            .session_call(reqwest::Method::POST, "/element", Some(json!({"using": "css selector", "value": css})))
            .await;
        v[ELEMENT].as_str().unwrap_or_else(|| panic!("no element {css}: {v}")).to_owned()
    }

    /// Types `text` into the element, as keystrokes.
    pub(crate) async fn type_into(&self, css: &str, text: &str) {
        let id = self.find(css).await;
        let path = format!("/element/{id}/value");
        self.session_call(reqwest::Method::POST, &path, Some(json!({"text": text}))).await;
    }

    pub(crate) async fn click(&self, css: &str) {
        let id = self.find(css).await;
        self.session_call(reqwest::Method::POST, &format!("/element/{id}/click"), Some(json!({}))).await;
    }

    /// Runs `script` (a function body) in the page and returns what it returns.
    pub(crate) async fn eval(&self, script: &str) -> Value {
        self.session_call(reqwest::Method::POST, "/execute/sync", Some(json!({"script": script, "args": []}))).await
    }

    /// Polls `script` until it returns something other than null/false, within `limit`.
    pub(crate) async fn wait_for(&self, what: &str, script: &str, limit: Duration) -> Value {
        let deadline = Instant::now() + limit;
        loop {
            let v = self.eval(script).await;
            if !(v.is_null() || v == json!(false)) {
                return v;
            }
            assert!(Instant::now() < deadline, "waited {limit:?} for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Saves a PNG of the viewport.
    pub(crate) async fn screenshot(&self, path: &std::path::Path) {
        let b64 = self.session_call(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD.decode(b64.as_str().unwrap()).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

/// Reads chromedriver's stdout until it names its port.
fn started_port(driver: &mut Child) -> u16 {
    let out = driver.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Some(port) = line.split("started successfully on port ").nth(1) {
                let _ = tx.send(port.trim_end_matches('.').parse::<u16>().ok());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Some(port)) => port,
        other => {
            let _ = driver.kill();
            panic!("chromedriver did not start ({other:?})");
        }
    }
}

impl Drop for Browser {
    /// Ends the session (chromedriver then stops its Chromium), then chromedriver itself.
    fn drop(&mut self) {
        if !self.session.is_empty() {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let req = format!(
                    "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
                    self.session, self.port
                );
                let _ = s.write_all(req.as_bytes());
                let _ = std::io::Read::read_to_end(&mut s, &mut Vec::new());
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
