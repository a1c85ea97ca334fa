//! `switchboard reply SEQ TEXT`: answer a stored message in the conversation it came from (a
//! Teams chat), as `channel_reply` does for an agent.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::backend::Client;
use crate::control::ops::Reply;

/// Options of `reply`.
#[derive(Debug, Args)]
pub struct ReplyArgs {
    /// The seq of the message to answer (`switchboard list` shows them).
    pub seq: u64,
    /// The answer, as plain text; line breaks are kept.
    pub text: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Sends the answer; prints where it went and the sent message's id.
pub async fn execute(home: PathBuf, args: ReplyArgs) -> anyhow::Result<ExitCode> {
    let sent = Client::connect(&home)
        .await?
        .call(Reply {
            seq: args.seq,
            text: args.text,
        })
        .await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&sent)?)?;
    } else {
        writeln!(
            out,
            "sent to {} ({}) in answer to seq {}: message id {}",
            sent.server, sent.channel, sent.seq, sent.id
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
