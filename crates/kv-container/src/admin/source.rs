//! Reading keys from a KV container (HTTP) or Redis, for inspection and backups.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use crate::server::{read_snapshot, sync_parent, BackupFormat, ImageReader, Summary};
use event_store::kv_tls::TlsParams;
use event_store::url::redact;

/// One key as read from the store, with the store's clock at the time of reading.
pub(crate) struct Item {
    pub(crate) key: String,
    pub(crate) value: Vec<u8>,
    /// Time to live in ms; `None` = no expiry.
    pub(crate) ttl_ms: Option<i64>,
    /// The store's clock (unix ms) when read.
    pub(crate) now_ms: i64,
}

pub(crate) enum Source {
    Kv { base: String, token: Option<String>, http: reqwest::Client },
    Redis(redis::aio::MultiplexedConnection),
}

const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Deserialize)]
struct Page {
    keys: Vec<ListedKey>,
    next: Option<String>,
}

#[derive(Deserialize)]
struct ListedKey {
    key: String,
}

impl Source {
    pub(crate) async fn connect(url: &str, token: Option<&str>) -> anyhow::Result<Source> {
        if url.starts_with("redis://") || url.starts_with("rediss://") {
            let client = redis::Client::open(url).with_context(|| format!("{} is not a Redis URL", redact(url)))?;
            let conn = tokio::time::timeout(TIMEOUT, client.get_multiplexed_async_connection())
                .await
                .context("connecting to Redis timed out")?
                .with_context(|| format!("connecting to {}", redact(url)))?;
            return Ok(Source::Redis(conn));
        }
        ensure!(url.starts_with("http://") || url.starts_with("https://"), "--url must be http(s):// or redis(s)://");
        let (base, http) = kv_http(url, reqwest::Client::builder().timeout(TIMEOUT))?;
        Ok(Source::Kv { base, token: token.map(str::to_owned), http })
    }

    pub(crate) async fn list(&self, prefix: &str, limit: usize) -> anyhow::Result<Vec<Item>> {
        let keys = match self {
            Source::Kv { base, .. } => {
                let mut url = reqwest::Url::parse(&format!("{base}/state"))?;
                url.query_pairs_mut().append_pair("prefix", prefix).append_pair("limit", &limit.to_string());
                let page: Page = serde_json::from_slice(&self.kv_call(self.kv_get(url)).await?.bytes().await?)?;
                let _ = page.next;
                page.keys.into_iter().map(|e| e.key).collect()
            }
            Source::Redis(conn) => {
                let mut conn = conn.clone();
                let (mut keys, mut cursor) = (Vec::new(), 0u64);
                loop {
                    let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(format!("{}*", glob_escape(prefix)))
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut conn)
                        .await?;
                    keys.extend(batch);
                    cursor = next;
                    if cursor == 0 || keys.len() >= limit * 4 {
                        break;
                    }
                }
                keys.sort();
                keys.dedup();
                keys.truncate(limit);
                keys
            }
        };
        let mut items = Vec::with_capacity(keys.len());
        for key in keys {
            // A key may expire between the listing and the read: skip it.
            if let Some(item) = self.get(&key).await? {
                items.push(item);
            }
        }
        Ok(items)
    }

    pub(crate) async fn get(&self, key: &str) -> anyhow::Result<Option<Item>> {
        match self {
            Source::Kv { base, .. } => {
                let url = reqwest::Url::parse(&format!("{base}/state/{key}"))?;
                let resp = self.kv_get(url).send().await.context("reaching the KV container")?;
                if resp.status() == reqwest::StatusCode::NOT_FOUND {
                    return Ok(None);
                }
                let resp = check(resp).await?;
                let header =
                    |n: &str| resp.headers().get(n).and_then(|v| v.to_str().ok()).and_then(|s| s.parse::<i64>().ok());
                let now_ms = header(event_store::kv_wire::TIME_MS).unwrap_or(0);
                let ttl_ms = header(event_store::kv_wire::EXPIRES_MS).map(|e| e - now_ms);
                Ok(Some(Item { key: key.to_owned(), value: resp.bytes().await?.to_vec(), ttl_ms, now_ms }))
            }
            Source::Redis(conn) => {
                let mut conn = conn.clone();
                let (value, pttl, (secs, micros)): (Option<Vec<u8>>, i64, (i64, i64)) =
                    redis::pipe().cmd("GET").arg(key).cmd("PTTL").arg(key).cmd("TIME").query_async(&mut conn).await?;
                Ok(value.map(|value| Item {
                    key: key.to_owned(),
                    value,
                    ttl_ms: (pttl >= 0).then_some(pttl),
                    now_ms: secs * 1000 + micros / 1000,
                }))
            }
        }
    }

    fn kv_get(&self, url: reqwest::Url) -> reqwest::RequestBuilder {
        let Source::Kv { token, http, .. } = self else { unreachable!("only called for the KV container") };
        let req = http.get(url);
        match token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn kv_call(&self, req: reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
        check(req.send().await.context("reaching the KV container")?).await
    }
}

async fn check(resp: reqwest::Response) -> anyhow::Result<reqwest::Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let body = resp.text().await.unwrap_or_default();
    if status == reqwest::StatusCode::UNAUTHORIZED {
        bail!("the KV container refused the token (401): give --token or KV_TOKEN");
    }
    if status == reqwest::StatusCode::FORBIDDEN {
        bail!("the KV container refused (403): this needs a token for every namespace (`*` in its tokens file)");
    }
    bail!("the KV container answered {status}: {}", body.chars().take(300).collect::<String>())
}

/// The base URL and an HTTP client for a KV container `--url`, which may carry the plugin's
/// TLS parameters (`?tls_ca=…&tls_cert=…&tls_key=…`).
fn kv_http(url: &str, builder: reqwest::ClientBuilder) -> anyhow::Result<(String, reqwest::Client)> {
    let (base, tls) = TlsParams::split(url)?;
    Ok((base, builder.use_preconfigured_tls(tls.client_config()?).build()?))
}

/// `kv reload --url`: asks the running container to re-read its tokens file.
pub(crate) async fn reload(url: &str, token: Option<&str>) -> anyhow::Result<u64> {
    let (base, http) = kv_http(url, reqwest::Client::builder().timeout(TIMEOUT))?;
    let mut req = http.post(format!("{base}/admin/reload"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.context("reaching the KV container")?;
    if resp.status() == reqwest::StatusCode::CONFLICT {
        let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await?).unwrap_or_default();
        bail!("the KV container kept its tokens: {}", body["message"].as_str().unwrap_or("reload refused"));
    }
    let body = check(resp).await?.bytes().await.context("reading the reload answer")?;
    let body: serde_json::Value = serde_json::from_slice(&body).context("reading the reload answer")?;
    Ok(body["tokens"].as_u64().unwrap_or_default())
}

/// `*`, `?`, `[` and `\` are glob syntax in SCAN MATCH.
fn glob_escape(s: &str) -> String {
    s.chars().fold(String::new(), |mut out, c| {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
        out
    })
}

/// `kv backup --url`: streams `GET /backup` into `<out>.partial`, checks the whole file
/// (trailer, checksum), then renames it to `out`.
pub(crate) async fn download_backup(
    url: &str,
    token: Option<&str>,
    out: &Path,
    format: BackupFormat,
) -> anyhow::Result<Summary> {
    ensure!(
        url.starts_with("http://") || url.starts_with("https://"),
        "online backups need the KV container's http(s):// URL"
    );
    // No overall timeout: a large store takes as long as it takes to stream.
    let (base, http) = kv_http(url, reqwest::Client::builder().connect_timeout(TIMEOUT))?;
    let mut req = http.get(format!("{base}/backup")).query(&[("format", format.name())]);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let mut resp = check(req.send().await.context("reaching the KV container")?).await?;
    let mut name = out.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".partial");
    let tmp = out.with_file_name(name);
    let result = async {
        let mut file = tokio::fs::File::create(&tmp).await.with_context(|| format!("creating {}", tmp.display()))?;
        // An image is checked as it arrives (it may be as large as the data file); JSON
        // lines are read back once written.
        let mut image = (format == BackupFormat::Image).then(ImageReader::default);
        while let Some(chunk) = resp.chunk().await.context("the backup stream broke off")? {
            if let Some(image) = &mut image {
                image.push(&chunk, &mut |_| Ok(()))?;
            }
            file.write_all(&chunk).await?;
        }
        file.sync_all().await?;
        drop(file);
        let summary = match image {
            Some(image) => {
                let header = image.finish()?;
                Summary { records: header.records, last_rev: header.last_rev }
            }
            None => read_snapshot(&tmp, |_, _| Ok(()))?,
        };
        tokio::fs::rename(&tmp, out).await?;
        // The rename is durable only once the directory is.
        sync_parent(out)?;
        Ok(summary)
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}
