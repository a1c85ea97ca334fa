//! `switchboard send`: post a message to the running server.
//!
//! STUB: filled in by the webhook ingest work.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

/// Options of `send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// Channel, e.g. `alerts/critical`.
    #[arg(long, short)]
    pub channel: String,
    /// Source name.
    #[arg(long, short, default_value = "cli")]
    pub server: String,
    /// Metadata entries, `key=value`, repeatable.
    #[arg(long = "meta", value_name = "K=V")]
    pub meta: Vec<String>,
    /// The message text.
    pub text: String,
}

/// Posts the message; prints the assigned seq.
pub async fn execute(_home: PathBuf, _args: SendArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("send: not implemented yet")
}
