//! `switchboard rules check | test | reload | list | schema`.
//!
//! STUB: filled in by the rules engine work (check/test/schema) and the control socket (reload/list).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};

/// The rules subcommands.
#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// Validate a rules file (default: the home's triggers.json); exit 1 when invalid.
    Check(CheckArgs),
    /// Replay messages through rules and print the actions they produce.
    Test(TestArgs),
    /// Ask the running server to reload triggers.json.
    Reload,
    /// Show the running server's rules.
    List,
    /// Print the JSON Schema of triggers.json.
    Schema,
}

/// Output format of `rules check`.
#[derive(Clone, Copy, Debug, Default, ValueEnum)]
pub enum Format {
    /// One line per error.
    #[default]
    Text,
    /// A JSON array of `{code, rule_index, rule, key, line, column, message}`.
    Json,
}

/// Options of `rules check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The file (default: triggers.json in the home).
    pub file: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// Options of `rules test`.
#[derive(Debug, Args)]
pub struct TestArgs {
    /// The rules file.
    #[arg(long)]
    pub rules: PathBuf,
    /// Messages, one JSON object a line.
    #[arg(long)]
    pub messages: PathBuf,
    /// Also print why each rule did not fire for each message.
    #[arg(long)]
    pub explain: bool,
}

/// Runs a rules subcommand.
pub async fn execute(home: PathBuf, command: RulesCommand) -> anyhow::Result<ExitCode> {
    match command {
        RulesCommand::Reload => super::control_cmds::reload(home).await,
        RulesCommand::List => super::control_cmds::rules_list(home).await,
        _ => anyhow::bail!("not implemented yet"),
    }
}
