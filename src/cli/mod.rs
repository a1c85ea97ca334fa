//! The command line: one [`Command`] per subcommand, each executed by its own module.

mod config;
mod control_cmds;
pub mod exit;
mod hook;
mod hooks;
mod login;
mod man;
mod reply;
mod rules;
mod rules_lint;
mod rules_running;
mod send;
mod serve;
mod show;
mod ui;
mod watch;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// switchboard: a rules-driven trigger engine around channel messages, and an MCP server.
#[derive(Debug, Parser)]
#[command(name = "switchboard", version, about, propagate_version = true)]
pub struct Cli {
    /// Home directory (default: $SWITCHBOARD_HOME, else ~/.switchboard).
    #[arg(long, global = true, value_name = "DIR")]
    pub home: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `--json` alone, for the commands that take nothing else.
#[derive(Debug, clap::Args)]
pub struct JsonArgs {
    /// Print JSON instead of a line.
    #[arg(long)]
    pub json: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// An MCP server on stdio (what hosts launch), attached to the home's daemon, which it
    /// starts when none runs.
    Serve(serve::ServeArgs),
    /// Run the daemon in the foreground: ingest, journals, rules, upstreams (systemd, tests).
    Daemon(serve::DaemonArgs),
    /// Start the daemon in the background, unless one runs; warns when the rules on disk
    /// are not the rules it runs.
    Start(serve::StartArgs),
    /// Stop the daemon.
    Stop(serve::StopArgs),
    /// Whether the daemon runs, where it listens, how it is doing (exit 3: not running).
    Status(serve::StatusArgs),
    /// Post a message to the running server.
    Send(send::SendArgs),
    /// Answer a stored message in the conversation it came from (a Teams chat): `reply SEQ TEXT`.
    Reply(reply::ReplyArgs),
    /// Show recent messages of the running server.
    List(control_cmds::ListArgs),
    /// Answer a pending confirm: `confirm ID yes|no` (exit 4: no such confirm; 5: expired or
    /// already answered; 6: not allowed; 7: not recorded, try again).
    Confirm(control_cmds::ConfirmArgs),
    /// List the open confirm requests, with rule, channel, excerpt and time left.
    Pending(control_cmds::PendingArgs),
    /// Pause rule evaluation (messages keep landing in the inbox).
    Pause(JsonArgs),
    /// Resume rule evaluation.
    Resume(JsonArgs),
    /// Inbox, rules and delivery counters of the running server.
    Stats(control_cmds::StatsArgs),
    /// Tail the inbox and actions, one line each.
    Watch(watch::WatchArgs),
    /// Print a one-time link to the approval page and open it in a browser.
    Ui(ui::UiArgs),
    /// Check, test, reload, list rules or print their schema.
    Rules {
        /// The rules subcommand.
        #[command(subcommand)]
        command: rules::RulesCommand,
    },
    /// Check switchboard.json.
    Config {
        /// The config subcommand.
        #[command(subcommand)]
        command: config::ConfigCommand,
    },
    /// Add switchboard to an MCP host's configuration.
    Install(control_cmds::InstallArgs),
    /// Print shell completions: `switchboard completions bash > /etc/bash_completion.d/switchboard`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `switchboard man | man -l -`; `--dir DIR` writes one page
    /// per command.
    Man(man::ManArgs),
    /// What a host's hooks run: `hook stop` hands queued work to an agent about to stop.
    Hook {
        /// The hook.
        #[command(subcommand)]
        command: hook::HookCommand,
    },
    /// Sign in to a chat service: `login teams` (the device code flow; tokens kept in the home).
    Login(login::LoginArgs),
    /// Sign out of a chat service: `logout teams` (the saved tokens are removed).
    Logout(login::LoginArgs),
    /// On-duty mode: `duty on [--for 8h]` keeps agents listening instead of stopping; `duty off`.
    Duty(hook::DutyArgs),
}

impl Cli {
    /// Parses the process's arguments with the examples and exit statuses in `--help`; a
    /// wrong command line exits 2 with clap's message.
    pub fn parse_args() -> Cli {
        let matches = man::command().get_matches();
        <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }

    /// The log file this command line's daemon writes (set when it was started in the
    /// background), for `main` to point tracing at.
    pub fn log_file(&self) -> Option<&std::path::Path> {
        match &self.command {
            Command::Serve(args) if args.no_stdio => args.log_file(),
            Command::Daemon(args) => args.log_file.as_deref(),
            _ => None,
        }
    }

    /// Whether this command speaks for itself on stdout, so that its log says only what went
    /// wrong (warnings and errors) unless `RUST_LOG` asks for more: `start` prints that it
    /// started the daemon, an INFO line saying it again is noise. The daemon and a front
    /// end (whose stderr is the host's MCP log) log at INFO.
    pub fn quiet_log(&self) -> bool {
        !matches!(&self.command, Command::Serve(_) | Command::Daemon(_))
    }

    /// Whether this command line is a front end (`serve` on stdio): it relays one session
    /// between its host and the daemon, which one thread does with fewer wake-ups and
    /// hand-offs than a pool of workers, and a host may run many of them on one machine.
    pub fn is_front_end(&self) -> bool {
        matches!(&self.command, Command::Serve(args) if !args.no_stdio)
    }
}

/// How the home was named on this command line, for hints: not at all when it is the default
/// home however it was given (`switchboard start` reaches it).
fn named_home(home: &std::path::Path, flag: bool) -> crate::home::HomeNamed {
    use crate::home::HomeNamed;
    let default = crate::config::Home::resolve_default();
    let same = |a: &std::path::Path, b: &std::path::Path| {
        std::path::absolute(a).ok() == std::path::absolute(b).ok()
    };
    if same(home, &default) {
        return HomeNamed::Default;
    }
    let shown = std::path::absolute(home).unwrap_or_else(|_| home.to_path_buf());
    if flag {
        HomeNamed::Flag(shown)
    } else {
        HomeNamed::Env(shown)
    }
}

/// Runs a parsed command line; the error, if any, is printed by `main`.
pub async fn run(cli: Cli) -> anyhow::Result<std::process::ExitCode> {
    let from_env = std::env::var_os(crate::config::HOME_ENV).filter(|v| !v.is_empty());
    let explicit_home = cli.home.is_some() || from_env.is_some();
    let flag = cli.home.is_some();
    let home = crate::config::Home::resolve(cli.home);
    crate::home::set_home_named(named_home(&home, flag));
    match cli.command {
        Command::Serve(args) => serve::execute(home, args).await,
        Command::Daemon(args) => serve::daemon(home, args).await,
        Command::Start(args) => serve::start(home, args).await,
        Command::Stop(args) => serve::stop(home, args).await,
        Command::Status(args) => serve::status(home, args).await,
        Command::Send(args) => send::execute(home, args).await,
        Command::Reply(args) => reply::execute(home, args).await,
        Command::List(args) => control_cmds::list(home, args).await,
        Command::Confirm(args) => control_cmds::confirm(home, args).await,
        Command::Pending(args) => control_cmds::pending(home, args).await,
        Command::Ui(args) => ui::run(home, args).await,
        Command::Pause(args) => control_cmds::pause(home, true, args.json).await,
        Command::Resume(args) => control_cmds::pause(home, false, args.json).await,
        Command::Stats(args) => control_cmds::stats(home, args).await,
        Command::Watch(args) => watch::execute(home, args).await,
        Command::Rules { command } => rules::execute(home, command).await,
        Command::Config { command } => config::execute(home, command),
        Command::Install(args) => control_cmds::install(home, explicit_home, args).await,
        Command::Hook {
            command: hook::HookCommand::Stop(args),
        } => hook::stop(home, args).await,
        Command::Hook {
            command: hook::HookCommand::PostToolUse,
        } => hook::post_tool_use(home).await,
        Command::Duty(args) => hook::duty(home, args).await,
        Command::Login(args) => login::login(home, args).await,
        Command::Logout(args) => login::logout(home, args).await,
        Command::Completions { shell } => {
            // Into a buffer first: the generator panics on a closed pipe, a write returns it.
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut cmd, "switchboard", &mut text);
            std::io::Write::write_all(&mut std::io::stdout().lock(), &text)?;
            Ok(std::process::ExitCode::SUCCESS)
        }
        Command::Man(args) => man::execute(args),
    }
}
