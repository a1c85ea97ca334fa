//! The daemon's start settings, kept in the home (`daemon.json`, 0600) so that a restart by
//! any front end (after a crash, or after `switchboard stop`) runs the daemon as it was
//! started: the same listeners, the same token source.
//!
//! A front end starts the daemon with its own flags (those in the host's MCP entry, usually
//! none) and its own environment (usually without `SWITCHBOARD_TOKEN`). What the starting
//! command gives wins and is saved; what it leaves out comes from the last start. So a daemon
//! an operator started with `--listen 0.0.0.0:8787` and `SWITCHBOARD_TOKEN` keeps both when a
//! front end restarts it, and senders using that token are not refused with 401.

use serde::{Deserialize, Serialize};

use super::DaemonOptions;
use crate::home::{Home, write_atomic};

/// What a start asked for, as saved.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct StartSettings {
    /// `--listen`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// `--no-listen`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_listen: bool,
    /// `--http`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<String>,
    /// `SWITCHBOARD_TOKEN`, when the start had it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// `SWITCHBOARD_GITHUB_SECRET`, when the start had it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub github_secret: Option<String>,
}

impl StartSettings {
    /// The settings saved by the last start; none when there are none (or they cannot be
    /// read, which is logged).
    pub fn load(home: &Home) -> StartSettings {
        let path = home.dir().join("daemon.json");
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), cause = %e, "cannot read the saved start settings; ignored");
                StartSettings::default()
            }),
            Err(_) => StartSettings::default(),
        }
    }

    /// Saves these settings for the next start.
    pub fn save(&self, home: &Home) -> std::io::Result<()> {
        let path = home.dir().join("daemon.json");
        let mut text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        text.push(b'\n');
        write_atomic(&path, &text)
    }

    /// What `opts` asks, with what it leaves out taken from these saved settings.
    pub fn merge(&self, mut opts: DaemonOptions) -> DaemonOptions {
        let given = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.trim().is_empty());
        if opts.listen.is_none() && !opts.no_listen {
            opts.listen = self.listen.clone();
            opts.no_listen = self.no_listen;
        }
        if opts.mcp_http.is_none() {
            opts.mcp_http = self.http.clone();
        }
        if !given(&opts.token) {
            opts.token = self.token.clone();
        }
        if !given(&opts.github_secret) {
            opts.github_secret = self.github_secret.clone();
        }
        opts
    }

    /// The settings of `opts`, to save.
    pub fn of(opts: &DaemonOptions) -> StartSettings {
        let given = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
        };
        StartSettings {
            listen: opts.listen.clone(),
            no_listen: opts.no_listen,
            http: opts.mcp_http.clone(),
            token: given(&opts.token),
            github_secret: given(&opts.github_secret),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_start_leaves_out_comes_from_the_last_one_and_what_it_gives_wins() {
        let saved = StartSettings {
            listen: Some("0.0.0.0:9000".into()),
            http: Some("127.0.0.1:8788".into()),
            token: Some("from-env".into()),
            ..Default::default()
        };
        let restarted = saved.merge(DaemonOptions::default());
        assert_eq!(restarted.listen.as_deref(), Some("0.0.0.0:9000"));
        assert_eq!(restarted.mcp_http.as_deref(), Some("127.0.0.1:8788"));
        assert_eq!(restarted.token.as_deref(), Some("from-env"));
        let asked = DaemonOptions {
            no_listen: true,
            token: Some("new".into()),
            ..Default::default()
        };
        let merged = saved.merge(asked);
        assert!(merged.no_listen);
        assert_eq!(merged.listen, None);
        assert_eq!(merged.token.as_deref(), Some("new"));
        assert_eq!(StartSettings::of(&merged).token.as_deref(), Some("new"));
    }
}
