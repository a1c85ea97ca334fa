//! The operator CLI against a running server.

use super::util::*;

#[test]
fn a_second_server_on_the_same_home_names_the_owner() {
    let sb = Switchboard::start();
    let out = cli_in(sb.home.path(), &["serve", "--no-stdio", "--no-listen"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("another switchboard (pid {})", sb.pid())),
        "stderr: {err}"
    );
}

#[test]
fn sigterm_exits_cleanly_and_removes_the_endpoint() {
    let mut sb = Switchboard::start();
    let status = sb.terminate();
    assert!(status.success(), "exit status {status}\n{}", sb.log());
    assert!(!sb.home.path().join("endpoint.json").exists());
}

#[test]
fn control_commands_without_a_server_explain_how_to_start_one() {
    let home = tempfile::tempdir().unwrap();
    let out = cli_in(home.path(), &["stats"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no switchboard is running"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn pause_and_resume_through_the_control_socket() {
    let sb = Switchboard::start();
    let out = sb.cli(&["pause"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stats: serde_json::Value = serde_json::from_slice(&sb.cli(&["stats"]).stdout).unwrap();
    assert_eq!(stats["paused"], true);
    assert!(sb.cli(&["resume"]).status.success());
    let stats: serde_json::Value = serde_json::from_slice(&sb.cli(&["stats"]).stdout).unwrap();
    assert_eq!(stats["paused"], false);
}

#[test]
fn install_copilot_keeps_existing_servers() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp-config.json");
    std::fs::write(
        &file,
        r#"{"mcpServers":{"other":{"type":"local","command":"x"}}}"#,
    )
    .unwrap();
    let out = cli_in(
        dir.path(),
        &["install", "copilot", "--config", file.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(doc["mcpServers"]["other"]["command"], "x");
    assert_eq!(doc["mcpServers"]["switchboard"]["args"][0], "serve");
    assert_eq!(doc["mcpServers"]["switchboard"]["tools"][0], "*");
}

#[test]
fn send_then_list_shows_the_message() {
    let sb = Switchboard::start();
    let out = sb.cli(&[
        "send",
        "--channel",
        "ci/main",
        "--meta",
        "run=42",
        "build failed",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "seq 1");
    let out = sb.cli(&["list", "--json"]);
    let line = stdout(&out);
    let msg: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(msg["channel"], "ci/main");
    assert_eq!(msg["serverName"], "cli");
    assert_eq!(msg["metadata"]["run"], "42");
    assert_eq!(msg["content"], "build failed");
}

#[test]
fn send_rejects_metadata_without_equals() {
    let home = tempfile::tempdir().unwrap();
    let out = cli_in(home.path(), &["send", "-c", "x", "--meta", "novalue", "hi"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("expected KEY=VALUE"),
        "{}",
        stderr(&out)
    );
}
