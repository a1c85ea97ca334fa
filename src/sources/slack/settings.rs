//! The `slack` section of `switchboard.json`: how Slack reaches the source (Socket Mode or the
//! Events API), where the Web API is, which channels are heard, and where approvals are asked.
//! The tokens are never in the file: they come from the environment ([`SlackTokens`]).
//!
//! The Slack source owns these settings; the process configuration only places them under
//! `slack` and locates the problems [`SlackSettings::problems`] names. Without the section
//! nothing of the source runs.

use serde::{Deserialize, Serialize};

/// Slack's Web API; methods are at `{apiUrl}/{method}`.
pub const API_URL: &str = "https://slack.com/api";

pub use crate::home::{
    SLACK_APP_TOKEN_ENV as APP_TOKEN_ENV, SLACK_BOT_TOKEN_ENV as BOT_TOKEN_ENV,
    SLACK_SIGNING_SECRET_ENV as SIGNING_SECRET_ENV,
};

/// How Slack reaches the source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Socket Mode: the source opens a WebSocket to Slack; no public endpoint is needed.
    #[default]
    Socket,
    /// The Events API: Slack posts to `/v1/slack/events` and `/v1/slack/interactivity`.
    Events,
}

/// Where approvals are asked (`slack.approvals`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ApprovalSettings {
    /// The channel id (`C…`) the approval messages are posted to.
    pub channel: String,
    /// The user ids (`U…`) who may answer; empty = anyone in the channel.
    pub approvers: Vec<String>,
}

/// Slack settings (`slack`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct SlackSettings {
    /// `socket` (default) or `events`.
    pub mode: Mode,
    /// Slack's Web API, over [`API_URL`] (GovSlack: `https://slack-gov.com/api`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
    /// The channels heard, by id (`C…`) or name (`general`, `#general`); direct messages to
    /// the app and mentions of it always are.
    pub channels: Vec<String>,
    /// Where a rule whose `approveVia` names `slack` asks for approval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ApprovalSettings>,
}

/// The tokens, from the environment only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SlackTokens {
    /// `SWITCHBOARD_SLACK_APP_TOKEN`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app: Option<String>,
    /// `SWITCHBOARD_SLACK_BOT_TOKEN`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bot: Option<String>,
    /// `SWITCHBOARD_SLACK_SIGNING_SECRET`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signing_secret: Option<String>,
}

impl SlackTokens {
    /// The tokens this process's environment has (blank ones are none).
    pub fn from_env() -> SlackTokens {
        let var = |name| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        SlackTokens {
            app: var(APP_TOKEN_ENV),
            bot: var(BOT_TOKEN_ENV),
            signing_secret: var(SIGNING_SECRET_ENV),
        }
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.app.is_none() && self.bot.is_none() && self.signing_secret.is_none()
    }

    /// Each token of `self`, else `other`'s.
    pub fn or(self, other: &SlackTokens) -> SlackTokens {
        SlackTokens {
            app: self.app.or_else(|| other.app.clone()),
            bot: self.bot.or_else(|| other.bot.clone()),
            signing_secret: self.signing_secret.or_else(|| other.signing_secret.clone()),
        }
    }
}

impl SlackSettings {
    /// Every problem of the section: the key (`apiUrl`, `approvals`, ...) and the sentence.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(url) = &self.api_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            out.push((
                "apiUrl",
                format!("`slack.apiUrl` \"{url}\": not an http(s) URL"),
            ));
        }
        for c in &self.channels {
            if c.trim_start_matches('#').trim().is_empty() || c.contains(char::is_whitespace) {
                out.push((
                    "channels",
                    format!("`slack.channels` entry \"{c}\": a channel id (`C…`) or name"),
                ));
            }
        }
        if let Some(a) = &self.approvals {
            if !is_id(&a.channel, &['C', 'G', 'D']) {
                out.push((
                    "approvals",
                    format!(
                        "`slack.approvals.channel` \"{}\": the channel's id (`C…`), as Slack \
                         shows it in the channel's details",
                        a.channel
                    ),
                ));
            }
            for u in &a.approvers {
                if !is_id(u, &['U', 'W']) {
                    out.push((
                        "approvals",
                        format!(
                            "`slack.approvals.approvers` entry \"{u}\": a user id (`U…`), as \
                             Slack shows it in the person's profile"
                        ),
                    ));
                }
            }
        }
        out
    }

    /// The Web API's URL, without a trailing `/`.
    pub fn api_url(&self) -> String {
        self.api_url
            .as_deref()
            .unwrap_or(API_URL)
            .trim_end_matches('/')
            .to_string()
    }

    /// The first token this mode needs that `tokens` lacks: the variable's name.
    pub fn missing(&self, tokens: &SlackTokens) -> Option<&'static str> {
        let needed: &[(&'static str, &Option<String>)] = match self.mode {
            Mode::Socket => &[(APP_TOKEN_ENV, &tokens.app), (BOT_TOKEN_ENV, &tokens.bot)],
            Mode::Events => &[
                (BOT_TOKEN_ENV, &tokens.bot),
                (SIGNING_SECRET_ENV, &tokens.signing_secret),
            ],
        };
        needed
            .iter()
            .find(|(_, token)| token.is_none())
            .map(|(name, _)| *name)
    }

    /// Whether channel `id` named `name` is heard.
    pub fn hears(&self, id: &str, name: Option<&str>) -> bool {
        self.channels.iter().any(|c| {
            let c = c.trim_start_matches('#');
            c == id || name.is_some_and(|n| n == c)
        })
    }
}

/// Whether `s` looks like a Slack id starting with one of `first` (upper case letters and
/// digits).
fn is_id(s: &str, first: &[char]) -> bool {
    s.len() >= 3
        && s.starts_with(first)
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_socket_mode_on_slack_com() {
        let s: SlackSettings = serde_json::from_str("{}").unwrap();
        assert_eq!(s.mode, Mode::Socket);
        assert_eq!(s.api_url(), "https://slack.com/api");
        assert!(s.problems().is_empty());
        let gov: SlackSettings =
            serde_json::from_str(r#"{"apiUrl": "https://slack-gov.com/api/"}"#).unwrap();
        assert_eq!(gov.api_url(), "https://slack-gov.com/api");
    }

    #[test]
    fn the_missing_token_is_named_by_its_variable() {
        let socket = SlackSettings::default();
        let mut t = SlackTokens::default();
        assert_eq!(socket.missing(&t), Some(APP_TOKEN_ENV));
        t.app = Some("xapp-1".into());
        assert_eq!(socket.missing(&t), Some(BOT_TOKEN_ENV));
        t.bot = Some("xoxb-1".into());
        assert_eq!(socket.missing(&t), None);
        let events = SlackSettings {
            mode: Mode::Events,
            ..SlackSettings::default()
        };
        assert_eq!(events.missing(&t), Some(SIGNING_SECRET_ENV));
    }

    #[test]
    fn problems_name_the_key() {
        let s: SlackSettings = serde_json::from_str(
            r##"{"apiUrl": "slack.com", "channels": ["ops", "#"],
                "approvals": {"channel": "general", "approvers": ["U01", "ada"]}}"##,
        )
        .unwrap();
        let keys: Vec<&str> = s.problems().iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["apiUrl", "channels", "approvals", "approvals"]);
        assert!(s.hears("C1", Some("ops")));
        assert!(!s.hears("C1", Some("general")));
    }
}
