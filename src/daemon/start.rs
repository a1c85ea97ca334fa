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
use crate::sources::slack::settings::SlackTokens;

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
    /// `SWITCHBOARD_TEAMS_CLIENT_SECRET`, when the start had it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub teams_secret: Option<String>,
    /// `SWITCHBOARD_SLACK_*`, those the start had.
    #[serde(default, skip_serializing_if = "SlackTokens::is_empty")]
    pub slack: SlackTokens,
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
        if !given(&opts.teams_secret) {
            opts.teams_secret = self.teams_secret.clone();
        }
        opts.slack_tokens = opts.slack_tokens.or(&self.slack);
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
            teams_secret: given(&opts.teams_secret),
            slack: opts.slack_tokens.clone(),
        }
    }
}

/// Refuses a front end whose environment gives another ingest token (`env`, its
/// `SWITCHBOARD_TOKEN`) than the one the daemon of `home` has: the token of its last start,
/// else `http.token`, else the `token` file. A front end that starts the daemon passes its
/// environment on, and the token there would win: senders using the daemon's token would get
/// 401, with nothing said. A home whose daemon has no token yet takes this one.
pub fn check_token_env(home: &Home, env: Option<&str>) -> anyhow::Result<()> {
    let given = |t: &str| Some(t.trim().to_string()).filter(|t| !t.is_empty());
    let Some(asked) = env.and_then(given) else {
        return Ok(());
    };
    let current = StartSettings::load(home)
        .token
        .and_then(|t| given(&t))
        .or_else(|| {
            let config = home.load_config().ok()?;
            config.http.token.as_deref().and_then(given)
        })
        .or_else(|| given(&std::fs::read_to_string(home.token()).ok()?));
    match current {
        Some(current) if current != asked => anyhow::bail!(
            "`SWITCHBOARD_TOKEN` in this front end's environment is not the ingest token of the \
             daemon of {}: a front end does not change the daemon's token (senders using it \
             would get 401); remove `SWITCHBOARD_TOKEN` from the MCP host's entry for \
             switchboard, or change the token on purpose with `{}`, then \
             `SWITCHBOARD_TOKEN=... {}`",
            home.dir().display(),
            crate::home::command("stop"),
            crate::home::command("start")
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_front_end_may_not_give_the_daemon_another_token() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::open(dir.path()).unwrap();
        // No token yet: the front end's becomes the daemon's.
        check_token_env(&home, Some("mine")).unwrap();
        check_token_env(&home, None).unwrap();
        // The `token` file, then `http.token`, then the last start's, each over the one before.
        write_atomic(&home.token(), b"from-the-file\n").unwrap();
        check_token_env(&home, Some(" from-the-file ")).unwrap();
        let err = check_token_env(&home, Some("mine"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("`SWITCHBOARD_TOKEN` in this front end's environment is not"));
        write_atomic(&home.config_file(), br#"{"http": {"token": "configured"}}"#).unwrap();
        check_token_env(&home, Some("configured")).unwrap();
        assert!(check_token_env(&home, Some("from-the-file")).is_err());
        let started = StartSettings {
            token: Some("from-env".into()),
            ..Default::default()
        };
        started.save(&home).unwrap();
        check_token_env(&home, Some("from-env")).unwrap();
        assert!(check_token_env(&home, Some("configured")).is_err());
        check_token_env(&home, Some("  ")).unwrap();
    }

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
