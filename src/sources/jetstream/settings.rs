//! The `jetstream` section of `switchboard.json`: where the shared stream is and who this
//! instance is on it.
//!
//! The JetStream component owns these settings; the process configuration only places them
//! under `jetstream`. The section is optional: without it the daemon is the single-machine
//! switchboard and nothing of this component runs.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// JetStream settings (`jetstream`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct JetStreamSettings {
    /// NATS server URLs (`nats://host:4222`); at least one.
    pub servers: Vec<String>,
    /// A NATS credentials file (`.creds`: JWT and nkey seed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials: Option<PathBuf>,
    /// A NATS token, instead of a credentials file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The stream's name (default `SWITCHBOARD`); created on first use when missing.
    pub stream: String,
    /// The first token of every subject (default `switchboard`): messages go to
    /// `PREFIX.msg.<channel>`, heartbeats to `PREFIX.hb.<instance>`.
    pub subject_prefix: String,
    /// This daemon's name on the stream, which also names its durable consumer: letters,
    /// digits, `_` and `-` (default: the host name and the home, `host:/home/me/.switchboard`,
    /// whose consumer is that with `_` for the other characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// How long an ingest waits for JetStream's acknowledgement before it answers 503
    /// (`publishTimeout`, default `5s`).
    #[serde(with = "crate::duration::text")]
    pub publish_timeout: Duration,
    /// How long a message delivered to this instance's consumer may stay unacknowledged
    /// before JetStream delivers it again (`ackWait`, default `30s`).
    #[serde(with = "crate::duration::text")]
    pub ack_wait: Duration,
    /// How often this instance says it is alive on `PREFIX.hb.<instance>` (`heartbeat`,
    /// default `2s`); `status` lists the instances heard within three heartbeats.
    #[serde(with = "crate::duration::text")]
    pub heartbeat: Duration,
    /// How long a piece of shared work taken by this instance may go without a sign of life
    /// (this instance extends it every third of that while it holds it) before JetStream
    /// gives it to another instance's waiting session (`workAckWait`, default `30s`). The
    /// shared work consumer is created with the first instance's value.
    #[serde(with = "crate::duration::text")]
    pub work_ack_wait: Duration,
}

impl Default for JetStreamSettings {
    fn default() -> Self {
        JetStreamSettings {
            servers: Vec::new(),
            credentials: None,
            token: None,
            stream: "SWITCHBOARD".into(),
            subject_prefix: "switchboard".into(),
            instance: None,
            publish_timeout: Duration::from_secs(5),
            ack_wait: Duration::from_secs(30),
            heartbeat: Duration::from_secs(2),
            work_ack_wait: Duration::from_secs(30),
        }
    }
}

impl JetStreamSettings {
    /// Every problem of the section: the key (`servers`, `ackWait`, ...) and the sentence.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.servers.is_empty() {
            out.push((
                "servers",
                "`jetstream.servers`: at least one NATS URL is needed (\"nats://127.0.0.1:4222\")"
                    .to_string(),
            ));
        }
        for s in &self.servers {
            if let Err(e) = s.parse::<async_nats::ServerAddr>() {
                out.push(("servers", format!("`jetstream.servers` \"{s}\": {e}")));
            }
        }
        if self.credentials.is_some() && self.token.is_some() {
            out.push((
                "credentials",
                "`jetstream.credentials` and `jetstream.token`: give one, not both".to_string(),
            ));
        }
        if !is_token(&self.stream) {
            out.push((
                "stream",
                format!(
                    "`jetstream.stream` \"{}\": a stream name is letters, digits, `_` and `-`",
                    self.stream
                ),
            ));
        }
        if let Some(instance) = &self.instance
            && !is_token(instance)
        {
            // It names the durable consumer: names that differ only in what a NATS name
            // cannot hold (`ada laptop`, `ada.laptop`) would share one (issue 46.6).
            out.push((
                "instance",
                format!(
                    "`jetstream.instance` \"{}\": an instance name is letters, digits, `_` and \
                     `-` (it names this instance's durable consumer on the stream)",
                    instance.escape_debug()
                ),
            ));
        }
        if self.subject_prefix.is_empty() || !self.subject_prefix.split('.').all(is_token) {
            out.push((
                "subjectPrefix",
                format!(
                    "`jetstream.subjectPrefix` \"{}\": dot-separated tokens of letters, digits, \
                     `_` and `-`",
                    self.subject_prefix
                ),
            ));
        }
        out
    }

    /// This instance's name: `instance`, or `host:home`.
    pub fn instance_name(&self, home: &std::path::Path) -> String {
        match self.instance.as_deref().map(str::trim) {
            Some(name) if !name.is_empty() => name.to_string(),
            _ => format!("{}:{}", host_name(), home.display()),
        }
    }
}

/// A NATS name token: non-empty, letters, digits, `_` and `-`.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The machine's host name (`localhost` when it cannot be read).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_name_the_stream_the_prefix_and_the_instance() {
        let s: JetStreamSettings =
            serde_json::from_str(r#"{"servers": ["nats://127.0.0.1:4222"]}"#).unwrap();
        assert_eq!(s.stream, "SWITCHBOARD");
        assert_eq!(s.subject_prefix, "switchboard");
        assert!(s.problems().is_empty(), "{:?}", s.problems());
        let name = s.instance_name(std::path::Path::new("/home/me/.switchboard"));
        assert_eq!(name, format!("{}:/home/me/.switchboard", host_name()));
        let named = JetStreamSettings {
            instance: Some("oncall-1".into()),
            ..s
        };
        assert_eq!(named.instance_name(std::path::Path::new("/x")), "oncall-1");
    }

    #[test]
    fn problems_name_the_key() {
        let s: JetStreamSettings = serde_json::from_str(
            r#"{"token": "t", "credentials": "/c.creds", "stream": "a.b", "subjectPrefix": "x.>"}"#,
        )
        .unwrap();
        let p = s.problems();
        let keys: Vec<_> = p.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["servers", "credentials", "stream", "subjectPrefix"]);
        // Issue 46.6: `ada laptop` and `ada.laptop` shared one durable consumer.
        for bad in ["ada laptop", "ada.laptop", "", "a>b", "ada/laptop"] {
            let s = JetStreamSettings {
                servers: vec!["nats://127.0.0.1:4222".into()],
                instance: Some(bad.into()),
                ..Default::default()
            };
            let p = s.problems();
            assert_eq!(p.len(), 1, "{bad:?}: {p:?}");
            assert_eq!(p[0].0, "instance");
            assert!(
                p[0].1.contains("letters, digits, `_` and `-`"),
                "{}",
                p[0].1
            );
        }
        for (key, sentence) in &p {
            assert!(
                sentence.starts_with(&format!("`jetstream.{key}")),
                "{sentence}"
            );
        }
        assert!(serde_json::from_str::<JetStreamSettings>(r#"{"server": []}"#).is_err());
        // Durations longer than zero, refused as they are read.
        assert!(serde_json::from_str::<JetStreamSettings>(r#"{"ackWait": "0"}"#).is_err());
    }
}
