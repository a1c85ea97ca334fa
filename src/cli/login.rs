//! `switchboard login teams` / `logout teams`: sign in to Microsoft Teams with the device code
//! flow (as `az login --use-device-code` does) and keep the tokens in the home, or forget them.
//! The daemon notices a new sign-in by itself, at its next poll.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};

use crate::sources::teams::auth::{self, Identity};
use crate::sources::teams::{TeamsSettings, client};

/// What `login` and `logout` sign in to.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Service {
    /// Microsoft Teams, through Microsoft Graph (the `teams` section of switchboard.json).
    Teams,
}

/// Options of `login` and `logout`.
#[derive(Debug, Args)]
pub struct LoginArgs {
    /// The service.
    #[arg(value_enum)]
    pub service: Service,
}

/// The `teams` section of the home's switchboard.json, or what to write there.
fn settings(home: &crate::config::Home) -> anyhow::Result<TeamsSettings> {
    home.load_config()?.teams.ok_or_else(|| {
        anyhow::anyhow!(
            "{}: no `teams` section; add one with your Entra app's `clientId` \
             ({{\"teams\": {{\"clientId\": \"...\"}}}}), docs/teams.md says how to register one",
            home.config_file().display()
        )
    })
}

/// `switchboard login teams`: prints where to sign in and the code, waits for the sign-in,
/// saves the tokens (0600) and says who signed in.
pub async fn login(home: PathBuf, args: LoginArgs) -> anyhow::Result<ExitCode> {
    let Service::Teams = args.service;
    let home = crate::config::Home::open(home)?;
    home.check_private()?;
    let settings = settings(&home)?;
    if settings.is_app_only() {
        anyhow::bail!(
            "teams: `teams.user` is set, so the daemon signs in as the app with \
             SWITCHBOARD_TEAMS_CLIENT_SECRET; there is nothing to log in to (remove `user` to \
             sign in as yourself)"
        );
    }
    let identity = Identity::new(&settings);
    let details = identity
        .device_code()
        .await
        .map_err(|e| anyhow::anyhow!("teams: {e}"))?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "To sign in to Microsoft Teams, open {} and enter the code {}",
            details.verification_uri().as_str(),
            details.user_code().secret()
        )?;
        writeln!(
            out,
            "(the code works for {} minutes; waiting for the sign-in...)",
            details.expires_in().as_secs().div_ceil(60)
        )?;
        out.flush()?;
    }
    let tokens = identity
        .device_token(&details, |interval| {
            eprintln!(
                "the identity platform asked to poll more slowly: every {} s now",
                interval.as_secs()
            );
        })
        .await
        .map_err(|e| anyhow::anyhow!("teams: {e}"))?;
    let path = auth::token_path(home.dir());
    auth::save(&path, &tokens)
        .map_err(|e| anyhow::anyhow!("teams: cannot save {}: {e}", path.display()))?;
    let who = match client::whoami(&settings.graph_url(), &tokens.access_token).await {
        Ok(me) => format!("signed in to Microsoft Teams as {}", me.name),
        Err(e) => format!("signed in to Microsoft Teams (who, Graph did not say: {e})"),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{who}; tokens kept in {} (0600)", path.display())?;
    writeln!(
        out,
        "a running daemon picks the sign-in up at its next poll (`switchboard status` shows it)"
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `switchboard logout teams`: removes the saved tokens.
pub async fn logout(home: PathBuf, args: LoginArgs) -> anyhow::Result<ExitCode> {
    let Service::Teams = args.service;
    let path = auth::token_path(&home);
    let mut out = std::io::stdout().lock();
    match std::fs::remove_file(&path) {
        Ok(()) => writeln!(
            out,
            "signed out of Microsoft Teams: removed {}; the daemon stops reading Teams at its \
             next poll",
            path.display()
        )?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            writeln!(out, "not signed in to Microsoft Teams")?
        }
        Err(e) => anyhow::bail!("teams: cannot remove {}: {e}", path.display()),
    }
    Ok(ExitCode::SUCCESS)
}
