//! Alertmanager webhooks (version 4) → messages, one per alert. Pure: no I/O, no clock.
//!
//! Alertmanager posts a *group* of alerts and repeats it: on every `group_interval` when
//! something changed, on every `repeat_interval`, and on retry after a failed delivery. The
//! message id is `fingerprint:status:startsAt`, so the inbox stores each firing and each
//! resolve of an alert once however often the group is sent, while a resolve (new status) or a
//! new firing of the same alert (new `startsAt`) is a new message.
//!
//! - server `alertmanager`, channel `alerts/<severity label>` (`alerts/none` without one);
//! - content `[FIRING] <alertname>: <summary> — <description>`, or the other labels when the
//!   alert has neither annotation; `[RESOLVED] ...` once resolved;
//! - timestamp `startsAt` while firing, `endsAt` once resolved;
//! - metadata (flat, string → string): `alertname`, `severity`, `status`, `fingerprint`,
//!   `startsAt`, `endsAt` (resolved only), `generatorURL`, `receiver`, `groupKey`,
//!   `externalURL`, and every label as `labels.<name>` and annotation as `annotations.<name>`.
//!   Top-level keys have no dot, so they never collide with a label or annotation.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::PayloadError;
use crate::message::NewMessage;

/// The `server` of every Alertmanager message.
pub const SERVER: &str = "alertmanager";

/// The metadata keys an Alertmanager message may carry, besides [`META_PREFIXES`] (for
/// `rules check`, which warns about a placeholder no message can fill).
pub const META_KEYS: &[&str] = &[
    "alertname",
    "severity",
    "status",
    "fingerprint",
    "startsAt",
    "endsAt",
    "generatorURL",
    "receiver",
    "groupKey",
    "externalURL",
];

/// Every label and annotation, by name.
pub const META_PREFIXES: &[&str] = &["labels.", "annotations."];

/// The webhook body, version 4.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Webhook {
    #[serde(default)]
    receiver: String,
    #[serde(default)]
    group_key: String,
    #[serde(rename = "externalURL", default)]
    external_url: String,
    alerts: Vec<Alert>,
}

/// One alert of the group.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Alert {
    status: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    starts_at: String,
    #[serde(default)]
    ends_at: String,
    #[serde(rename = "generatorURL", default)]
    generator_url: String,
    #[serde(default)]
    fingerprint: String,
}

/// Converts a webhook body into one message per alert, in the order of `alerts`.
pub fn messages(payload: Value) -> Result<Vec<NewMessage>, PayloadError> {
    let Value::Object(fields) = &payload else {
        return Err(PayloadError::Shape(format!(
            "expected an alertmanager webhook object, got {}",
            crate::json_kind(&payload)
        )));
    };
    match fields.get("version") {
        Some(Value::String(v)) if v == "4" => {}
        Some(Value::String(v)) => return Err(PayloadError::UnsupportedVersion(v.clone())),
        Some(other) => return Err(PayloadError::UnsupportedVersion(other.to_string())),
        None => return Err(PayloadError::Shape("missing field `version`".into())),
    }
    let hook: Webhook =
        serde_json::from_value(payload).map_err(|e| PayloadError::Shape(e.to_string()))?;
    hook.alerts
        .iter()
        .enumerate()
        .map(|(i, alert)| {
            message(&hook, alert).map_err(|e| PayloadError::Shape(format!("alerts[{i}]: {e}")))
        })
        .collect()
}

fn message(hook: &Webhook, alert: &Alert) -> Result<NewMessage, String> {
    let resolved = match alert.status.as_str() {
        "firing" => false,
        "resolved" => true,
        other => {
            return Err(format!(
                "unknown status \"{other}\"; expected \"firing\" or \"resolved\""
            ));
        }
    };
    let starts_at = parse_time("startsAt", &alert.starts_at)?;
    let timestamp = if resolved {
        parse_time("endsAt", &alert.ends_at)?
    } else {
        starts_at
    };
    let fingerprint = if alert.fingerprint.is_empty() {
        label_hash(&alert.labels)
    } else {
        alert.fingerprint.clone()
    };
    let alertname = alert.labels.get("alertname").map(String::as_str);
    let severity = alert
        .labels
        .get("severity")
        .map(|s| s.trim())
        .filter(|s| !s.is_empty());

    let mut msg = NewMessage::new(
        SERVER,
        format!("alerts/{}", severity.unwrap_or("none").replace('/', "_")),
        content(resolved, alertname, &alert.labels, &alert.annotations),
    )
    .with_id(format!(
        "{fingerprint}:{}:{}",
        alert.status, alert.starts_at
    ))
    .with_timestamp(timestamp);
    let optional = [
        ("alertname", alertname.unwrap_or_default()),
        ("severity", severity.unwrap_or_default()),
        ("endsAt", if resolved { &alert.ends_at } else { "" }),
        ("generatorURL", &alert.generator_url),
        ("receiver", &hook.receiver),
        ("groupKey", &hook.group_key),
        ("externalURL", &hook.external_url),
    ];
    let fixed = [
        ("status", alert.status.as_str()),
        ("fingerprint", &fingerprint),
        ("startsAt", &alert.starts_at),
    ];
    let optional = optional.into_iter().filter(|(_, v)| !v.is_empty());
    let labels = (alert.labels.iter()).map(|(k, v)| (format!("labels.{k}"), v.as_str()));
    let annotations =
        (alert.annotations.iter()).map(|(k, v)| (format!("annotations.{k}"), v.as_str()));
    // Built at once: each `with_meta` would rebuild the metadata.
    msg.metadata = (fixed.into_iter().chain(optional))
        .map(|(k, v)| (k.to_string(), v))
        .chain(labels)
        .chain(annotations)
        .collect();
    Ok(msg)
}

/// `[FIRING] HighLatency: <summary> — <description>`; without either annotation, the other
/// labels (`instance=api-3, job=api`).
fn content(
    resolved: bool,
    alertname: Option<&str>,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> String {
    let state = if resolved { "RESOLVED" } else { "FIRING" };
    let name = alertname.unwrap_or("alert");
    let mut parts: Vec<&str> = Vec::new();
    for key in ["summary", "description"] {
        if let Some(text) = annotations.get(key).map(|s| s.trim())
            && !text.is_empty()
            && !parts.contains(&text)
        {
            parts.push(text);
        }
    }
    let detail = if parts.is_empty() {
        labels
            .iter()
            .filter(|(k, _)| *k != "alertname")
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        parts.join(" — ")
    };
    if detail.is_empty() {
        format!("[{state}] {name}")
    } else {
        format!("[{state}] {name}: {detail}")
    }
}

fn parse_time(field: &str, text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("invalid `{field}` \"{text}\": {e}"))
}

/// A stand-in fingerprint for senders that omit it: the first 16 hex digits of the SHA-256 of
/// the sorted labels, so the same label set always gets the same id.
fn label_hash(labels: &BTreeMap<String, String>) -> String {
    let mut hasher = Sha256::new();
    for (k, v) in labels {
        hasher.update(k.as_bytes());
        hasher.update([0xff]);
        hasher.update(v.as_bytes());
        hasher.update([0xfe]);
    }
    hasher
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fixture(name: &str) -> Value {
        let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    #[test]
    fn firing_group_gives_one_message_per_alert_on_its_severity_channel() {
        let msgs = messages(fixture("alertmanager-firing.json")).unwrap();
        let channels: Vec<_> = msgs.iter().map(|m| m.channel.as_str()).collect();
        assert_eq!(
            channels,
            ["alerts/critical", "alerts/warning", "alerts/none"]
        );
        assert!(msgs.iter().all(|m| m.server == "alertmanager"));

        let m = &msgs[0];
        assert_eq!(
            m.content,
            "[FIRING] HighLatency: p99 latency above 2s on api-1 — The p99 request latency of \
             api-1 has been above 2s for 5 minutes (current value: 2.71s)."
        );
        assert_eq!(
            m.id.as_deref(),
            Some("1f6f9c5e3a4b2d07:firing:2026-03-02T09:41:17.183Z")
        );
        assert_eq!(
            m.timestamp,
            Some("2026-03-02T09:41:17.183Z".parse().unwrap())
        );
        let meta = |k: &str| m.metadata.get(k);
        assert_eq!(meta("alertname"), Some("HighLatency"));
        assert_eq!(meta("severity"), Some("critical"));
        assert_eq!(meta("status"), Some("firing"));
        assert_eq!(meta("fingerprint"), Some("1f6f9c5e3a4b2d07"));
        assert_eq!(meta("labels.instance"), Some("api-1:8080"));
        assert_eq!(meta("labels.job"), Some("api"));
        assert_eq!(
            meta("annotations.runbook_url"),
            Some("https://runbooks.example.com/HighLatency")
        );
        assert_eq!(meta("receiver"), Some("switchboard"));
        assert_eq!(meta("groupKey"), Some("{}:{alertname=\"HighLatency\"}"));
        assert_eq!(
            meta("externalURL"),
            Some("http://alertmanager.example.com:9093")
        );
        assert!(
            meta("generatorURL")
                .unwrap()
                .starts_with("http://prometheus")
        );
        assert_eq!(meta("endsAt"), None, "a firing alert has no end yet");

        assert_eq!(
            msgs[1].content,
            "[FIRING] HighLatency: p99 latency above 1s on api-2"
        );
        assert_eq!(
            msgs[2].content, "[FIRING] HighLatency: instance=api-3:8080, job=api",
            "no annotations: the labels say which alert"
        );
        assert_eq!(msgs[2].metadata.get("severity"), None);
    }

    #[test]
    fn resolved_group_gets_new_ids_and_the_end_time() {
        let firing = messages(fixture("alertmanager-firing.json")).unwrap();
        let resolved = messages(fixture("alertmanager-resolved.json")).unwrap();
        assert_eq!(resolved.len(), 2);
        let m = &resolved[0];
        assert!(
            m.content
                .starts_with("[RESOLVED] HighLatency: p99 latency above 2s on api-1"),
            "{}",
            m.content
        );
        assert_eq!(
            m.id.as_deref(),
            Some("1f6f9c5e3a4b2d07:resolved:2026-03-02T09:41:17.183Z")
        );
        assert_ne!(
            m.id, firing[0].id,
            "a resolve is stored, not taken for a repeat"
        );
        assert_eq!(
            m.timestamp,
            Some("2026-03-02T10:03:47.183Z".parse().unwrap())
        );
        assert_eq!(m.metadata.get("endsAt"), Some("2026-03-02T10:03:47.183Z"));
        assert_eq!(m.channel, "alerts/critical");
    }

    #[test]
    fn the_same_group_sent_again_gives_the_same_ids() {
        let a = messages(fixture("alertmanager-firing.json")).unwrap();
        let b = messages(fixture("alertmanager-firing.json")).unwrap();
        assert_eq!(
            a.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
            b.iter().map(|m| m.id.clone()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_missing_fingerprint_is_derived_from_the_labels() {
        let hook = |instance: &str| {
            json!({"version": "4", "alerts": [{
                "status": "firing",
                "labels": {"alertname": "Down", "instance": instance},
                "startsAt": "2026-03-02T09:00:00Z"
            }]})
        };
        let one = messages(hook("a")).unwrap().remove(0);
        let again = messages(hook("a")).unwrap().remove(0);
        let other = messages(hook("b")).unwrap().remove(0);
        let fp = one.metadata["fingerprint"].to_string();
        assert_eq!(fp.len(), 16);
        assert_eq!(one.id, again.id);
        assert_ne!(one.id, other.id);
        assert_eq!(
            one.id.as_deref(),
            Some(format!("{fp}:firing:2026-03-02T09:00:00Z").as_str())
        );
        assert_eq!(one.content, "[FIRING] Down: instance=a");
    }

    #[test]
    fn a_severity_with_a_slash_stays_one_channel_segment() {
        let hook = json!({"version": "4", "alerts": [{
            "status": "firing", "labels": {"alertname": "X", "severity": "p1/page"},
            "startsAt": "2026-03-02T09:00:00Z"
        }]});
        assert_eq!(messages(hook).unwrap()[0].channel, "alerts/p1_page");
    }

    #[test]
    fn wrong_version_and_wrong_shapes_are_rejected_with_a_reason() {
        let err = messages(json!({"version": "3", "alerts": []})).unwrap_err();
        assert_eq!(err, PayloadError::UnsupportedVersion("3".into()));
        assert_eq!(err.code(), "unsupported_version");
        assert_eq!(
            messages(json!({"version": 4, "alerts": []})).unwrap_err(),
            PayloadError::UnsupportedVersion("4".into()),
            "a number is not the string \"4\""
        );

        let shape = |v: Value| match messages(v).unwrap_err() {
            PayloadError::Shape(m) => m,
            other => panic!("expected a shape error, got {other:?}"),
        };
        assert_eq!(shape(json!({"alerts": []})), "missing field `version`");
        assert_eq!(shape(json!({"version": "4"})), "missing field `alerts`");
        assert!(shape(json!([1])).contains("got an array"));
        let bad_status = json!({"version": "4", "alerts": [
            {"status": "firing", "startsAt": "2026-03-02T09:00:00Z"},
            {"status": "pending", "startsAt": "2026-03-02T09:00:00Z"}
        ]});
        assert_eq!(
            shape(bad_status),
            "alerts[1]: unknown status \"pending\"; expected \"firing\" or \"resolved\""
        );
        let bad_time = json!({"version": "4", "alerts": [
            {"status": "firing", "startsAt": "yesterday"}
        ]});
        assert!(
            shape(bad_time).starts_with("alerts[0]: invalid `startsAt` \"yesterday\""),
            "names the field"
        );
        assert_eq!(PayloadError::Shape(String::new()).code(), "invalid_payload");
    }
}
