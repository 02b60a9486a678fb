//! The allow-list of store hosts (`STATEFUL_TOOL_STORE_HOSTS`), checked for every kv_url
//! and for every node a Redis deployment names after connecting.

use super::url::redact;
use crate::error::StoreError;

/// The store hosts a plugin process may dial (`STATEFUL_TOOL_STORE_HOSTS`), for every
/// runtime: a caller that can reach the plugin (e.g. the serverless port) must not make it
/// dial arbitrary addresses through `kv_url`. Entries are `host` (any port) or `host:port`,
/// compared case-insensitively with the URL's host as written (no DNS lookups).
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts(Option<Vec<String>>);

impl AllowedHosts {
    /// `None` or empty: every host is allowed.
    pub fn parse(list: Option<&str>) -> anyhow::Result<AllowedHosts> {
        let Some(list) = list.map(str::trim).filter(|l| !l.is_empty()) else {
            return Ok(AllowedHosts(None));
        };
        let entries: Vec<String> = list.split(',').map(|e| e.trim().to_ascii_lowercase()).collect();
        anyhow::ensure!(
            entries.iter().all(|e| !e.is_empty() && !e.contains(['/', '@', ' '])),
            "STATEFUL_TOOL_STORE_HOSTS must be a comma-separated list of host or host:port, got {list:?}"
        );
        Ok(AllowedHosts(Some(entries)))
    }

    /// True when a node at `host:port` may be dialled. Nodes a Redis deployment names after
    /// connecting (Cluster slot owners, redirect targets, the master a Sentinel reports) are
    /// checked with this, as written in the server's answer (usually an IP address).
    pub(crate) fn permits(&self, host: &str, port: u16) -> bool {
        let Some(entries) = &self.0 else { return true };
        let bare = host.to_ascii_lowercase();
        let host = if bare.contains(':') && !bare.starts_with('[') { format!("[{bare}]") } else { bare.clone() };
        let with_port = format!("{host}:{port}");
        // An IPv6 entry may be written with or without brackets.
        entries.iter().any(|e| *e == host || *e == bare || *e == with_port)
    }

    /// The list as configured, for messages.
    pub(crate) fn describe(&self) -> String {
        format!("STATEFUL_TOOL_STORE_HOSTS={}", self.0.as_deref().unwrap_or_default().join(","))
    }

    /// Checks `url`, whose hosts are what `seeds` reads when it names several (a Cluster,
    /// Sentinel or PostgreSQL kv_url; the caller reads them with the backend's own URL
    /// reader). `seeds` runs only when there is a list to check against: every store call
    /// passes here.
    pub(crate) fn check(&self, url: &str, seeds: impl FnOnce() -> Option<Vec<String>>) -> Result<(), StoreError> {
        let Some(entries) = &self.0 else { return Ok(()) };
        let seeds = seeds();
        // A Cluster, Sentinel or PostgreSQL kv_url may list several hosts, and each is dialled:
        // all must be allowed.
        if let Some(seeds) = seeds {
            let allowed = |seed: &String| {
                let seed = seed.to_ascii_lowercase();
                let host = seed.rsplit_once(':').map_or(seed.as_str(), |(h, _)| h);
                entries.iter().any(|e| *e == seed || e == host)
            };
            return match seeds.iter().find(|s| !allowed(s)) {
                None => Ok(()),
                Some(denied) => Err(StoreError::config(format!(
                    "kv_url {:?}: its host {denied} is not in the store hosts this plugin may use \
                     (STATEFUL_TOOL_STORE_HOSTS={})",
                    redact(url),
                    entries.join(",")
                ))),
            };
        }
        let parsed = url::Url::parse(url).ok();
        let host = parsed.as_ref().and_then(|u| u.host_str()).map(|h| h.to_ascii_lowercase());
        let port = parsed.as_ref().and_then(|u| u.port_or_known_default());
        let allowed = host
            .as_ref()
            .is_some_and(|h| entries.iter().any(|e| e == h || port.is_some_and(|p| *e == format!("{h}:{p}"))));
        if allowed {
            Ok(())
        } else {
            Err(StoreError::config(format!(
                "kv_url {:?}: its host is not in the store hosts this plugin may use (STATEFUL_TOOL_STORE_HOSTS={})",
                redact(url),
                entries.join(",")
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_hosts_match_host_or_host_and_port() {
        let seeds = AllowedHosts::parse(Some("r1,r2:7001,[::1]")).unwrap();
        assert!(seeds.permits("R1", 7005) && seeds.permits("r2", 7001) && seeds.permits("::1", 1));
        assert!(!seeds.permits("r2", 7002) && !seeds.permits("10.0.0.9", 7000));
        assert!(AllowedHosts::default().permits("anything", 1));
        assert!(AllowedHosts::parse(Some("a,,b")).is_err());
    }
}
