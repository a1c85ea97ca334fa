//! `switchboard ui`: a one-time link to the approval page, opened in a browser.

use std::io::Write;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};

use clap::Args;

use crate::backend::Client;
use crate::control::ops::UiLink;

/// Options of `ui`.
#[derive(Debug, Args)]
pub struct UiArgs {
    /// Print the link only; do not open a browser.
    #[arg(long)]
    pub no_open: bool,
}

/// Prints a fresh one-time link to the page (it works once, for two minutes) and opens it.
pub async fn run(home: PathBuf, args: UiArgs) -> anyhow::Result<ExitCode> {
    let link = Client::connect(&home).await?.call(UiLink {}).await?;
    writeln!(
        std::io::stdout().lock(),
        "{}\nthis link works once, for two minutes; run `switchboard ui` again for another",
        link.url
    )?;
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
