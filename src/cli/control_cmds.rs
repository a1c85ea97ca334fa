//! The operator commands that talk to the running server over the control
//! socket (`list`, `confirm`, `pending`, `pause`, `resume`, `stats`), and `install`.
//!
//! Human output is for a terminal, and message text comes from outside: control
//! characters, ANSI escapes and bidi overrides in channels, content and prompts are printed
//! escaped ([`escape`]: `\n`, `\x1b`, `\u{202e}`), so a message cannot forge a line or
//! repaint the screen. `--json` output stays JSON. Every write goes through `writeln!` so a
//! closed pipe (`switchboard list | head -1`) is an error `main` turns into a quiet exit 0.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::builder::PossibleValue;
use clap::{Args, ValueEnum};

use super::show::{count, message_line, pending_line};
use crate::backend::Client;
use crate::control::PendingView;
use crate::control::ops::{Closed, Confirm, Decision, GetStats, List, Pause, Pending, Stats};
use crate::delivery::exec::ExecStats;
use crate::message::MessageView;

/// How many closed confirms `pending --closed` shows.
const CLOSED_SHOWN: usize = 20;

/// Options of `list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only this channel (`alerts/*` = the prefix and below).
    #[arg(long, short)]
    pub channel: Option<String>,
    /// How many messages.
    #[arg(long, short = 'n', default_value_t = 20)]
    pub limit: usize,
    /// Print JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Options of `confirm`.
#[derive(Debug, Args)]
pub struct ConfirmArgs {
    /// The action id of the confirm request (`switchboard pending` lists them).
    pub id: u64,
    /// The answer: `yes` queues the prompt for the agent, `no` drops it. Required: a
    /// confirm is never approved by default.
    #[arg(value_enum)]
    pub decision: Option<Decision>,
    /// Print the approved item as JSON (the shape the wait tool returns) instead of a line.
    #[arg(long)]
    pub json: bool,
}

/// Options of `pending`.
#[derive(Debug, Args)]
pub struct PendingArgs {
    /// Print a JSON array instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print what a Copilot CLI hook injects (`{"additionalContext": ...}`); never fails.
    #[arg(long, conflicts_with = "json")]
    pub hook: bool,
    /// Also say how the recently closed confirms ended: approved or denied (via which path,
    /// by whom), expired, or resolved by a later message.
    #[arg(long, conflicts_with = "hook")]
    pub closed: bool,
}

/// Options of `stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Print the full JSON (for scripts) instead of a summary.
    #[arg(long)]
    pub json: bool,
}

/// `yes` and `no` on the command line (`approve` and `deny` too, the page's words).
impl ValueEnum for Decision {
    fn value_variants<'a>() -> &'a [Self] {
        &Decision::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let help = match self {
            Decision::Yes => "Approve: the prompt is queued to run",
            Decision::No => "Deny: nothing runs",
        };
        Some(
            PossibleValue::new(self.as_str())
                .alias(self.verb())
                .help(help),
        )
    }
}

/// Options of `install`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Which host.
    #[arg(value_enum)]
    pub host: Host,
    /// The file to write (default: ~/.copilot/mcp-config.json, or ./.mcp.json for Claude Code).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Print what would be written, and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also write hooks: for Copilot, `hooks/switchboard.json` beside the config (pending
    /// items at session start and on each prompt; the stop hook); for Claude Code, the stop
    /// hook in `.claude/settings.json` beside the `.mcp.json` (or `--settings`).
    #[arg(long)]
    pub hooks: bool,
    /// Claude Code: the settings file the stop hook goes into (default:
    /// `.claude/settings.json` beside the `.mcp.json`).
    #[arg(long, value_name = "FILE", requires = "hooks")]
    pub settings: Option<PathBuf>,
    /// Print `{"dry_run", "files": [{"path", "change", "what"}]}` instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// An MCP host `install` knows.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Host {
    /// GitHub Copilot CLI.
    Copilot,
    /// Claude Code (project `.mcp.json`).
    Claude,
}

/// `switchboard list`.
pub async fn list(home: PathBuf, args: ListArgs) -> anyhow::Result<ExitCode> {
    let messages = Client::connect(&home)
        .await?
        .call(List {
            channel: args.channel,
            limit: args.limit,
        })
        .await?
        .messages;
    {
        let mut out = std::io::stdout().lock();
        for m in messages {
            if args.json {
                // The shape the MCP tools use: `server`, not the journal's `serverName`.
                let v = serde_json::to_string(&MessageView::from(&m))?;
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "{}", message_line(&m))?;
            }
        }
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `switchboard confirm ID [yes|no]`.
pub async fn confirm(home: PathBuf, args: ConfirmArgs) -> anyhow::Result<ExitCode> {
    let Some(decision) = args.decision else {
        let id = args.id;
        return Err(super::exit::UsageError(format!(
            "confirm {id} needs an answer: `{}` or `{}`; `{}` lists the open requests",
            crate::home::command(&format!("confirm {id} yes")),
            crate::home::command(&format!("confirm {id} no")),
            crate::home::command("pending")
        ))
        .into());
    };
    // Not kept (the actions journal cannot be written) is refused as `not_recorded`: nothing
    // changed, and the exit code (7, not now) tells a script to try again.
    let approved = Client::connect(&home)
        .await?
        .call(Confirm {
            id: args.id,
            decision,
            by: crate::actions::By::this_user(),
            claim_for: None,
            via: Some(crate::actions::Via::Cli),
        })
        .await?;
    let mut out = std::io::stdout().lock();
    match approved {
        Some(item) if args.json => {
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&crate::control::ItemView::from(&item))?
            )?;
        }
        Some(item) if item.is_permission_request() => writeln!(
            out,
            "approved #{} [{}]: allowed; the verdict goes to {}'s host, which runs the call",
            args.id,
            super::show::escape(&item.rule),
            super::show::escape(&item.message.server)
        )?,
        Some(item) => {
            let first = item.prompt.lines().next().unwrap_or_default();
            let first: String = first.chars().take(100).collect();
            writeln!(
                out,
                "approved #{} [{}]: queued for the next agent wait: {}",
                args.id,
                super::show::escape(&item.rule),
                super::show::escape(&first)
            )?;
        }
        None if args.json => writeln!(out, "null")?,
        None => writeln!(out, "denied #{}: nothing will run", args.id)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `switchboard pause` / `resume`.
pub async fn pause(home: PathBuf, paused: bool, json: bool) -> anyhow::Result<ExitCode> {
    let now = Client::connect(&home).await?.call(Pause { paused }).await?;
    if json {
        super::show::print_json(&serde_json::json!({"paused": now.paused}))?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        std::io::stdout().lock(),
        "{}",
        if now.paused {
            "paused: messages are stored but not evaluated, now or later"
        } else {
            "resumed: messages from now on are evaluated"
        }
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `switchboard stats`: a summary for people, or `--json`.
pub async fn stats(home: PathBuf, args: StatsArgs) -> anyhow::Result<ExitCode> {
    let stats = Client::connect(&home)
        .await?
        .call(GetStats { consumer: None })
        .await?
        .stats;
    let text = if args.json {
        serde_json::to_string_pretty(&stats)?
    } else {
        stats_text(&stats)
    };
    writeln!(std::io::stdout().lock(), "{text}")?;
    Ok(ExitCode::SUCCESS)
}

/// The summary `switchboard stats` prints.
fn stats_text(all: &Stats) -> String {
    let s = &all.core;
    let d = &s.delivery;
    let dropped: u64 = d.counters.dropped.values().sum();
    let mut out = vec![
        format!(
            "inbox     last seq {}, {} in memory, journal {}",
            s.inbox.last_seq, s.inbox.ring_depth, s.inbox.journal_status
        ),
        format!(
            "rules     {} live{}{}",
            s.rules_loaded,
            if s.paused { ", evaluation PAUSED" } else { "" },
            s.last_reload
                .as_ref()
                .map(|r| format!("; last reload: {}", r.message))
                .unwrap_or_default()
        ),
        format!(
            "delivery  {} waiting, {} held for the next session, {} pending, {} work queued, {} claimed, {}, {} dropped",
            count(d.nudges_waiting as u64, "nudge", "nudges"),
            d.nudges_held,
            count(d.pending_confirms as u64, "confirm", "confirms"),
            d.queued_work,
            d.claimed_work,
            count(d.sessions as u64, "session", "sessions"),
            dropped
        ),
        all.part::<ExecStats>("exec")
            .map(|e| exec_line(&e))
            .unwrap_or_else(|| "exec      not wired".into()),
        format!(
            "          {} waits in flight; actions journal {}",
            s.wait_calls_in_flight, d.actions_journal
        ),
    ];
    let upstreams: Vec<crate::sources::upstream::UpstreamState> =
        all.part("upstreams").unwrap_or_default();
    for u in &upstreams {
        out.push(format!("upstream  {}", super::show::upstream_line(u)));
    }
    let listeners: Vec<crate::daemon::ListenerState> = all.part("listeners").unwrap_or_default();
    for l in &listeners {
        if let Some(error) = &l.error {
            out.push(format!("{:<9} WARNING not listening: {error}", l.what));
        }
    }
    if let Some(js) = all.part::<crate::sources::jetstream::JetStreamState>("jetstream") {
        out.push(format!("jetstream {}", js.line()));
    }
    if let Some(teams) = all.part::<crate::sources::teams::TeamsState>("teams") {
        out.push(format!("teams     {}", teams.line(chrono::Utc::now())));
    }
    if let Some(slack) = all.part::<crate::sources::slack::SlackState>("slack") {
        out.push(format!("slack     {}", slack.line()));
    }
    if let Some(r) = all.part::<crate::config::ConfigReload>("config_reload") {
        out.push(format!("config    {} (at {})", r.message, r.at));
    }
    if d.pending_confirms > 0 {
        out.push(format!(
            "(`{}` lists the open confirms)",
            crate::home::command("pending")
        ));
    }
    out.join("\n")
}

/// The `exec` line of `stats`: host, readiness, runs.
fn exec_line(e: &ExecStats) -> String {
    let failed: u64 = e.failed.values().sum();
    format!(
        "exec      {} (`{}`{}), preflight {}; {} running of {}, {} queued, {} succeeded, {} not",
        e.host,
        e.command,
        e.version
            .as_deref()
            .map(|v| format!(" {v}"))
            .unwrap_or_default(),
        e.preflight,
        e.running,
        e.max_concurrent,
        e.queued,
        e.succeeded,
        failed
    )
}

/// `switchboard pending`: open confirm requests with rule, channel, excerpt and time left.
pub async fn pending(home: PathBuf, args: PendingArgs) -> anyhow::Result<ExitCode> {
    if args.hook {
        return super::hooks::pending_hook(home).await;
    }
    let mut client = Client::connect(&home).await?;
    let open: Vec<PendingView> = client.call(Pending {}).await?;
    let closed = if args.closed {
        client
            .call(Closed {
                limit: CLOSED_SHOWN,
            })
            .await?
    } else {
        Vec::new()
    };
    let mut out = std::io::stdout().lock();
    if args.json && args.closed {
        let both = serde_json::json!({"pending": open, "closed": closed});
        writeln!(out, "{}", serde_json::to_string_pretty(&both)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&open)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.closed {
        if closed.is_empty() {
            writeln!(out, "no confirm closed since the daemon started")?;
        }
        for c in &closed {
            writeln!(out, "{}", super::show::closed_line(c))?;
        }
    }
    if open.is_empty() {
        writeln!(out, "no pending confirms")?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = chrono::Utc::now();
    for p in &open {
        writeln!(out, "{}", pending_line(p, now))?;
    }
    writeln!(
        out,
        "answer with `{}` or `{}`",
        crate::home::command("confirm ID yes"),
        crate::home::command("confirm ID no")
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `switchboard install copilot|claude`: adds the MCP entry, keeping what is there.
pub async fn install(
    home: PathBuf,
    explicit_home: bool,
    args: InstallArgs,
) -> anyhow::Result<ExitCode> {
    if args.settings.is_some() && !matches!(args.host, Host::Claude) {
        return Err(
            super::exit::UsageError("`--settings` is for `install claude --hooks`".into()).into(),
        );
    }
    let exe = std::env::current_exe()?;
    let exe_text = exe.display().to_string();
    if is_build_output(&exe) {
        eprintln!(
            "warning: {exe_text} is a cargo build output: the next `cargo build` or `cargo clean` \
             replaces or removes it under the host. Install the binary with `cargo install --locked --path .` \
             and run `{}` from there",
            crate::home::command("install")
        );
    }
    // A home named on the command line or in SWITCHBOARD_HOME goes into the entry, so that the
    // host's front ends use the same home.
    let mut serve_args: Vec<String> = Vec::new();
    if explicit_home {
        let abs = std::path::absolute(&home).unwrap_or_else(|_| home.clone());
        serve_args.extend(["--home".into(), abs.display().to_string()]);
    }
    serve_args.push("serve".into());
    let (path, entry) = match args.host {
        Host::Copilot => {
            // Copilot CLI cuts a tool call at the server's `timeout` (ms): above the wait cap.
            let cap = crate::config::Home::open(&home)
                .ok()
                .and_then(|h| h.load_config().ok())
                .map(|c| c.mcp.max_wait_s)
                .unwrap_or(crate::config::McpSettings::default().max_wait_s);
            (
                args.config.unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                        .join(".copilot/mcp-config.json")
                }),
                serde_json::json!({
                    "type": "local",
                    "command": exe_text,
                    "args": serve_args,
                    "tools": ["*"],
                    "timeout": copilot_timeout_ms(cap),
                }),
            )
        }
        Host::Claude => (
            args.config.unwrap_or_else(|| PathBuf::from(".mcp.json")),
            serde_json::json!({"type": "stdio", "command": exe_text, "args": serve_args}),
        ),
    };
    let path_text = path.display().to_string();
    let mut doc: serde_json::Value = match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{path_text}:{}:{}: not valid JSON: {e}; not changed",
                e.line(),
                e.column()
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::json!({}),
        Err(e) => anyhow::bail!("cannot read {path_text}: {e}"),
    };
    let root = doc.as_object_mut().ok_or_else(|| {
        anyhow::anyhow!("{path_text}: the top level is not a JSON object; not changed")
    })?;
    let servers = root
        .entry("mcpServers")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or_else(|| {
            anyhow::anyhow!("{path_text}: `mcpServers` is not an object; not changed")
        })?;
    let previous = servers.insert("switchboard".into(), entry.clone());
    let verb = match &previous {
        None => "added `switchboard` to",
        Some(old) if *old == entry => "`switchboard` is already up to date in",
        Some(_) => "updated `switchboard` in",
    };
    let mut text = serde_json::to_string_pretty(&doc)?;
    text.push('\n');
    // The hooks ask the daemon of this home, whatever the host's environment says.
    let hooks = match (args.hooks, args.host) {
        (false, _) => None,
        (true, host) => {
            let abs = std::path::absolute(&home).unwrap_or_else(|_| home.clone());
            Some(match host {
                Host::Copilot => super::hooks::plan_copilot(&exe_text, &abs, &path)?,
                Host::Claude => {
                    let settings = args
                        .settings
                        .clone()
                        .unwrap_or_else(|| super::hooks::claude_settings_path(&path));
                    super::hooks::plan_claude(&exe_text, &abs, &settings)?
                }
            })
        }
    };
    let entry_file = super::hooks::HooksPlan {
        path,
        text,
        verb,
        what: "the `switchboard` MCP server",
    };
    write_install(&entry_file, hooks.as_ref(), args.dry_run, args.json)
}

/// Writes (or, in a dry run, shows) the host's configuration and its hooks, and says so.
fn write_install(
    entry: &super::hooks::HooksPlan,
    hooks: Option<&super::hooks::HooksPlan>,
    dry_run: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let path_text = entry.path.display().to_string();
    if json {
        let mut files = vec![entry.summary(dry_run)];
        files.extend(hooks.map(|h| h.summary(dry_run)));
        if !dry_run {
            write_entry(entry)?;
            if let Some(hooks) = hooks {
                hooks.write(true)?;
            }
        }
        super::show::print_json(&serde_json::json!({"dry_run": dry_run, "files": files}))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    if dry_run {
        writeln!(out, "would write {path_text} (dry run, nothing written):")?;
        write!(out, "{}", entry.text)?;
        drop(out);
        if let Some(hooks) = hooks {
            hooks.show()?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    write_entry(entry)?;
    writeln!(out, "{} {path_text}", entry.verb)?;
    drop(out);
    if let Some(hooks) = hooks {
        hooks.write(false)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the host's MCP configuration file, creating its directory.
fn write_entry(entry: &super::hooks::HooksPlan) -> anyhow::Result<()> {
    if let Some(dir) = entry.path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    crate::config::write_atomic(&entry.path, entry.text.as_bytes())?;
    Ok(())
}

/// Copilot CLI's per-server `timeout` (ms) for a wait cap of `cap_s` seconds: the cap plus
/// half a minute for the reply to travel.
fn copilot_timeout_ms(cap_s: u64) -> u64 {
    (cap_s + 30) * 1000
}

/// Whether `exe` is in a cargo target directory: `target/debug` or `target/release` by name, or
/// any directory whose profile folder (one or two levels up: `<dir>/<profile>`,
/// `<dir>/<triple>/<profile>`) holds the `CACHEDIR.TAG` cargo writes there, as with
/// `CARGO_TARGET_DIR` or `build.target-dir`.
fn is_build_output(exe: &Path) -> bool {
    let parts: Vec<_> = exe.components().map(|c| c.as_os_str()).collect();
    let by_name = parts
        .windows(2)
        .any(|w| w[0] == "target" && ["debug", "release"].iter().any(|p| w[1] == *p));
    by_name
        || exe.ancestors().skip(2).take(2).any(|dir| {
            std::fs::read(dir.join("CACHEDIR.TAG"))
                .is_ok_and(|tag| tag.starts_with(b"Signature: 8a477f597d28d172789f06886806bc55"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_outputs_are_recognised() {
        assert!(is_build_output(Path::new(
            "/src/sb/target/debug/switchboard"
        )));
        assert!(is_build_output(Path::new(
            "/src/sb/target/release/switchboard"
        )));
        assert!(!is_build_output(Path::new(
            "/home/me/.cargo/bin/switchboard"
        )));
        assert!(!is_build_output(Path::new("/opt/target/switchboard")));
        // A target directory of another name (`CARGO_TARGET_DIR`), known by cargo's tag.
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("debug").join("switchboard");
        assert!(!is_build_output(&exe));
        std::fs::write(
            dir.path().join("CACHEDIR.TAG"),
            "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by cargo.\n",
        )
        .unwrap();
        assert!(is_build_output(&exe));
        assert!(is_build_output(
            &dir.path()
                .join("x86_64-unknown-linux-gnu/release/switchboard")
        ));
        assert_eq!(copilot_timeout_ms(55), 85_000);
    }
}
