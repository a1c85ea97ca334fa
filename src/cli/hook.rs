//! `switchboard hook stop` (the command a host's stop hook runs), `switchboard hook
//! post-tool-use` (Claude Code's `PostToolUse` hook, for the permission relay) and
//! `switchboard duty`.
//!
//! The host (Copilot CLI's `agentStop`, Claude Code's `Stop`) runs the hook when its agent is
//! about to end a turn, with the event as JSON on stdin: a session id (`sessionId` or
//! `session_id`) and `stop_hook_active` (true when this stop follows a continuation a hook
//! forced). Printing `{"decision": "block", "reason": ...}` makes the host start another turn
//! with the reason as the user's message; printing nothing lets the agent stop.
//!
//! The hook must never break the host: without a daemon, with an unreadable event or a daemon
//! that does not answer in time, it prints nothing and exits 0. It asks the daemon once
//! (`hook_stop`); when that hands it work, it writes the decision, then says so (`hook_done`),
//! so the work is recorded delivered only once the decision is out, and a hook killed before
//! that has its claim released with its connection.
//!
//! The post-tool-use hook gets `tool_name` and `tool_input` of a call that ran: its permission
//! was granted, so the relayed request for it, if one is open, was answered in the host's own
//! dialog (`tool_ran`). It prints nothing, and exits 0 whatever happens.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;

use crate::backend::Client;
use crate::control::ops::{HookDecision, HookDone, HookStop, SetDuty, ToolRan};

/// The most a hook reads from the host (its event is a small JSON object).
const MAX_EVENT: u64 = 1 << 20;

/// How long the hook waits for the daemon before it lets the stop through.
const DAEMON_LIMIT: Duration = Duration::from_secs(5);

/// `switchboard hook ...`.
#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// The stop hook: hand the agent the next queued work as its next turn, or let it stop.
    Stop(StopArgs),
    /// Claude Code's `PostToolUse` hook: a call ran, so a relayed permission request for it
    /// was allowed in the host's own dialog.
    PostToolUse,
}

/// Options of `hook stop`.
#[derive(Debug, Args)]
pub struct StopArgs {
    /// Which host runs the hook (default: guessed from the event).
    #[arg(long, value_enum)]
    pub host: Option<HookHost>,
}

/// A host whose stop hook switchboard serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HookHost {
    /// GitHub Copilot CLI (`agentStop`).
    Copilot,
    /// Claude Code (`Stop`).
    Claude,
}

impl HookHost {
    /// The name in consumers and counters.
    pub fn name(self) -> &'static str {
        match self {
            HookHost::Copilot => "copilot",
            HookHost::Claude => "claude",
        }
    }
}

/// Options of `duty`.
#[derive(Debug, Args)]
pub struct DutyArgs {
    /// `on`, `off`, or nothing to show the mode.
    #[arg(value_enum)]
    pub mode: Option<DutyMode>,
    /// On duty for this long, then off by itself (`8h`, `90m`).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
    pub for_: Option<Duration>,
    /// Print the mode as JSON (`{"on", "until"}`).
    #[arg(long)]
    pub json: bool,
}

/// On or off duty.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DutyMode {
    /// Stops with nothing queued are told to call the wait tool.
    On,
    /// Stops with nothing queued go through.
    Off,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    match crate::duration::parse(text)? {
        d if d.is_zero() => Err("a duration above 0 (`8h`)".into()),
        d => Ok(d),
    }
}

/// What the hook reads of the host's event.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct StopEvent {
    /// The host's session.
    pub session_id: String,
    /// `stop_hook_active`.
    pub continued: bool,
    /// The host, when the event says (Claude Code names its event `Stop`).
    pub host: Option<HookHost>,
}

impl StopEvent {
    /// Reads the event, in either host's spelling; or says what is wrong with it.
    pub fn parse(text: &str) -> Result<StopEvent, String> {
        let v: Value = match serde_json::from_str(text) {
            Ok(v @ Value::Object(_)) => v,
            Ok(other) => {
                return Err(format!(
                    "the host's event is {}, not a JSON object",
                    crate::json_kind(&other)
                ));
            }
            Err(_) if text.trim().is_empty() => {
                return Err("the host sent no event on stdin".into());
            }
            Err(e) => return Err(format!("the host's event is not JSON: {e}")),
        };
        let field = |names: &[&str]| names.iter().find_map(|n| v.get(*n)).cloned();
        let Some(session_id) = field(&["sessionId", "session_id"]) else {
            return Err("the host's event has no session id (`sessionId` or `session_id`)".into());
        };
        let session_id = match session_id {
            Value::String(s) => s,
            other => other.to_string(),
        };
        let continued = field(&["stop_hook_active", "stopHookActive"])
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let host = match v.get("hook_event_name").and_then(Value::as_str) {
            Some(_) => Some(HookHost::Claude),
            None if v.get("sessionId").is_some() => Some(HookHost::Copilot),
            None => None,
        };
        Ok(StopEvent {
            session_id,
            continued,
            host,
        })
    }
}

/// `switchboard hook stop`.
pub async fn stop(home: PathBuf, args: StopArgs) -> anyhow::Result<ExitCode> {
    let mut text = String::new();
    if let Err(e) = std::io::stdin().take(MAX_EVENT).read_to_string(&mut text) {
        eprintln!(
            "switchboard hook stop: cannot read the host's event: {e}; the stop goes through"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let event = match StopEvent::parse(&text) {
        Ok(event) => event,
        Err(why) => {
            eprintln!("switchboard hook stop: {why}; the stop goes through");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let host = args.host.or(event.host).unwrap_or(HookHost::Copilot);
    // No daemon: nothing can be queued; stay silent and fast.
    if !home.join("control.sock").exists() {
        return Ok(ExitCode::SUCCESS);
    }
    match tokio::time::timeout(DAEMON_LIMIT, decide(&home, host, event)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("switchboard hook stop: {e:#}; the stop goes through"),
        Err(_) => eprintln!(
            "switchboard hook stop: the daemon did not answer within {}s; the stop goes through",
            DAEMON_LIMIT.as_secs()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

async fn decide(home: &Path, host: HookHost, event: StopEvent) -> anyhow::Result<()> {
    let Ok(mut client) = Client::connect(home).await else {
        return Ok(());
    };
    let decision = client
        .call(HookStop {
            host: host.name().into(),
            session_id: event.session_id,
            continued: event.continued,
        })
        .await?;
    let HookDecision::Block { reason, claim } = decision else {
        return Ok(());
    };
    let line = serde_json::json!({"decision": "block", "reason": reason});
    let written = {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").and_then(|()| out.flush())
    };
    if let Some(claim) = claim {
        client
            .call(HookDone {
                host: host.name().into(),
                session: claim.session,
                action_id: claim.action_id,
                delivered: written.is_ok(),
            })
            .await?;
    }
    written.map_err(|e| anyhow::anyhow!("cannot write the decision: {e}"))
}

/// What the post-tool-use hook reads of the host's event: the call that ran.
pub fn tool_ran(text: &str) -> Option<ToolRan> {
    let v: Value = serde_json::from_str(text).ok()?;
    // Only a call that ran: a failure event may follow a refusal (see `cli::hooks`).
    if v.get("hook_event_name")
        .and_then(Value::as_str)
        .is_some_and(|e| e != "PostToolUse")
    {
        return None;
    }
    let tool_name = v.get("tool_name")?.as_str()?.to_string();
    Some(ToolRan {
        tool_name,
        tool_input: v.get("tool_input").cloned().unwrap_or(Value::Null),
    })
}

/// `switchboard hook post-tool-use`.
pub async fn post_tool_use(home: PathBuf) -> anyhow::Result<ExitCode> {
    let mut text = String::new();
    if let Err(e) = std::io::stdin().take(MAX_EVENT).read_to_string(&mut text) {
        eprintln!("switchboard hook post-tool-use: cannot read the host's event: {e}");
        return Ok(ExitCode::SUCCESS);
    }
    let Some(call) = tool_ran(&text) else {
        eprintln!(
            "switchboard hook post-tool-use: the host's event is not a `PostToolUse` event with a \
             `tool_name`; nothing done"
        );
        return Ok(ExitCode::SUCCESS);
    };
    // No daemon: no request is open.
    if !home.join("control.sock").exists() {
        return Ok(ExitCode::SUCCESS);
    }
    let told = async {
        let Ok(mut client) = Client::connect(&home).await else {
            return Ok(());
        };
        client.call(call).await.map(drop)
    };
    match tokio::time::timeout(DAEMON_LIMIT, told).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("switchboard hook post-tool-use: {e:#}"),
        Err(_) => eprintln!(
            "switchboard hook post-tool-use: the daemon did not answer within {}s",
            DAEMON_LIMIT.as_secs()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// `switchboard duty [on|off] [--for 8h]`.
pub async fn duty(home: PathBuf, args: DutyArgs) -> anyhow::Result<ExitCode> {
    if args.for_.is_some() && !matches!(args.mode, Some(DutyMode::On)) {
        return Err(super::exit::UsageError("`--for` goes with `duty on`".into()).into());
    }
    let view = Client::connect(&home)
        .await?
        .call(SetDuty {
            on: args.mode.map(|m| matches!(m, DutyMode::On)),
            for_ms: args.for_.map(|d| d.as_millis() as u64),
        })
        .await?;
    if args.json {
        super::show::print_json(&serde_json::to_value(&view)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(std::io::stdout().lock(), "{}", duty_line(&view))?;
    Ok(ExitCode::SUCCESS)
}

/// `on duty until T` / `on duty` / `off duty`.
pub fn duty_line(view: &crate::actions::duty::DutyView) -> String {
    match (view.on, view.until) {
        (true, Some(until)) => format!(
            "on duty until {} (stops with nothing queued are told to call \
             `wait_for_inbound_message`)",
            crate::message::format_timestamp(until)
        ),
        (true, None) => "on duty (stops with nothing queued are told to call \
                         `wait_for_inbound_message`)"
            .into(),
        (false, _) => "off duty (stops with nothing queued go through)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_hosts_events_are_read() {
        let copilot = StopEvent::parse(
            r#"{"sessionId":"c-1","timestamp":1,"cwd":"/w","stop_hook_active":true}"#,
        )
        .unwrap();
        assert_eq!(
            copilot,
            StopEvent {
                session_id: "c-1".into(),
                continued: true,
                host: Some(HookHost::Copilot),
            }
        );
        let claude = StopEvent::parse(
            r#"{"session_id":"a-2","transcript_path":"/t","hook_event_name":"Stop","stop_hook_active":false}"#,
        )
        .unwrap();
        assert_eq!(claude.session_id, "a-2");
        assert!(!claude.continued);
        assert_eq!(claude.host, Some(HookHost::Claude));
        assert_eq!(
            StopEvent::parse(r#"{"cwd":"/w"}"#),
            Err("the host's event has no session id (`sessionId` or `session_id`)".into())
        );
    }

    #[test]
    fn a_post_tool_use_event_names_the_call_that_ran() {
        let call = tool_ran(
            r#"{"session_id":"a-2","cwd":"/w","hook_event_name":"PostToolUse","tool_name":"Bash",
                "tool_input":{"command":"ls","description":"List"},"tool_use_id":"toolu_1",
                "tool_response":{"stdout":""}}"#,
        )
        .unwrap();
        assert_eq!(call.tool_name, "Bash");
        assert_eq!(
            serde_json::to_string(&call.tool_input).unwrap(),
            r#"{"command":"ls","description":"List"}"#,
            "the host's key order is kept: its preview was cut from it"
        );
        assert!(tool_ran(r#"{"hook_event_name":"Stop"}"#).is_none());
        assert!(
            tool_ran(
                r#"{"hook_event_name":"PostToolUseFailure","tool_name":"Bash","tool_input":{}}"#
            )
            .is_none(),
            "a failure may follow a refusal"
        );
        assert!(tool_ran("not json").is_none());
        // Issue 47: non-JSON input said "the event has no session id".
        let why = StopEvent::parse("not json").unwrap_err();
        assert!(why.starts_with("the host's event is not JSON: "), "{why}");
        assert_eq!(
            StopEvent::parse("  \n").unwrap_err(),
            "the host sent no event on stdin"
        );
        assert_eq!(
            StopEvent::parse("[1]").unwrap_err(),
            "the host's event is an array, not a JSON object"
        );
    }
}
