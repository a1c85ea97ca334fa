//! Sources: where messages come from.
//!
//! - [`http`]: the webhook endpoint (generic messages, Alertmanager, GitHub): authentication,
//!   limits, statuses.
//! - [`alertmanager`]: an Alertmanager webhook (version 4) → one message per alert. Pure.
//! - [`github`]: a GitHub webhook delivery → one message. Pure.
//! - [`upstream`]: upstream MCP servers (switchboard as their client): notifications in wire
//!   order, supervision, re-exported tools.
//! - [`schedule`]: cron schedules that append a message when they fire.
//! - [`teams`]: Microsoft Teams chats from Microsoft Graph (sign-in, polling or change
//!   notifications), answered in the chat they came from.
//! - [`slack`]: Slack over Socket Mode or the Events API, answered in the thread, and
//!   approvals with buttons in a Slack channel.

pub mod alertmanager;
pub mod github;
pub mod http;
pub mod jetstream;
pub mod schedule;
pub mod slack;
pub mod teams;
pub mod upstream;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::control::ops::{Append, RenderMetrics};
use crate::control::{ApiError, Local};
use crate::inbox::Appended;
use crate::message::NewMessage;

/// What a source is given: where to append, the shutdown token, the task tracker — and
/// nothing else of the daemon.
#[derive(Clone)]
pub struct SourceContext {
    api: Local,
    tasks: TaskTracker,
}

impl SourceContext {
    /// A context whose appends go to `api`; the source's tasks run on `tasks`.
    pub fn new(api: Local, tasks: TaskTracker) -> SourceContext {
        SourceContext { api, tasks }
    }

    /// Appends messages, in order, all or nothing; returns once they are durable (under the
    /// fsync policy), counted for `/metrics` as from `source`.
    pub async fn append(
        &self,
        messages: Vec<NewMessage>,
        source: &str,
    ) -> Result<Vec<Appended>, ApiError> {
        self.api
            .call(Append {
                messages,
                source: source.to_string(),
            })
            .await
    }

    /// Appends what fits of `messages`, in order: a message over the inbox's limits is
    /// refused alone (and said so), the rest are stored.
    pub async fn append_each(
        &self,
        messages: Vec<NewMessage>,
        source: &str,
    ) -> Result<crate::control::ops::EachAppended, ApiError> {
        self.api
            .call(crate::control::ops::AppendEach {
                messages,
                source: source.to_string(),
            })
            .await
    }

    /// Answers a confirm (a person's click in a chat service); returns once the answer is in
    /// the actions journal, or why it was refused.
    pub async fn confirm(
        &self,
        answer: crate::control::ops::Confirm,
    ) -> Result<Option<crate::actions::Item>, ApiError> {
        self.api.call(answer).await
    }

    /// The action lifecycle's transitions from now on: confirms asked, answered, expired.
    pub fn transitions(
        &self,
    ) -> tokio::sync::broadcast::Receiver<crate::actions::lifecycle::Event> {
        self.api.subscribe().events
    }

    /// Every family of `/metrics`, read now (HTTP ingest adds its own and serves the text).
    pub async fn metrics(&self) -> crate::metrics::Scrape {
        self.api.call(RenderMetrics {}).await.unwrap_or_default()
    }

    /// Fires when the daemon shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        self.api.shutdown()
    }

    /// Where the source's tasks run.
    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }
}

/// A run of failed appends, logged once when it starts and once when it ends (with how many
/// failed in between) instead of once per failure: during a journal outage every request
/// fails, and a line for each would bury the log (650,000 lines in one outage). The failures
/// stay counted where they are counted anyway (`switchboard_http_rejections_total`).
#[derive(Debug, Default)]
pub struct Outage {
    /// Whether a run is under way: the one atomic read a success costs.
    active: std::sync::atomic::AtomicBool,
    run: std::sync::Mutex<Option<OutageRun>>,
}

#[derive(Debug)]
struct OutageRun {
    since: std::time::Instant,
    failures: u64,
}

/// How an outage ended: the failures it saw and how long it lasted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutageEnded {
    /// Failures from the first to the last.
    pub failures: u64,
    /// From the first failure to the success that ended it.
    pub lasted: std::time::Duration,
}

impl Outage {
    /// Records a failure; true when it is the first of a run (the caller logs it).
    pub fn fail(&self) -> bool {
        let mut run = self.run.lock().unwrap();
        match run.as_mut() {
            Some(r) => {
                r.failures += 1;
                false
            }
            None => {
                *run = Some(OutageRun {
                    since: std::time::Instant::now(),
                    failures: 1,
                });
                self.active
                    .store(true, std::sync::atomic::Ordering::Release);
                true
            }
        }
    }

    /// Records a success; how the run ended when it ends one (the caller logs that).
    pub fn succeed(&self) -> Option<OutageEnded> {
        if !self.active.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        let ended = self.run.lock().unwrap().take()?;
        self.active
            .store(false, std::sync::atomic::Ordering::Release);
        Some(OutageEnded {
            failures: ended.failures,
            lasted: ended.since.elapsed(),
        })
    }
}

/// Why a well-formed JSON payload could not be turned into messages (HTTP 422).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// Occurs when the JSON is valid but a field is missing or has the wrong type.
    #[error("request body has the wrong shape: {0}")]
    Shape(String),
    /// Occurs when an Alertmanager webhook is not version 4.
    #[error("unsupported alertmanager webhook version \"{0}\"; expected \"4\"")]
    UnsupportedVersion(String),
}

impl PayloadError {
    /// The stable code, as the `error` field of an HTTP error body.
    pub fn code(&self) -> &'static str {
        match self {
            PayloadError::Shape(_) => "invalid_payload",
            PayloadError::UnsupportedVersion(_) => "unsupported_version",
        }
    }
}

/// The HTTP client a source calls its service's API with (Graph, the identity platform,
/// Slack's Web API): each request bounded by `timeout`, a connection by 10 s, and no redirect
/// followed (a token is never sent on to another host).
pub fn api_client(timeout: std::time::Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(std::time::Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

/// The shipped rule packs against what the sources really produce: a pack whose prompt names a
/// metadata key the source does not set, or whose regex misses the source's content, fails here.
/// The metadata keys the messages of built-in source `server` can carry: exact keys, then key
/// prefixes (`labels.`). `None` for servers whose keys are the sender's own (generic webhooks,
/// upstream MCP servers, `switchboard send`).
pub fn known_meta_keys(server: &str) -> Option<(&'static [&'static str], &'static [&'static str])> {
    match server {
        alertmanager::SERVER => Some((alertmanager::META_KEYS, alertmanager::META_PREFIXES)),
        github::SERVER => Some((github::META_KEYS, &[])),
        teams::SERVER => Some((teams::META_KEYS, &[])),
        slack::SERVER => Some((slack::META_KEYS, &[])),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_reported_at_its_first_failure_and_its_end_only() {
        let outage = Outage::default();
        assert_eq!(outage.succeed(), None, "no outage, nothing ended");
        assert!(outage.fail(), "the first failure starts it");
        for _ in 0..999 {
            assert!(!outage.fail());
        }
        let ended = outage.succeed().expect("the first success ends it");
        assert_eq!(ended.failures, 1000);
        assert_eq!(outage.succeed(), None, "ended once");
        assert!(outage.fail(), "a new failure starts a new outage");
    }
}

#[cfg(test)]
mod packs {
    use std::path::Path;
    use std::sync::Arc;

    use chrono::{TimeZone, Utc};

    use crate::actions::{Action, Mode};
    use crate::engine::Engine;
    use crate::message::{Message, NewMessage};
    use crate::rules::RuleSet;

    fn repo(path: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
    }

    fn fixture(name: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(repo(&format!("tests/fixtures/{name}"))).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// Every action the pack fires for `messages`, in order.
    fn fire(pack: &str, messages: Vec<NewMessage>) -> Vec<Action> {
        let rules = RuleSet::load(&repo(pack))
            .unwrap()
            .expect("the pack exists");
        let mut engine = Engine::new(Arc::new(rules));
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let mut out = Vec::new();
        for (i, new) in messages.into_iter().enumerate() {
            let msg = Message::from_new(new, i as u64 + 1, now);
            out.extend(engine.evaluate(&msg, now).actions);
        }
        out
    }

    #[test]
    fn oncall_pack_on_alertmanager_payloads() {
        let firing = super::alertmanager::messages(fixture("alertmanager-firing.json")).unwrap();
        let resolved =
            super::alertmanager::messages(fixture("alertmanager-resolved.json")).unwrap();
        for pack in ["rules/oncall.json", "examples/triggers.json"] {
            let actions = fire(pack, firing.clone());
            let critical: Vec<_> = actions
                .iter()
                .filter(|a| &*a.rule == "oncall-critical")
                .collect();
            assert_eq!(critical.len(), 1, "{pack}: {actions:#?}");
            assert_eq!(critical[0].mode, Mode::Confirm);
            assert!(
                critical[0]
                    .prompt
                    .starts_with("A critical alert is firing: HighLatency (api-1:8080)."),
                "{pack}: {}",
                critical[0].prompt
            );
        }
        let actions = fire("rules/oncall.json", firing.clone());
        let prompt = &actions
            .iter()
            .find(|a| &*a.rule == "oncall-critical")
            .unwrap()
            .prompt;
        assert!(
            prompt.contains("Runbook: https://runbooks.example.com/HighLatency"),
            "{prompt}"
        );
        assert!(
            actions.iter().any(|a| &*a.rule == "oncall-warning"),
            "{actions:#?}"
        );
        let actions = fire("rules/oncall.json", resolved);
        assert!(!actions.is_empty());
        assert!(
            actions.iter().all(|a| &*a.rule == "oncall-resolved"),
            "{actions:#?}"
        );
    }

    #[test]
    fn ci_pack_on_a_failed_workflow_run_on_main() {
        let failed = super::github::messages(
            "workflow_run",
            "72d3162e-cc78-11e3-81ab-4c9367dc0958",
            &fixture("github-workflow_run.json"),
        )
        .unwrap();
        let actions = fire("rules/ci.json", failed.clone());
        let rules: Vec<_> = actions.iter().map(|a| (&*a.rule, a.mode)).collect();
        // `ci-main-failed` has `stop`: the catch-all `ci-failed` does not nudge about it too.
        assert_eq!(rules, [("ci-main-failed", Mode::Confirm)], "{actions:#?}");
        let examples = fire("examples/triggers.json", failed);
        assert_eq!(examples.len(), 1);
        assert_eq!(&*examples[0].rule, "ci-failure");
    }

    #[test]
    fn teams_pack_on_graph_chat_messages() {
        use serde_json::json;
        let me = super::teams::mapping::Me {
            id: "ef1c916a-3135-4417-ba27-8eb7bd084193".into(),
            name: "Jane Smith".into(),
        };
        // The shape of `chat-list-messages`' first message (learn.microsoft.com/graph/api/chat-list-messages).
        let graph = |id: &str, html: &str, mentions: serde_json::Value| {
            json!({
                "id": id, "messageType": "message", "createdDateTime": "2021-03-28T20:48:29.832Z",
                "deletedDateTime": null, "chatId": "19:ada@unq.gbl.spaces",
                "from": {"user": {"id": "8ea0e38b-efb3-4757-924a-5f94061cf8c2", "displayName": "Robin Kline", "userIdentityType": "aadUser"}},
                "body": {"contentType": "html", "content": html}, "attachments": [], "mentions": mentions
            })
        };
        let map = |m: serde_json::Value, chat_type: &str| {
            super::teams::mapping::to_message(&m, "19:ada@unq.gbl.spaces", chat_type, &me).unwrap()
        };
        let actions = fire(
            "rules/teams-triage.json",
            vec![
                map(graph("1", "<p>lunch on friday?</p>", json!([])), "oneOnOne"),
                map(
                    graph("2", "<p>URGENT: the api is down</p>", json!([])),
                    "oneOnOne",
                ),
                map(
                    graph(
                        "3",
                        "<p><at id=\"0\">Jane Smith</at> can you look?</p>",
                        json!([{
                            "id": 0, "mentionText": "Jane Smith",
                            "mentioned": {"user": {"id": me.id, "displayName": "Jane Smith", "userIdentityType": "aadUser"}}
                        }]),
                    ),
                    "group",
                ),
                map(graph("4", "<p>build is green</p>", json!([])), "group"),
            ],
        );
        let got: Vec<_> = actions.iter().map(|a| (&*a.rule, a.mode)).collect();
        assert_eq!(
            got,
            [
                ("teams-dm-triage", Mode::Auto),
                ("teams-dm-urgent", Mode::Confirm),
                ("teams-mention", Mode::Confirm),
                ("teams-other", Mode::Notify),
            ],
            "{actions:#?}"
        );
        assert!(
            actions[0].prompt.starts_with(
                "Triage this Teams direct message from Robin Kline:\n\nlunch on friday?"
            ),
            "{}",
            actions[0].prompt
        );
        assert!(
            !actions[0].tools.iter().any(|t| t == "channel_reply"),
            "triage sends nothing"
        );
        assert!(
            actions[1].prompt.contains("with `channel_reply` (seq 2)"),
            "{}",
            actions[1].prompt
        );
        assert!(
            actions[2].prompt.starts_with(
                "Robin Kline mentioned you in a Teams group chat:\n\n@Jane Smith can you look?"
            ),
            "{}",
            actions[2].prompt
        );
    }
}
