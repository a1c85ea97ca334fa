//! Entry points for the fuzz targets in `fuzz/`, one per decoder that takes bytes from
//! outside: the rules file, templates, the inbox journal record, the three webhook decoders,
//! the control protocol and a JSON-RPC line. Each takes arbitrary bytes, must never panic,
//! and checks what must hold for any input (a rendered prompt is capped, a decoded record
//! re-encodes). The `cargo fuzz` targets call these, and the tests below replay every kept
//! file through them: the hand-written seeds (`fuzz/seeds/<target>/`) and every input that once
//! crashed a target (`fuzz/regressions/<target>/`), so a crash found once stays fixed. The
//! corpus a fuzzing run grows (`fuzz/corpus/<target>/`) stays out of git; when one is there,
//! it is replayed too.

use chrono::TimeZone;

use crate::message::{Message, NewMessage};
use crate::rules::template::{MAX_RENDERED_BYTES, Template};

/// A fuzz entry point: arbitrary bytes in, a panic on a bug.
pub type Target = fn(&[u8]);

/// Every target: its name (its directory under `fuzz/seeds/`, `fuzz/regressions/` and
/// `fuzz/corpus/`) and its entry point.
pub const TARGETS: &[(&str, Target)] = &[
    ("rules_file", rules_file),
    ("template", template),
    ("journal_record", journal_record),
    ("alertmanager", alertmanager),
    ("github", github),
    ("generic_webhook", generic_webhook),
    ("control_request", control_request),
    ("jsonrpc_line", jsonrpc_line),
];

/// A message with a bit of everything, for rendering.
fn sample(content: &str) -> Message {
    let at = chrono::Utc.with_ymd_and_hms(2026, 11, 23, 9, 0, 0).unwrap();
    Message::from_new(
        NewMessage::new("alertmanager", "alerts/critical", content)
            .with_meta("host", "db1")
            .with_meta("x", "{{content}}")
            .with_timestamp(at),
        7,
        at,
    )
}

/// `triggers.json`: parse and validate; a valid file's rules match and render.
pub fn rules_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match crate::rules::RuleSet::parse(text) {
        Ok(rules) => {
            let msg = sample("disk full on db1 sev1");
            for rule in rules.rules() {
                let _ = rule.is_match(&msg);
                assert!(rule.render_prompt(&msg).len() <= MAX_RENDERED_BYTES);
            }
        }
        Err(errors) => {
            assert!(!errors.is_empty(), "an invalid file names its errors");
            for e in &errors {
                let _ = e.render("triggers.json");
            }
        }
    }
}

/// A prompt template: the first line is the template, the rest the message content.
pub fn template(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (tpl, content) = text.split_once('\n').unwrap_or((&text, "content"));
    if let Ok(t) = Template::parse(tpl) {
        let out = t.render(&sample(content));
        assert!(out.len() <= MAX_RENDERED_BYTES, "{} bytes", out.len());
    }
}

/// A line of `channels.jsonl`, as boot replay decodes it; a decoded record re-encodes to a
/// line that decodes to the same record.
pub fn journal_record(data: &[u8]) {
    let Ok(msg) = serde_json::from_slice::<Message>(data) else {
        return;
    };
    let line = serde_json::to_string(&msg).expect("a message encodes");
    let again: Message = serde_json::from_str(&line).expect("an encoded message decodes");
    assert_eq!(
        serde_json::to_string(&again).unwrap(),
        line,
        "a record survives a round trip"
    );
}

/// `POST /v1/alertmanager`.
pub fn alertmanager(data: &[u8]) {
    if let Ok(payload) = serde_json::from_slice(data) {
        let _ = crate::sources::alertmanager::messages(payload);
    }
}

/// `POST /v1/github`: the first line is the `X-GitHub-Event` header, the rest the body.
pub fn github(data: &[u8]) {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let event = String::from_utf8_lossy(&data[..split]);
    let body = data.get(split + 1..).unwrap_or_default();
    if let Ok(payload) = serde_json::from_slice(body) {
        let _ = crate::sources::github::messages(&event, "fuzz-delivery", &payload);
    }
}

/// `POST /v1/messages`: the direct read and the read through a `Value` agree on every body the
/// direct read accepts.
pub fn generic_webhook(data: &[u8]) {
    let direct = crate::sources::http::read_messages(data);
    if let Ok(value) = serde_json::from_slice(data) {
        let slow = crate::sources::http::generic_messages(value);
        if let Some(direct) = direct {
            assert_eq!(Some(direct), slow.ok(), "the direct read of a body differs");
        }
    } else {
        assert!(
            direct.is_none(),
            "the direct read took a body that is not JSON"
        );
    }
}

/// A control socket line, both ways; a decoded line re-encodes and decodes again.
pub fn control_request(data: &[u8]) {
    use crate::control::Call;
    use crate::control::wire::{Down, Greeting, Up};
    if let Ok(call) = serde_json::from_slice::<Call>(data) {
        let line = serde_json::to_vec(&call).expect("a call encodes");
        serde_json::from_slice::<Call>(&line).expect("and decodes");
    }
    if let Ok(up) = serde_json::from_slice::<Up>(data) {
        let line = serde_json::to_vec(&up).expect("a line encodes");
        serde_json::from_slice::<Up>(&line).expect("and decodes");
    }
    if let Ok(down) = serde_json::from_slice::<Down>(data) {
        let line = serde_json::to_vec(&down).expect("a daemon line encodes");
        serde_json::from_slice::<Down>(&line).expect("and decodes");
    }
    if let Ok(greeting) = serde_json::from_slice::<Greeting>(data) {
        let line = serde_json::to_vec(&greeting).expect("a greeting encodes");
        serde_json::from_slice::<Greeting>(&line).expect("and decodes");
    }
}

/// A line from an MCP host: as rmcp's stdio codec decodes it, and as the `/mcp`
/// `server/discover` probe looks at it.
pub fn jsonrpc_line(data: &[u8]) {
    let _ = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(data);
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = v["method"] == "server/discover";
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files of `dir`, none when it does not exist.
    fn files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        match std::fs::read_dir(dir) {
            Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => panic!("{}: {e}", dir.display()),
        }
    }

    /// Replays every kept file of every target (its seeds and the inputs that once crashed
    /// it), and a local corpus when a fuzzing run left one.
    #[test]
    fn every_kept_fuzz_input_replays_without_a_panic() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
        for (name, target) in TARGETS {
            let seeds = files(&root.join("seeds").join(name));
            assert!(!seeds.is_empty(), "fuzz/seeds/{name}: no seeds");
            let kept = ["regressions", "corpus"]
                .iter()
                .flat_map(|kind| files(&root.join(kind).join(name)));
            for path in seeds.into_iter().chain(kept) {
                let data = std::fs::read(&path).unwrap();
                if std::env::var_os("SB_TRACE_CORPUS").is_some() {
                    eprintln!("replay {name} {}", path.display());
                }
                let replay = std::panic::catch_unwind(|| target(&data));
                assert!(replay.is_ok(), "{name}: {} panics", path.display());
            }
        }
    }

    /// The regressions are there: the rules files whose content regex nests deeper than the
    /// limit overflowed a debug build's 2 MiB thread stack before the limit existed.
    #[test]
    fn the_inputs_that_once_crashed_are_kept() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
        let deep = files(&root.join("rules_file"));
        assert!(
            deep.len() >= 50,
            "fuzz/regressions/rules_file: {} files",
            deep.len()
        );
        for path in deep {
            let text = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
            let errors = crate::rules::RuleSet::parse(&text)
                .err()
                .unwrap_or_default();
            assert!(
                errors
                    .iter()
                    .any(|e| e.render("triggers.json").contains("more than 50 deep")),
                "{}: refused for another reason, or not at all",
                path.display()
            );
        }
    }

    #[test]
    fn the_entry_points_check_what_they_claim() {
        // A template that would blow past the cap, and the injection a message can try.
        template(format!("{}\n{}", "{{content}}".repeat(100), "x".repeat(10_000)).as_bytes());
        template(b"{{content}} {{meta.x}}\n{{meta.host}}");
        journal_record(
            br#"{"seq":1,"serverName":"s","channel":"c","content":"x","timestamp":"2026-11-23T09:00:00.123Z"}"#,
        );
        control_request(br#"{"cmd":"list","channel":null,"limit":3}"#);
    }
}
