//! `switchboard serve` (an MCP front end on stdio), `switchboard daemon` (the daemon in the
//! foreground), and `start`, `stop`, `status` (the daemon in the background).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::backend::Client;
use crate::control::ops::{GetStatus, Shutdown, Status};
use crate::daemon::DaemonOptions;
use crate::daemon::ListenerState;
use crate::daemon::launch::{Launch, alive, connect_or_start};
use crate::delivery::exec::ExecStats;
use crate::frontend::FrontendOptions;
use crate::sources::upstream::UpstreamState;

/// Options of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
    /// Do not serve MCP on stdio: run the daemon in the foreground (same as `switchboard
    /// daemon`).
    #[arg(long)]
    pub no_stdio: bool,
    /// Read as this named consumer, which resumes its cursor across restarts (default: a
    /// consumer of this session's own, `CLIENT#N`); at most 64 bytes.
    #[arg(long, value_name = "NAME", value_parser = consumer_name)]
    pub consumer: Option<String>,
}

/// A `--consumer` name, checked as the daemon checks it.
fn consumer_name(name: &str) -> Result<String, String> {
    match crate::actions::lifecycle::consumer_name_problem(name) {
        Some(problem) => Err(problem),
        None => Ok(name.to_string()),
    }
}

/// The daemon's flags (`daemon`, `start`, and `serve`, which passes them on when it starts
/// the daemon).
#[derive(Clone, Debug, Default, Args)]
pub struct DaemonArgs {
    /// Also serve MCP over streamable HTTP at http://ADDR/mcp (e.g. 127.0.0.1:8788).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// HTTP ingest address (default 127.0.0.1:8787, or `http.listen` in switchboard.json).
    #[arg(long, value_name = "ADDR", conflicts_with = "no_listen")]
    pub listen: Option<String>,
    /// Do not start HTTP ingest.
    #[arg(long)]
    pub no_listen: bool,
    /// Log to this file, rotated by size (what `serve` and `start` pass to the daemon they
    /// start in the background).
    #[arg(long, value_name = "FILE", hide = true)]
    pub log_file: Option<PathBuf>,
    /// Refuse to create the home (what `serve` and `start` pass: a home deleted while the
    /// daemon was being started stays deleted).
    #[arg(long, hide = true)]
    pub existing_home: bool,
    /// Run without ingest when its port is taken, warning in `status` (what `serve` passes: a
    /// host's window must come up); otherwise a taken port stops the start.
    #[arg(long, hide = true)]
    pub listen_optional: bool,
}

impl DaemonArgs {
    fn options(&self) -> DaemonOptions {
        DaemonOptions {
            mcp_http: self.http.clone(),
            listen: self.listen.clone(),
            no_listen: self.no_listen,
            existing_home: self.existing_home,
            listen_optional: self.listen_optional,
            token: std::env::var(crate::config::TOKEN_ENV).ok(),
            github_secret: std::env::var(crate::config::GITHUB_SECRET_ENV).ok(),
            teams_secret: std::env::var(crate::config::TEAMS_SECRET_ENV).ok(),
            slack_tokens: crate::sources::slack::settings::SlackTokens::from_env(),
        }
    }

    fn frontend(&self, consumer: Option<String>) -> FrontendOptions {
        FrontendOptions {
            mcp_http: self.http.clone(),
            listen: self.listen.clone(),
            no_listen: self.no_listen,
            consumer,
            listen_optional: false,
        }
    }
}

impl ServeArgs {
    /// The log file the daemon of this command line writes, if any.
    pub fn log_file(&self) -> Option<&Path> {
        self.daemon.log_file.as_deref()
    }
}

/// `serve`: an MCP front end on stdio until stdin closes (or SIGINT/SIGTERM); with
/// `--no-stdio`, the daemon in the foreground.
pub async fn execute(home: PathBuf, args: ServeArgs) -> anyhow::Result<ExitCode> {
    if args.no_stdio {
        return daemon(home, args.daemon).await;
    }
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        eprintln!(
            "switchboard serve speaks MCP (JSON-RPC) on stdin and stdout: an MCP host starts it \
             (`{}` or `{}`)",
            crate::home::command("install copilot"),
            crate::home::command("install claude")
        );
        eprintln!(
            "to run switchboard from a terminal, use `{}` (or `{}` in the foreground), and `{}` \
             to see what arrives",
            crate::home::command("start"),
            crate::home::command("daemon"),
            crate::home::command("watch")
        );
    }
    let frontend = FrontendOptions {
        listen_optional: true,
        ..args.daemon.frontend(args.consumer)
    };
    crate::frontend::run(home, frontend, crate::daemon::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

/// `daemon`: the daemon in the foreground until SIGINT, SIGTERM or `switchboard stop`.
pub async fn daemon(home: PathBuf, args: DaemonArgs) -> anyhow::Result<ExitCode> {
    crate::daemon::run(home, args.options(), crate::daemon::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

/// Options of `start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
    /// Print the daemon's status as JSON, with `"started"`: false when one already ran.
    #[arg(long)]
    pub json: bool,
}

/// Options of `stop`.
#[derive(Debug, Args)]
pub struct StopArgs {
    /// Print `{"stopped", "pid"}` (or `{"running": false}`) as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `start`: the daemon in the background, unless one runs.
pub async fn start(home: PathBuf, args: StartArgs) -> anyhow::Result<ExitCode> {
    let (json, args) = (args.json, args.daemon);
    let mut out = std::io::stdout();
    if let Ok(Some(status)) = status_of(&home).await {
        if json {
            print_status_json(&mut out, &status, Some(false))?;
            return Ok(ExitCode::SUCCESS);
        }
        writeln!(
            out,
            "switchboard daemon already running (pid {}) on {}",
            status.pid, status.home
        )?;
        let differs = args.frontend(None).differences(&status.asked);
        if !differs.is_empty() {
            writeln!(
                out,
                "  it keeps the settings it was started with ({}); to change them, run `{}`, \
                 then `{}` with the new flags",
                differs.join("; "),
                crate::home::command("stop"),
                crate::home::command("start")
            )?;
        }
        warn_rules(&status);
        return Ok(ExitCode::SUCCESS);
    }
    // A taken ingest port fails the start with one line, before anything is launched.
    if let Ok(h) = crate::home::Home::open(&home) {
        let asked = crate::daemon::start::StartSettings::load(&h).merge(args.options());
        if !asked.no_listen {
            let addr = match asked.listen {
                Some(addr) => addr,
                None => h.load_config().map(|c| c.http.listen).unwrap_or_default(),
            };
            if !addr.is_empty()
                && let Err(e) = std::net::TcpListener::bind(&addr)
            {
                anyhow::bail!("{}", crate::daemon::port_taken(&addr, &e));
            }
        }
    }
    let launch = Launch::current(home.clone(), args.frontend(None).daemon_args())?;
    connect_or_start(&home, Some(&launch)).await?;
    let status = status_of(&home)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the daemon started but does not answer"))?;
    if json {
        print_status_json(&mut out, &status, Some(true))?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "switchboard daemon started (pid {}) on {}",
        status.pid, status.home
    )?;
    print_listeners(&mut out, &status)?;
    if let Some(log) = &status.log {
        writeln!(out, "  log: {log}")?;
    }
    warn_rules(&status);
    Ok(ExitCode::SUCCESS)
}

/// `start`'s warning when the daemon does not run the rules on disk (an invalid
/// `triggers.json`: it runs the built-in catch-all rule instead, or the rules it had).
fn warn_rules(status: &Status) {
    if let Some(rules) = status.rules.as_ref().filter(|r| !r.in_sync) {
        eprintln!(
            "warning: {}; `{}` says more",
            rules.line,
            crate::home::command("rules check")
        );
    }
}

/// The status as `status --json` prints it, with `started` for `start --json`.
fn print_status_json(
    out: &mut impl Write,
    status: &Status,
    started: Option<bool>,
) -> anyhow::Result<()> {
    let mut v = serde_json::to_value(status)?;
    v["running"] = true.into();
    if let Some(started) = started {
        v["started"] = started.into();
    }
    writeln!(out, "{v}")?;
    Ok(())
}

/// How long `stop` waits for the daemon to exit.
const STOP_WAIT: Duration = Duration::from_secs(15);

/// `stop`: asks the daemon to stop and waits until it has.
pub async fn stop(home: PathBuf, args: StopArgs) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout();
    let Some(status) = status_of(&home).await? else {
        if args.json {
            let home = home.display().to_string();
            writeln!(
                out,
                "{}",
                serde_json::json!({"running": false, "home": home})
            )?;
        } else {
            writeln!(out, "no switchboard daemon runs on {}", home.display())?;
        }
        return Ok(ExitCode::SUCCESS);
    };
    let mut client = Client::connect(&home).await?;
    let stopping = client
        .call(Shutdown {})
        .await
        .map_err(|e| anyhow::anyhow!("the daemon refused to stop: {e}"))?;
    let deadline = tokio::time::Instant::now() + STOP_WAIT;
    while alive(status.pid) {
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "the daemon (pid {}) did not stop within {}s; its log: {}",
                status.pid,
                STOP_WAIT.as_secs(),
                status.log.as_deref().unwrap_or("stderr")
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({"stopped": true, "pid": status.pid, "home": status.home,
                "unsaved": stopping.unsaved})
        )?;
    } else {
        writeln!(out, "switchboard daemon stopped (pid {})", status.pid)?;
    }
    if stopping.unsaved > 0 {
        eprintln!(
            "error: {} changes of state were not saved: the actions journal cannot be written \
             ({}); they are lost: work claimed or delivered meanwhile is offered again at the \
             next start, and an expiry is noticed again",
            stopping.unsaved,
            stopping
                .cause
                .as_deref()
                .map(|c| c.strip_prefix("failing: ").unwrap_or(c))
                .unwrap_or("unknown cause")
        );
        return Ok(super::exit::code(super::exit::UNSAVED));
    }
    Ok(ExitCode::SUCCESS)
}

/// Options of `status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print the daemon's status as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `status`: whether the daemon runs, and how it is doing. Exit 3 when none runs.
pub async fn status(home: PathBuf, args: StatusArgs) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout();
    let Some(status) = status_of(&home).await? else {
        if args.json {
            writeln!(
                out,
                "{}",
                serde_json::json!({"running": false, "home": home.display().to_string()})
            )?;
        } else {
            writeln!(out, "switchboard daemon: not running on {}", home.display())?;
        }
        return Ok(ExitCode::from(3));
    };
    if args.json {
        print_status_json(&mut out, &status, None)?;
        return Ok(ExitCode::SUCCESS);
    }
    let s = &status.stats.core;
    writeln!(
        out,
        "switchboard daemon: running (pid {}, version {}) since {}",
        status.pid, status.version, status.started
    )?;
    writeln!(out, "  home: {}", status.home)?;
    if let Some(log) = &status.log {
        writeln!(out, "  log: {log}")?;
    }
    print_listeners(&mut out, &status)?;
    writeln!(
        out,
        "  inbox: last seq {}, {} in the ring; journal {}",
        s.inbox.last_seq, s.inbox.ring_depth, s.inbox.journal_status
    )?;
    let paused = if s.paused { ", evaluation PAUSED" } else { "" };
    match &status.rules {
        Some(rules) if !rules.in_sync => {
            let colour = super::show::colour(std::io::IsTerminal::is_terminal(&out));
            let line = format!("  rules: {}{paused}", rules.line);
            writeln!(out, "{}", super::show::paint(colour, "1;31", &line))?;
        }
        Some(rules) => writeln!(out, "  rules: {}{paused}", rules.line)?,
        None => writeln!(out, "  rules: {} loaded{paused}", s.rules_loaded)?,
    }
    if let Some(failed) = s.last_reload.as_ref().filter(|r| !r.ok) {
        writeln!(
            out,
            "  last rules reload FAILED at {}: {}",
            failed.at.format("%H:%M:%S UTC"),
            failed.message
        )?;
    }
    if let Some(failed) = status
        .stats
        .part::<crate::config::ConfigReload>("config_reload")
        .filter(|r| !r.ok)
    {
        writeln!(
            out,
            "  last switchboard.json change NOT APPLIED ({}): {}",
            failed.at, failed.message
        )?;
    }
    writeln!(
        out,
        "  sessions: {}; pending confirms: {}; queued work: {}; claimed: {}",
        s.delivery.sessions,
        s.delivery.pending_confirms,
        s.delivery.queued_work,
        s.delivery.claimed_work
    )?;
    writeln!(
        out,
        "  stop hooks: {}",
        super::hook::duty_line(&s.hooks.duty)
    )?;
    if let Some(exec) = status.stats.part::<ExecStats>("exec") {
        let failed: u64 = exec.failed.values().sum();
        writeln!(
            out,
            "  exec: {} (preflight {}); {} running, {} queued, {} succeeded, {} not",
            exec.host, exec.preflight, exec.running, exec.queued, exec.succeeded, failed
        )?;
    }
    let upstreams: Vec<UpstreamState> = status.stats.part("upstreams").unwrap_or_default();
    for u in &upstreams {
        writeln!(out, "  upstream {}", super::show::upstream_line(u))?;
    }
    if let Some(js) = status
        .stats
        .part::<crate::sources::jetstream::JetStreamState>("jetstream")
    {
        writeln!(out, "  jetstream: {}", js.line())?;
    }
    if let Some(teams) = status
        .stats
        .part::<crate::sources::teams::TeamsState>("teams")
    {
        println!("  teams: {}", teams.line(chrono::Utc::now()));
    }
    if let Some(slack) = status
        .stats
        .part::<crate::sources::slack::SlackState>("slack")
    {
        println!("  slack: {}", slack.line());
    }
    Ok(ExitCode::SUCCESS)
}

fn print_listeners(out: &mut impl Write, status: &Status) -> std::io::Result<()> {
    let listeners: Vec<ListenerState> = status.stats.part("listeners").unwrap_or_default();
    for l in &listeners {
        match (&l.bound, &l.error) {
            (Some(bound), _) => writeln!(out, "  {}: listening on {bound}", l.what)?,
            (None, Some(error)) => writeln!(out, "  {}: WARNING not listening: {error}", l.what)?,
            (None, None) => writeln!(out, "  {}: not listening", l.what)?,
        }
    }
    if status.asked.ingest.is_none() {
        writeln!(out, "  ingest: off")?;
    }
    Ok(())
}

/// The running daemon's status; `None` when none answers.
async fn status_of(home: &Path) -> anyhow::Result<Option<Status>> {
    let Ok(Some(stream)) = connect_or_start(home, None).await else {
        return Ok(None);
    };
    let mut client = Client::on(stream, false).await?;
    let status = client
        .call(GetStatus {})
        .await
        .map_err(|e| anyhow::anyhow!("status: {e}"))?;
    Ok(Some(status))
}
