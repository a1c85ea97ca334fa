//! The `teams` section of `switchboard.json`: which Entra app signs in, where Microsoft Graph and
//! the identity platform are (national clouds, a stand-in), which chats are read and how.
//!
//! The Teams source owns these settings; the process configuration only places them under
//! `teams` and locates the problems [`TeamsSettings::problems`] names. Without the section
//! nothing of the source runs.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Microsoft Graph of the global cloud.
pub const GRAPH_URL: &str = "https://graph.microsoft.com";

/// The Microsoft identity platform of the global cloud.
pub const AUTHORITY_URL: &str = "https://login.microsoftonline.com";

/// The clouds `cloud` names: Graph's and the identity platform's URLs in each (Microsoft's
/// "National cloud deployments" page).
pub const CLOUDS: &[(&str, &str, &str)] = &[
    ("global", GRAPH_URL, AUTHORITY_URL),
    (
        "usgov",
        "https://graph.microsoft.us",
        "https://login.microsoftonline.us",
    ),
    (
        "usgovdod",
        "https://dod-graph.microsoft.us",
        "https://login.microsoftonline.us",
    ),
    (
        "china",
        "https://microsoftgraph.chinacloudapi.cn",
        "https://login.chinacloudapi.cn",
    ),
];

/// Graph's chat types, as `chatTypes` names them.
pub const CHAT_TYPES: &[&str] = &["oneOnOne", "group", "meeting"];

/// The shortest and longest poll interval: Graph throttles a client that polls faster, and a
/// longer one would hide a stalled source.
const POLL_RANGE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(3600));

/// Teams settings (`teams`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TeamsSettings {
    /// The Entra tenant: its id or domain, or `organizations` (default: any work or school
    /// account) or `common`.
    pub tenant: String,
    /// The Application (client) ID of the Entra app registration that signs in.
    pub client_id: String,
    /// The chats read, by Graph's `chatType` (default `oneOnOne` and `group`; also `meeting`).
    pub chat_types: Vec<String>,
    /// How often Graph is polled (default `5s`).
    #[serde(with = "crate::duration::text")]
    pub poll: Duration,
    /// A public https URL that reaches `POST /v1/teams/notifications` on the ingest listener:
    /// Graph then notifies each new message instead of being polled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notification_url: Option<String>,
    /// `global` (default), `usgov`, `usgovdod` or `china`: where Graph and the identity platform
    /// are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud: Option<String>,
    /// Microsoft Graph's URL, over the cloud's; requests go to `{graphUrl}/v1.0/...`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graph_url: Option<String>,
    /// The identity platform's URL, over the cloud's; the sign-in uses
    /// `{authorityUrl}/{tenant}/oauth2/v2.0/devicecode` and `/token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authority_url: Option<String>,
    /// App-only sign-in (a shared deployment): the user whose chats are read, by id or user
    /// principal name; the app's secret comes from `SWITCHBOARD_TEAMS_CLIENT_SECRET`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

impl Default for TeamsSettings {
    fn default() -> Self {
        TeamsSettings {
            tenant: "organizations".into(),
            client_id: String::new(),
            chat_types: vec!["oneOnOne".into(), "group".into()],
            poll: Duration::from_secs(5),
            notification_url: None,
            cloud: None,
            graph_url: None,
            authority_url: None,
            user: None,
        }
    }
}

impl TeamsSettings {
    /// Every problem of the section: the key (`clientId`, `poll`, ...) and the sentence.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if !is_tenant(&self.tenant) {
            out.push((
                "tenant",
                format!(
                    "`teams.tenant` \"{}\": a tenant id or domain (`contoso.onmicrosoft.com`), \
                     `organizations` or `common`",
                    self.tenant
                ),
            ));
        }
        if self.client_id.trim().is_empty() {
            out.push((
                "clientId",
                "`teams.clientId` is required: the Application (client) ID of your Entra app \
                 registration; docs/teams.md says how to register one"
                    .to_string(),
            ));
        }
        if self.chat_types.is_empty() {
            out.push((
                "chatTypes",
                "`teams.chatTypes` is empty: name at least one of `oneOnOne`, `group`, `meeting`"
                    .to_string(),
            ));
        }
        for t in &self.chat_types {
            if !CHAT_TYPES.contains(&t.as_str()) {
                out.push((
                    "chatTypes",
                    format!(
                        "`teams.chatTypes` entry \"{t}\": expected `oneOnOne`, `group` or `meeting`"
                    ),
                ));
            }
        }
        if self.poll < POLL_RANGE.0 || self.poll > POLL_RANGE.1 {
            out.push((
                "poll",
                format!(
                    "`teams.poll` \"{}\": between 1s and 1h",
                    humantime::format_duration(self.poll)
                ),
            ));
        }
        if let Some(cloud) = &self.cloud
            && !CLOUDS.iter().any(|(name, ..)| name == cloud)
        {
            out.push((
                "cloud",
                format!(
                    "`teams.cloud` \"{cloud}\": expected `global`, `usgov`, `usgovdod` or `china`"
                ),
            ));
        }
        for (key, url) in [
            ("graphUrl", &self.graph_url),
            ("authorityUrl", &self.authority_url),
        ] {
            if let Some(url) = url
                && !is_http_url(url)
            {
                out.push((key, format!("`teams.{key}` \"{url}\": not an http(s) URL")));
            }
        }
        if let Some(url) = &self.notification_url
            && let Err(why) = check_notification_url(url)
        {
            out.push((
                "notificationUrl",
                format!("`teams.notificationUrl` \"{url}\": {why}"),
            ));
        }
        if let Some(user) = &self.user {
            if user.trim().is_empty() {
                out.push((
                    "user",
                    "`teams.user` is empty: the id or user principal name of the user whose \
                     chats are read"
                        .to_string(),
                ));
            } else if ["organizations", "common", "consumers"].contains(&self.tenant.as_str()) {
                out.push((
                    "user",
                    format!(
                        "`teams.user` needs `teams.tenant` to name your tenant (its id or \
                         domain), not \"{}\": app-only sign-in is to one tenant",
                        self.tenant
                    ),
                ));
            }
        }
        out
    }

    /// Microsoft Graph's URL, without a trailing `/`.
    pub fn graph_url(&self) -> String {
        let url = self
            .graph_url
            .clone()
            .unwrap_or_else(|| self.cloud_urls().0.to_string());
        url.trim_end_matches('/').to_string()
    }

    /// The identity platform's URL, without a trailing `/`.
    pub fn authority_url(&self) -> String {
        let url = self
            .authority_url
            .clone()
            .unwrap_or_else(|| self.cloud_urls().1.to_string());
        url.trim_end_matches('/').to_string()
    }

    /// The cloud's Graph and identity platform URLs.
    fn cloud_urls(&self) -> (&'static str, &'static str) {
        let cloud = self.cloud.as_deref().unwrap_or("global");
        CLOUDS
            .iter()
            .find(|(name, ..)| *name == cloud)
            .map_or((GRAPH_URL, AUTHORITY_URL), |(_, g, a)| (*g, *a))
    }

    /// Whether chats of Graph's `chat_type` are read.
    pub fn wants(&self, chat_type: &str) -> bool {
        self.chat_types.iter().any(|t| t == chat_type)
    }

    /// Whether the app signs in on its own (`user` set) instead of as the signed-in user.
    pub fn is_app_only(&self) -> bool {
        self.user.is_some()
    }
}

/// A tenant id, a domain, or one of the identity platform's aliases.
fn is_tenant(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 256
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
}

fn is_http_url(url: &str) -> bool {
    reqwest::Url::parse(url)
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
}

/// Graph delivers notifications to https URLs only; plain http is taken for a loopback address
/// (a local tunnel's end, a test).
fn check_notification_url(url: &str) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    let host = parsed.host_str().unwrap_or("");
    let loopback = host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    match parsed.scheme() {
        "https" if !host.is_empty() => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err(
            "Microsoft Graph delivers notifications to https URLs only (plain http only to a \
             loopback address)"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> TeamsSettings {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn defaults_are_the_global_cloud_dms_and_groups_every_five_seconds() {
        let s = parse(r#"{"clientId": "c"}"#);
        assert!(s.problems().is_empty(), "{:?}", s.problems());
        assert_eq!(s.tenant, "organizations");
        assert_eq!(s.poll, Duration::from_secs(5));
        assert!(s.wants("oneOnOne") && s.wants("group") && !s.wants("meeting"));
        assert_eq!(s.graph_url(), "https://graph.microsoft.com");
        assert_eq!(s.authority_url(), "https://login.microsoftonline.com");
    }

    #[test]
    fn a_cloud_moves_both_urls_and_explicit_urls_win() {
        let s = parse(r#"{"clientId": "c", "cloud": "usgovdod"}"#);
        assert_eq!(s.graph_url(), "https://dod-graph.microsoft.us");
        assert_eq!(s.authority_url(), "https://login.microsoftonline.us");
        let s = parse(
            r#"{"clientId": "c", "cloud": "china", "graphUrl": "http://127.0.0.1:9/", "authorityUrl": "http://127.0.0.1:8"}"#,
        );
        assert_eq!(s.graph_url(), "http://127.0.0.1:9");
        assert_eq!(s.authority_url(), "http://127.0.0.1:8");
    }

    #[test]
    fn problems_name_the_key() {
        let s = parse(
            r#"{"tenant": "a b", "chatTypes": ["oneOnOne", "channel"], "poll": "500ms",
                "cloud": "mars", "graphUrl": "ftp://x", "notificationUrl": "http://example.com/n",
                "user": "ada@contoso.com"}"#,
        );
        let keys: Vec<_> = s.problems().iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            [
                "tenant",
                "clientId",
                "chatTypes",
                "poll",
                "cloud",
                "graphUrl",
                "notificationUrl"
            ]
        );
        for (key, sentence) in s.problems() {
            assert!(sentence.starts_with(&format!("`teams.{key}")), "{sentence}");
        }
        let app_only = parse(r#"{"clientId": "c", "user": "ada@contoso.com"}"#);
        assert_eq!(app_only.problems()[0].0, "user");
        assert!(
            parse(r#"{"clientId": "c", "notificationUrl": "http://127.0.0.1:8787/v1/teams/notifications"}"#)
                .problems()
                .is_empty()
        );
        assert!(serde_json::from_str::<TeamsSettings>(r#"{"clientID": "c"}"#).is_err());
    }
}
