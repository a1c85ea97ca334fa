//! `switchboard config check [FILE]`: validates `switchboard.json` (every section, and each
//! upstream) without a running server, as `rules check` does for `triggers.json`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::rules::Format;

/// The config subcommands.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate switchboard.json (default: the home's); exit 1 when invalid.
    Check(CheckArgs),
}

/// Options of `config check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The file (default: switchboard.json in the home).
    pub file: Option<PathBuf>,
    /// Print the errors as a JSON array of `{code, upstream, key, line, column, message}`
    /// (`[]` when valid).
    #[arg(long)]
    pub json: bool,
    /// `--format json` is `--json` (kept for the scripts that use it).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// Runs a config subcommand.
pub fn execute(home: PathBuf, command: ConfigCommand) -> anyhow::Result<ExitCode> {
    let ConfigCommand::Check(mut args) = command;
    if args.json {
        args.format = Format::Json;
    }
    let explicit = args.file.is_some();
    let path = args.file.unwrap_or_else(|| home.join("switchboard.json"));
    let shown = path.display().to_string();
    let mut out = std::io::stdout().lock();
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
            match args.format {
                Format::Json => writeln!(out, "[]")?,
                Format::Text => {
                    writeln!(out, "{shown}: no such file; every setting has its default")?
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => anyhow::bail!("cannot read {shown}: {e}"),
    };
    match (crate::config::check(&text), args.format) {
        (Ok(_), Format::Json) => writeln!(out, "[]")?,
        (Ok(config), Format::Text) => {
            let names: Vec<_> = config.upstreams.keys().map(String::as_str).collect();
            let schedules: Vec<_> = config.schedules.iter().map(|s| s.name.as_str()).collect();
            let schedules = match schedules.len() {
                0 => String::new(),
                n => format!(
                    "; {n} schedule{}: {}",
                    if n == 1 { "" } else { "s" },
                    schedules.join(", ")
                ),
            };
            writeln!(
                out,
                "{shown}: ok, {} upstream{}{}{}{schedules}",
                names.len(),
                if names.len() == 1 { "" } else { "s" },
                if names.is_empty() { "" } else { ": " },
                names.join(", ")
            )?;
        }
        (Err(errors), Format::Json) => {
            writeln!(out, "{}", serde_json::to_string_pretty(&errors)?)?;
            return Ok(ExitCode::FAILURE);
        }
        (Err(errors), Format::Text) => {
            for e in &errors {
                writeln!(out, "{}", e.render(&shown))?;
            }
            writeln!(
                out,
                "{shown}: {} error{}",
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            )?;
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}
