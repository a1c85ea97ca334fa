//! GitHub webhook deliveries → messages, and the `X-Hub-Signature-256` check. Pure: no I/O.
//!
//! One delivery gives one message: server `github`, channel `ci/<event>` (the
//! `X-GitHub-Event` header, e.g. `ci/workflow_run`), id = the `X-GitHub-Delivery` header (so a
//! redelivery is not stored twice), timestamp = when it was received. The content is one line
//! naming the repository, what ran (workflow, check, branch), how it ended, and where to look:
//!
//! ```text
//! octo-org/octo-repo: workflow "Build" #562 on main completed: failure — https://github.com/…
//! ```
//!
//! `workflow_run`, `check_run`, `check_suite`, `push` and `pull_request` have their own
//! summaries; any other event falls back to `<repo>: <event> <action> by <sender>`. `ping` (sent
//! when a webhook is created) gives no message. Metadata keys, each only when the payload has
//! it: `event`, `delivery`, `repo`, `action`, `sender`, `workflow`, `check`, `branch`, `sha`,
//! `status`, `conclusion`, `author` (pull requests), `url`.

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

use super::PayloadError;
use crate::message::NewMessage;

/// The `server` of every GitHub message.
pub const SERVER: &str = "github";

/// The metadata keys a GitHub message may carry (for `rules check`, which warns about a
/// placeholder no message can fill).
pub const META_KEYS: &[&str] = &[
    "event",
    "delivery",
    "repo",
    "action",
    "sender",
    "workflow",
    "check",
    "branch",
    "sha",
    "status",
    "conclusion",
    "author",
    "url",
];

/// Whether an `X-Hub-Signature-256` value has the shape of one (`sha256=` and 64 hex digits),
/// before the body it signs is read.
pub fn signature_shaped(header: &str) -> bool {
    header
        .trim()
        .strip_prefix("sha256=")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether `header` (the `X-Hub-Signature-256` value, `sha256=<hex>`) is the HMAC-SHA256 of
/// `body` under `secret`. The comparison takes the same time wherever the first difference is.
pub fn signature_matches(secret: &[u8], body: &[u8], header: &str) -> bool {
    let Some(hex) = header.trim().strip_prefix("sha256=") else {
        return false;
    };
    let Some(expected) = crate::auth::decode_hex(hex) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// Converts the delivery of `event` with id `delivery` into messages: one, or none for `ping`.
pub fn messages(
    event: &str,
    delivery: &str,
    payload: &Value,
) -> Result<Vec<NewMessage>, PayloadError> {
    if !payload.is_object() {
        return Err(PayloadError::Shape(format!(
            "expected a github webhook object, got {}",
            crate::json_kind(payload)
        )));
    }
    if event == "ping" {
        return Ok(Vec::new());
    }
    let s = Summary::new(event, payload);
    let summary = match event {
        "workflow_run" => s.workflow_run()?,
        "check_run" => s.check_run()?,
        "check_suite" => s.check_suite()?,
        "push" => s.push(),
        "pull_request" => s.pull_request()?,
        _ => s.fallback(),
    };
    let channel = format!("ci/{}", event.replace('/', "_"));
    let mut msg = NewMessage::new(SERVER, channel, summary.content).with_id(delivery);
    let mut meta = vec![
        ("delivery", delivery.to_string()),
        ("repo", s.repo.clone()),
        ("action", s.action.clone()),
        ("sender", s.sender.clone()),
    ];
    meta.extend(summary.meta);
    // Built at once, as the Alertmanager source's: each `with_meta` would rebuild the metadata.
    let present = meta.into_iter().filter(|(_, v)| !v.is_empty());
    msg.metadata = std::iter::once(("event", event.to_string()))
        .chain(present)
        .collect();
    Ok(vec![msg])
}

/// What every event has in common, read leniently (GitHub adds fields all the time).
struct Summary<'a> {
    event: &'a str,
    payload: &'a Value,
    repo: String,
    action: String,
    sender: String,
}

/// A workflow run, check run or check suite: what its summary is made of.
struct Run {
    /// `workflow "Build" #562`, `check "test"`, `check suite "GitHub Actions"`.
    subject: String,
    /// The metadata key of `name`: `workflow` or `check`.
    name_key: &'static str,
    name: String,
    branch: String,
    sha: String,
    status: String,
    conclusion: String,
    url: String,
}

/// The content line and the event's own metadata.
struct Converted {
    content: String,
    meta: Vec<(&'static str, String)>,
}

impl<'a> Summary<'a> {
    fn new(event: &'a str, payload: &'a Value) -> Summary<'a> {
        Summary {
            event,
            payload,
            repo: text(payload, &["repository", "full_name"]),
            action: text(payload, &["action"]),
            sender: text(payload, &["sender", "login"]),
        }
    }

    /// The object the event is about; a known event without it has the wrong shape.
    fn object(&self, key: &str) -> Result<&'a Value, PayloadError> {
        match self.payload.get(key) {
            Some(v) if v.is_object() => Ok(v),
            _ => Err(PayloadError::Shape(format!(
                "a `{}` delivery needs an object `{key}`",
                self.event
            ))),
        }
    }

    fn repo_prefix(&self) -> String {
        if self.repo.is_empty() {
            String::new()
        } else {
            format!("{}: ", self.repo)
        }
    }

    fn workflow_run(&self) -> Result<Converted, PayloadError> {
        let run = self.object("workflow_run")?;
        let mut name = text(self.payload, &["workflow", "name"]);
        if name.is_empty() {
            name = text(run, &["name"]);
        }
        let number = run
            .get("run_number")
            .and_then(Value::as_u64)
            .map(|n| format!(" #{n}"))
            .unwrap_or_default();
        Ok(self.run(Run {
            subject: format!("workflow \"{name}\"{number}"),
            name_key: "workflow",
            name,
            branch: text(run, &["head_branch"]),
            sha: text(run, &["head_sha"]),
            status: text(run, &["status"]),
            conclusion: text(run, &["conclusion"]),
            url: text(run, &["html_url"]),
        }))
    }

    fn check_run(&self) -> Result<Converted, PayloadError> {
        let run = self.object("check_run")?;
        let name = text(run, &["name"]);
        let mut url = text(run, &["html_url"]);
        if url.is_empty() {
            url = text(run, &["details_url"]);
        }
        Ok(self.run(Run {
            subject: format!("check \"{name}\""),
            name_key: "check",
            name,
            branch: text(run, &["check_suite", "head_branch"]),
            sha: text(run, &["head_sha"]),
            status: text(run, &["status"]),
            conclusion: text(run, &["conclusion"]),
            url,
        }))
    }

    fn check_suite(&self) -> Result<Converted, PayloadError> {
        let suite = self.object("check_suite")?;
        let app = text(suite, &["app", "name"]);
        let sha = text(suite, &["head_sha"]);
        let repo_url = text(self.payload, &["repository", "html_url"]);
        let url = if repo_url.is_empty() || sha.is_empty() {
            String::new()
        } else {
            format!("{repo_url}/commit/{sha}")
        };
        let subject = if app.is_empty() {
            "check suite".to_string()
        } else {
            format!("check suite \"{app}\"")
        };
        Ok(self.run(Run {
            subject,
            name_key: "check",
            name: app,
            branch: text(suite, &["head_branch"]),
            sha,
            status: text(suite, &["status"]),
            conclusion: text(suite, &["conclusion"]),
            url,
        }))
    }

    /// `<repo>: <subject> on <branch> <status>: <conclusion> — <url>`, and its metadata.
    fn run(&self, r: Run) -> Converted {
        let content = format!(
            "{}{}{}{}{}",
            self.repo_prefix(),
            r.subject,
            on(&r.branch),
            outcome(&r.status, &r.conclusion),
            link(&r.url)
        );
        Converted {
            content,
            meta: vec![
                (r.name_key, r.name),
                ("branch", r.branch),
                ("sha", r.sha),
                ("status", r.status),
                ("conclusion", r.conclusion),
                ("url", r.url),
            ],
        }
    }

    fn push(&self) -> Converted {
        let reference = text(self.payload, &["ref"]);
        let branch = reference
            .strip_prefix("refs/heads/")
            .or_else(|| reference.strip_prefix("refs/tags/"))
            .unwrap_or(&reference)
            .to_string();
        let mut pusher = text(self.payload, &["pusher", "name"]);
        if pusher.is_empty() {
            pusher = self.sender.clone();
        }
        let commits = self
            .payload
            .get("commits")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let head = text(self.payload, &["head_commit", "message"]);
        let head = head.lines().next().unwrap_or_default();
        let url = text(self.payload, &["compare"]);
        let what = if self.payload.get("deleted").and_then(Value::as_bool) == Some(true) {
            format!("deleted {branch}")
        } else {
            let s = if commits == 1 { "" } else { "s" };
            let head = if head.is_empty() {
                String::new()
            } else {
                format!(": \"{head}\"")
            };
            format!("pushed {commits} commit{s} to {branch}{head}")
        };
        Converted {
            content: format!("{}{pusher} {what}{}", self.repo_prefix(), link(&url)),
            meta: vec![
                ("branch", branch),
                ("sha", text(self.payload, &["after"])),
                ("url", url),
            ],
        }
    }

    fn pull_request(&self) -> Result<Converted, PayloadError> {
        let pr = self.object("pull_request")?;
        let number = pr
            .get("number")
            .or_else(|| self.payload.get("number"))
            .and_then(Value::as_u64)
            .map(|n| format!(" #{n}"))
            .unwrap_or_default();
        let title = text(pr, &["title"]);
        let merged = pr.get("merged").and_then(Value::as_bool) == Some(true);
        let action = if self.action == "closed" && merged {
            "merged"
        } else {
            self.action.as_str()
        };
        let author = text(pr, &["user", "login"]);
        let (head, base) = (text(pr, &["head", "ref"]), text(pr, &["base", "ref"]));
        let url = text(pr, &["html_url"]);
        let mut content = format!("{}pull request{number} \"{title}\"", self.repo_prefix());
        if !action.is_empty() {
            content.push_str(&format!(" {action}"));
        }
        if !self.sender.is_empty() {
            content.push_str(&format!(" by {}", self.sender));
        }
        if !head.is_empty() && !base.is_empty() {
            content.push_str(&format!(" ({head} → {base})"));
        }
        content.push_str(&link(&url));
        Ok(Converted {
            content,
            meta: vec![
                ("branch", head),
                ("sha", text(pr, &["head", "sha"])),
                ("status", text(pr, &["state"])),
                ("author", author),
                ("url", url),
            ],
        })
    }

    fn fallback(&self) -> Converted {
        let mut content = format!("{}{}", self.repo_prefix(), self.event);
        if !self.action.is_empty() {
            content.push_str(&format!(" {}", self.action));
        }
        if !self.sender.is_empty() {
            content.push_str(&format!(" by {}", self.sender));
        }
        let url = text(self.payload, &["repository", "html_url"]);
        content.push_str(&link(&url));
        Converted {
            content,
            meta: vec![("url", url)],
        }
    }
}

/// The string at `path`, or empty (missing, null, or not a string).
fn text(v: &Value, path: &[&str]) -> String {
    path.iter()
        .try_fold(v, |v, key| v.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn on(branch: &str) -> String {
    if branch.is_empty() {
        String::new()
    } else {
        format!(" on {branch}")
    }
}

/// ` completed: failure`, ` in_progress`, or nothing.
fn outcome(status: &str, conclusion: &str) -> String {
    match (status.is_empty(), conclusion.is_empty()) {
        (true, true) => String::new(),
        (true, false) => format!(": {conclusion}"),
        (false, true) => format!(" {status}"),
        (false, false) => format!(" {status}: {conclusion}"),
    }
}

fn link(url: &str) -> String {
    if url.is_empty() {
        String::new()
    } else {
        format!(" — {url}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fixture(name: &str) -> Vec<u8> {
        std::fs::read(format!(
            "{}/tests/fixtures/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    /// The `Name: value` lines of a `.headers` fixture.
    fn header(name: &str, key: &str) -> String {
        String::from_utf8(fixture(name))
            .unwrap()
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(": ")?;
                k.eq_ignore_ascii_case(key).then(|| v.to_string())
            })
            .unwrap()
    }

    const SECRET: &[u8] = b"It's a Secret to Everybody";

    #[test]
    fn signature_matches_githubs_documented_example() {
        // From GitHub's "Validating webhook deliveries".
        let header = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(signature_matches(SECRET, b"Hello, World!", header));
        assert!(!signature_matches(SECRET, b"Hello, World?", header));
        assert!(!signature_matches(
            b"another secret",
            b"Hello, World!",
            header
        ));
    }

    #[test]
    fn malformed_signature_headers_never_match() {
        let body = b"Hello, World!";
        for header in [
            "",
            "sha256=",
            "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1",
            "sha256=zz7107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "sha256=757107ea",
        ] {
            assert!(!signature_matches(SECRET, body, header), "{header:?}");
        }
    }

    #[test]
    fn fixture_signatures_are_valid() {
        for event in ["workflow_run", "check_run"] {
            let body = fixture(&format!("github-{event}.json"));
            let sig = header(&format!("github-{event}.headers"), "X-Hub-Signature-256");
            assert!(signature_matches(SECRET, &body, &sig), "{event}");
        }
    }

    fn convert(event: &str) -> NewMessage {
        let body = fixture(&format!("github-{event}.json"));
        let delivery = header(&format!("github-{event}.headers"), "X-GitHub-Delivery");
        let payload: Value = serde_json::from_slice(&body).unwrap();
        let mut msgs = messages(event, &delivery, &payload).unwrap();
        assert_eq!(msgs.len(), 1);
        msgs.remove(0)
    }

    #[test]
    fn workflow_run_names_repo_workflow_branch_conclusion_and_url() {
        let m = convert("workflow_run");
        assert_eq!(m.server, "github");
        assert_eq!(m.channel, "ci/workflow_run");
        assert_eq!(
            m.content,
            "octo-org/octo-repo: workflow \"Build\" #562 on main completed: failure — \
             https://github.com/octo-org/octo-repo/actions/runs/30433642"
        );
        assert_eq!(
            m.id.as_deref(),
            Some("72d3162e-cc78-11e3-81ab-4c9367dc0958")
        );
        assert_eq!(m.timestamp, None, "stamped when received");
        let meta: Vec<_> = m.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            meta,
            [
                "action=completed",
                "branch=main",
                "conclusion=failure",
                "delivery=72d3162e-cc78-11e3-81ab-4c9367dc0958",
                "event=workflow_run",
                "repo=octo-org/octo-repo",
                "sender=octocat",
                "sha=acb5820ced9479c074f688cc328bf03f341a511d",
                "status=completed",
                "url=https://github.com/octo-org/octo-repo/actions/runs/30433642",
                "workflow=Build",
            ]
        );
    }

    #[test]
    fn check_run_names_the_check_and_its_suites_branch() {
        let m = convert("check_run");
        assert_eq!(m.channel, "ci/check_run");
        assert_eq!(
            m.content,
            "octo-org/octo-repo: check \"test (ubuntu-latest)\" on feature/login completed: \
             success — https://github.com/octo-org/octo-repo/runs/128620228"
        );
        assert_eq!(&m.metadata["check"], "test (ubuntu-latest)");
        assert_eq!(&m.metadata["branch"], "feature/login");
        assert_eq!(&m.metadata["conclusion"], "success");
        assert_eq!(
            m.id.as_deref(),
            Some("9a4b5c6d-1f2e-11f1-8c3b-0242ac120002")
        );
    }

    #[test]
    fn a_run_still_in_progress_has_no_conclusion() {
        let payload = json!({
            "action": "in_progress",
            "workflow_run": {"name": "CI", "head_branch": "dev", "status": "in_progress",
                             "conclusion": null, "html_url": "https://github.com/o/r/actions/runs/1"},
            "repository": {"full_name": "o/r"}
        });
        let m = messages("workflow_run", "d1", &payload).unwrap().remove(0);
        assert_eq!(
            m.content,
            "o/r: workflow \"CI\" on dev in_progress — https://github.com/o/r/actions/runs/1"
        );
        assert!(!m.metadata.contains_key("conclusion"));
    }

    #[test]
    fn check_suite_push_and_pull_request_have_their_own_summaries() {
        let suite = json!({
            "action": "completed",
            "check_suite": {"head_branch": "main", "head_sha": "abc123", "status": "completed",
                            "conclusion": "failure", "app": {"name": "GitHub Actions"}},
            "repository": {"full_name": "o/r", "html_url": "https://github.com/o/r"},
            "sender": {"login": "bot"}
        });
        assert_eq!(
            messages("check_suite", "d", &suite).unwrap()[0].content,
            "o/r: check suite \"GitHub Actions\" on main completed: failure — \
             https://github.com/o/r/commit/abc123"
        );

        let push = json!({
            "ref": "refs/heads/main", "after": "def456",
            "compare": "https://github.com/o/r/compare/abc123...def456",
            "commits": [{}, {}],
            "head_commit": {"message": "Fix flaky test\n\nLonger body"},
            "pusher": {"name": "octocat"},
            "repository": {"full_name": "o/r"}, "sender": {"login": "octocat"}
        });
        let m = messages("push", "d", &push).unwrap().remove(0);
        assert_eq!(m.channel, "ci/push");
        assert_eq!(
            m.content,
            "o/r: octocat pushed 2 commits to main: \"Fix flaky test\" — \
             https://github.com/o/r/compare/abc123...def456"
        );
        assert_eq!(&m.metadata["branch"], "main");

        let pr = json!({
            "action": "closed", "number": 42,
            "pull_request": {"number": 42, "title": "Add login", "merged": true, "state": "closed",
                             "html_url": "https://github.com/o/r/pull/42",
                             "user": {"login": "dev"}, "head": {"ref": "login", "sha": "aaa"},
                             "base": {"ref": "main"}},
            "repository": {"full_name": "o/r"}, "sender": {"login": "lead"}
        });
        assert_eq!(
            messages("pull_request", "d", &pr).unwrap()[0].content,
            "o/r: pull request #42 \"Add login\" merged by lead (login → main) — \
             https://github.com/o/r/pull/42"
        );
    }

    #[test]
    fn other_events_fall_back_to_repo_action_and_sender() {
        let payload = json!({
            "action": "created",
            "repository": {"full_name": "o/r", "html_url": "https://github.com/o/r"},
            "sender": {"login": "octocat"}
        });
        let m = messages("issue_comment", "d9", &payload).unwrap().remove(0);
        assert_eq!(m.channel, "ci/issue_comment");
        assert_eq!(
            m.content,
            "o/r: issue_comment created by octocat — https://github.com/o/r"
        );
        assert_eq!(&m.metadata["action"], "created");
        assert_eq!(&m.metadata["event"], "issue_comment");
    }

    #[test]
    fn ping_gives_no_message() {
        let payload = json!({"zen": "Design for failure.", "hook_id": 1});
        assert!(messages("ping", "d", &payload).unwrap().is_empty());
    }

    #[test]
    fn a_known_event_without_its_object_is_the_wrong_shape() {
        let err = messages("workflow_run", "d", &json!({"action": "completed"})).unwrap_err();
        assert_eq!(
            err,
            PayloadError::Shape("a `workflow_run` delivery needs an object `workflow_run`".into())
        );
        let err = messages("push", "d", &json!([])).unwrap_err();
        assert_eq!(err.code(), "invalid_payload");
    }
}
