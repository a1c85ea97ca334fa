//! `switchboard ui`: a one-time link to the approval page, opened in a browser.

use std::io::Write;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};

use clap::Args;

use crate::backend::Client;
use crate::control::ops::{UiLink, UiRevoke};

/// Options of `ui`.
#[derive(Debug, Args)]
pub struct UiArgs {
    /// Print the link only; do not open a browser.
    #[arg(long)]
    pub no_open: bool,
    /// Give a link even when the page is served beyond this machine over plain HTTP (anyone
    /// on the network path can read the link and the session cookie).
    #[arg(long)]
    pub public: bool,
    /// What the browser that opens the link answers as: confirms answered there are recorded
    /// `by` this label (`phone`, `ada-laptop`), in `pending --closed`, `watch` and
    /// `actions.jsonl`.
    #[arg(long, value_name = "NAME")]
    pub label: Option<String>,
    /// Sign every browser out of the page and forget every link not opened yet.
    #[arg(long, conflicts_with_all = ["no_open", "public", "label"])]
    pub revoke: bool,
    /// Print `{"url": ...}` (and open nothing); with `--revoke`, `{"sessions", "links"}`.
    #[arg(long)]
    pub json: bool,
}

/// Prints a fresh one-time link to the page (it works once, for two minutes) and opens it; or,
/// with `--revoke`, ends every session and unused link.
pub async fn run(home: PathBuf, args: UiArgs) -> anyhow::Result<ExitCode> {
    let mut client = Client::connect(&home).await?;
    let mut out = std::io::stdout();
    if args.revoke {
        let revoked = client.call(UiRevoke {}).await?;
        if args.json {
            super::show::print_json(
                &serde_json::json!({"sessions": revoked.sessions, "links": revoked.links}),
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        writeln!(
            out,
            "revoked {} page session{} and {} unused link{}; run `{}` for a new link",
            revoked.sessions,
            if revoked.sessions == 1 { "" } else { "s" },
            revoked.links,
            if revoked.links == 1 { "" } else { "s" },
            crate::home::command("ui")
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let link = client
        .call(UiLink {
            public: args.public,
            label: args.label,
        })
        .await?;
    if args.json {
        let mut v = serde_json::json!({"url": link.url});
        if let Some(note) = &link.note {
            v["note"] = note.clone().into();
        }
        super::show::print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        out,
        "{}\nthis link works once, for two minutes; run `{}` again for another",
        link.url,
        crate::home::command("ui")
    )?;
    if let Some(note) = &link.note {
        writeln!(out, "{note}")?;
    }
    if !args.no_open {
        let opener = if cfg!(target_os = "macos") {
            "open"
        } else {
            "xdg-open"
        };
        let opened = std::process::Command::new(opener)
            .arg(&link.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Err(e) = opened {
            eprintln!("cannot start `{opener}`: {e}; open the link above yourself");
        }
    }
    Ok(ExitCode::SUCCESS)
}
