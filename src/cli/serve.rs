//! `switchboard serve`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

/// Options of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Also serve MCP over streamable HTTP at http://ADDR/mcp (e.g. 127.0.0.1:8788).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// HTTP ingest address (default 127.0.0.1:8787, or `http.listen` in switchboard.json).
    #[arg(long, value_name = "ADDR", conflicts_with = "no_listen")]
    pub listen: Option<String>,
    /// Do not start HTTP ingest.
    #[arg(long)]
    pub no_listen: bool,
    /// Do not serve MCP on stdio (run as a daemon for HTTP clients and the CLI).
    #[arg(long)]
    pub no_stdio: bool,
    /// Read as this named consumer, which resumes its cursor across restarts (default: a
    /// consumer of this session's own, `CLIENT#N`).
    #[arg(long, value_name = "NAME")]
    pub consumer: Option<String>,
}

/// Runs the server until stdin closes (stdio mode), SIGINT or SIGTERM.
pub async fn execute(home: PathBuf, args: ServeArgs) -> anyhow::Result<ExitCode> {
    if !args.no_stdio && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        eprintln!(
            "switchboard serve speaks MCP (JSON-RPC) on stdin and stdout: an MCP host starts it \
             (`switchboard install copilot` or `switchboard install claude`)"
        );
        eprintln!(
            "to run it from a terminal, use `switchboard serve --no-stdio` (webhooks, /mcp with \
             --http, the CLI), and `switchboard watch` in another terminal to see what arrives"
        );
    }
    crate::server::run(home, args.into(), crate::server::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

impl From<ServeArgs> for crate::server::ServeOptions {
    fn from(a: ServeArgs) -> Self {
        crate::server::ServeOptions {
            mcp_http: a.http,
            listen: a.listen,
            no_listen: a.no_listen,
            stdio: !a.no_stdio,
            token: std::env::var(crate::config::TOKEN_ENV).ok(),
            consumer: a.consumer,
            github_secret: std::env::var(crate::config::GITHUB_SECRET_ENV).ok(),
        }
    }
}
