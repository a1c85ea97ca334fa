//! `switchboard send`: append a message to the running server's inbox.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::backend::Client;
use crate::control::ops::Append;
use crate::message::NewMessage;

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
    #[arg(long = "meta", value_name = "K=V", value_parser = parse_meta)]
    pub meta: Vec<(String, String)>,
    /// The source's own id (a repeat with the same id is not stored twice).
    #[arg(long)]
    pub id: Option<String>,
    /// Only consumer NAME (a `serve --consumer NAME` window; a glob) gets the nudges, confirm
    /// requests and work this message causes; work waits until such a window is open. Sets
    /// the metadata key `to_consumer`.
    #[arg(long, value_name = "NAME")]
    pub to: Option<String>,
    /// The message text.
    pub text: String,
    /// Print `{"accepted": [{"seq", "duplicate"}]}`, as HTTP ingest answers.
    #[arg(long)]
    pub json: bool,
}

fn parse_meta(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got \"{s}\"")),
    }
}

/// Sends the message; prints the assigned seq once it is durable.
pub async fn execute(home: PathBuf, args: SendArgs) -> anyhow::Result<ExitCode> {
    let mut msg = NewMessage::new(args.server, args.channel, args.text);
    msg.id = args.id;
    msg.metadata.extend(args.meta);
    if let Some(to) = args.to.filter(|t| !t.trim().is_empty()) {
        msg.metadata
            .insert(crate::actions::TO_CONSUMER_KEY, to.trim());
    }
    let appended = Client::connect(&home)
        .await?
        .call(Append {
            messages: vec![msg],
            source: "cli".into(),
        })
        .await?;
    let Some(first) = appended.first() else {
        anyhow::bail!("the daemon stored nothing and said nothing");
    };
    if args.json {
        super::show::print_json(&serde_json::json!({"accepted": appended}))?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    if first.duplicate {
        writeln!(out, "duplicate of seq {}", first.seq)?;
    } else {
        writeln!(out, "seq {}", first.seq)?;
    }
    Ok(ExitCode::SUCCESS)
}
