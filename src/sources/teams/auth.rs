//! Signing in to Microsoft Graph through the Microsoft identity platform, with the `oauth2` crate
//! over our own HTTP client.
//!
//! - **Delegated** (the default): `switchboard login teams` runs the device authorization grant
//!   (RFC 8628, as `az login --use-device-code` does): it prints the verification URL and the
//!   code, polls the token endpoint at the `interval` the platform gave, slower after each
//!   `slow_down`, through `authorization_pending`, and says so when the code expired or the
//!   sign-in was declined. The tokens go to the home's `teams-token.json` (0600). The daemon
//!   refreshes the access token before it expires (and once on a `401`), keeping the refresh
//!   token the platform rotates on every refresh. A refresh token that no longer works (expired,
//!   revoked, consent withdrawn) stops the source until someone signs in again; the daemon
//!   notices the new file by itself.
//! - **App-only** (`teams.user` set): the client credentials grant with the app's secret from
//!   `SWITCHBOARD_TEAMS_CLIENT_SECRET`; the token lives in memory only.
//!
//! Tokens never reach a log, a journal, a message or an error: [`Tokens`] prints redacted, and
//! errors carry the platform's error code and description, never a request.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use oauth2::basic::{BasicClient, BasicErrorResponseType, BasicTokenResponse};
use oauth2::{
    AuthType, ClientId, ClientSecret, DeviceAuthorizationUrl, DeviceCodeErrorResponseType,
    EndpointNotSet, EndpointSet, RefreshToken, RequestTokenError, Scope,
    StandardDeviceAuthorizationResponse, TokenResponse, TokenUrl,
};
use serde::{Deserialize, Serialize};

use super::settings::TeamsSettings;
use crate::home::write_atomic;

/// The file in the home that keeps a delegated sign-in's tokens.
pub const TOKEN_FILE: &str = "teams-token.json";

/// The delegated permissions asked for: read chats, send chat messages, read who signed in.
/// `offline_access` brings the refresh token.
pub const SCOPES: &[&str] = &["Chat.Read", "ChatMessage.Send", "User.Read"];

/// An access token this close to its expiry is refreshed before use.
const EXPIRY_MARGIN: chrono::TimeDelta = chrono::TimeDelta::seconds(120);

/// The longest a request to the identity platform may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A signed-in session: what `teams-token.json` holds.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tokens {
    /// The bearer token for Graph.
    pub access_token: String,
    /// The token that gets the next access token; rotated on every refresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// When the access token expires.
    pub expires_at: DateTime<Utc>,
    /// The tenant signed in to, as `teams.tenant` named it.
    pub tenant: String,
    /// The app that signed in.
    pub client_id: String,
    /// The scopes granted.
    #[serde(default)]
    pub scope: String,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("access_token", &"<redacted>")
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "<redacted>"),
            )
            .field("expires_at", &self.expires_at)
            .field("tenant", &self.tenant)
            .field("client_id", &self.client_id)
            .field("scope", &self.scope)
            .finish()
    }
}

/// Why there is no token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// Occurs when nobody is signed in, or the refresh token no longer works: a person must run
    /// `switchboard login teams`.
    #[error("sign-in needed: switchboard login teams ({0})")]
    SignInNeeded(String),
    /// Occurs when the identity platform refused the request for good (an unknown client id, a
    /// wrong secret, a declined or expired sign-in).
    #[error("{0}")]
    Refused(String),
    /// Occurs when the identity platform cannot be reached or failed for now; tried again later.
    #[error("the identity platform is not reachable: {0}")]
    Unavailable(String),
}

/// The token endpoint's client: device authorization and token endpoints set.
type Client = BasicClient<EndpointNotSet, EndpointSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

/// One app registration at the identity platform: the requests of each grant.
pub struct Identity {
    http: Http,
    device_url: String,
    token_url: String,
    tenant: String,
    client_id: String,
    /// The delegated scopes, qualified with Graph's URL outside the global cloud.
    scopes: Vec<String>,
    /// The app-only scope: `{graph}/.default`.
    app_scope: String,
}

impl Identity {
    /// The identity platform of `settings`.
    pub fn new(settings: &TeamsSettings) -> Identity {
        let base = format!(
            "{}/{}/oauth2/v2.0",
            settings.authority_url(),
            settings.tenant
        );
        let graph = settings.graph_url();
        let qualify = graph != super::settings::GRAPH_URL;
        let mut scopes: Vec<String> = SCOPES
            .iter()
            .map(|s| {
                if qualify {
                    format!("{graph}/{s}")
                } else {
                    s.to_string()
                }
            })
            .collect();
        scopes.push("offline_access".into());
        Identity {
            http: Http(crate::sources::api_client(REQUEST_TIMEOUT)),
            device_url: format!("{base}/devicecode"),
            token_url: format!("{base}/token"),
            tenant: settings.tenant.clone(),
            client_id: settings.client_id.clone(),
            scopes,
            app_scope: format!("{graph}/.default"),
        }
    }

    fn client(&self) -> Result<Client, AuthError> {
        let bad =
            |what: &str, e: oauth2::url::ParseError| AuthError::Refused(format!("{what}: {e}"));
        Ok(BasicClient::new(ClientId::new(self.client_id.clone()))
            .set_auth_type(AuthType::RequestBody)
            .set_device_authorization_url(
                DeviceAuthorizationUrl::new(self.device_url.clone())
                    .map_err(|e| bad("the device code endpoint", e))?,
            )
            .set_token_uri(
                TokenUrl::new(self.token_url.clone()).map_err(|e| bad("the token endpoint", e))?,
            ))
    }

    fn scopes(&self) -> impl Iterator<Item = Scope> + '_ {
        self.scopes.iter().cloned().map(Scope::new)
    }

    /// Starts a device sign-in: the code to show and where.
    pub async fn device_code(&self) -> Result<StandardDeviceAuthorizationResponse, AuthError> {
        let http = &self.http;
        self.client()?
            .exchange_device_code()
            .add_scopes(self.scopes())
            .request_async(http)
            .await
            .map_err(|e| token_error("the sign-in request", e, false))
    }

    /// Polls the token endpoint until the person signed in, declined, or the code expired;
    /// `slowed` hears each longer interval the platform asked for.
    pub async fn device_token(
        &self,
        details: &StandardDeviceAuthorizationResponse,
        slowed: impl Fn(Duration),
    ) -> Result<Tokens, AuthError> {
        let http = &self.http;
        let last = std::sync::Mutex::new(details.interval());
        let sleep = |interval: Duration| {
            let mut was = last.lock().unwrap();
            if interval > *was {
                slowed(interval);
            }
            *was = interval;
            tokio::time::sleep(interval)
        };
        let client = self.client()?;
        let token = client
            .exchange_device_access_token(details)
            .request_async(http, sleep, None)
            .await
            .map_err(|e| match e {
                RequestTokenError::ServerResponse(r) => {
                    AuthError::Refused(match r.error() {
                        DeviceCodeErrorResponseType::ExpiredToken => {
                            "the code expired before the sign-in was finished; run `switchboard \
                         login teams` again"
                                .to_string()
                        }
                        DeviceCodeErrorResponseType::AccessDenied => declined(),
                        DeviceCodeErrorResponseType::Basic(BasicErrorResponseType::Extension(
                            x,
                        )) if x == "authorization_declined" => declined(),
                        other => platform_said(other.as_ref(), r.error_description()),
                    })
                }
                RequestTokenError::Request(e) => {
                    AuthError::Unavailable(format!("the sign-in: {e}"))
                }
                RequestTokenError::Parse(e, _) => AuthError::Unavailable(format!(
                    "the sign-in: the identity platform's answer does not read as OAuth: {e}"
                )),
                RequestTokenError::Other(e) => AuthError::Unavailable(format!("the sign-in: {e}")),
            })?;
        Ok(self.tokens(&token, None))
    }

    /// A new access token (and refresh token) for `refresh_token`.
    pub async fn refresh(&self, refresh_token: &str) -> Result<Tokens, AuthError> {
        let http = &self.http;
        let rt = RefreshToken::new(refresh_token.to_string());
        let token = self
            .client()?
            .exchange_refresh_token(&rt)
            .add_scopes(self.scopes())
            .request_async(http)
            .await
            .map_err(|e| token_error("the token refresh", e, true))?;
        Ok(self.tokens(&token, Some(refresh_token)))
    }

    /// An app-only access token, with the app's `secret`.
    pub async fn app_token(&self, secret: &str) -> Result<Tokens, AuthError> {
        let http = &self.http;
        let token = self
            .client()?
            .set_client_secret(ClientSecret::new(secret.to_string()))
            .exchange_client_credentials()
            .add_scope(Scope::new(self.app_scope.clone()))
            .request_async(http)
            .await
            .map_err(|e| match token_error("the app-only sign-in", e, false) {
                AuthError::Refused(why) => AuthError::Refused(format!(
                    "{why}; check `teams.clientId`, `teams.tenant` and \
                     SWITCHBOARD_TEAMS_CLIENT_SECRET"
                )),
                other => other,
            })?;
        Ok(self.tokens(&token, None))
    }

    /// The session a token response opens; a refresh without a new refresh token keeps `old`.
    fn tokens(&self, token: &BasicTokenResponse, old: Option<&str>) -> Tokens {
        let lifetime = token.expires_in().unwrap_or(Duration::from_secs(3600));
        Tokens {
            access_token: token.access_token().secret().clone(),
            refresh_token: token
                .refresh_token()
                .map(|t| t.secret().clone())
                .or_else(|| old.map(String::from)),
            expires_at: Utc::now()
                + chrono::TimeDelta::from_std(lifetime).unwrap_or(chrono::TimeDelta::hours(1)),
            tenant: self.tenant.clone(),
            client_id: self.client_id.clone(),
            scope: token
                .scopes()
                .map(|s| s.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" "))
                .unwrap_or_default(),
        }
    }
}

fn declined() -> String {
    "the sign-in was declined in the browser; nothing was saved".to_string()
}

/// `invalid_grant: AADSTS70000: ...` (the description's first line: the rest is trace ids).
fn platform_said(code: &str, description: Option<&String>) -> String {
    match description.and_then(|d| d.lines().next()) {
        Some(d) => format!("the identity platform said {code}: {d}"),
        None => format!("the identity platform said {code}"),
    }
}

/// What a failed token request means. A refresh refused for good (`invalid_grant`, consent
/// withdrawn) needs a new sign-in.
fn token_error<RE: std::error::Error>(
    what: &str,
    e: RequestTokenError<RE, oauth2::basic::BasicErrorResponse>,
    refreshing: bool,
) -> AuthError {
    match e {
        RequestTokenError::ServerResponse(r) => {
            let said = platform_said(r.error().as_ref(), r.error_description());
            let transient = matches!(r.error(), BasicErrorResponseType::Extension(x)
                if x == "temporarily_unavailable" || x == "server_error");
            if transient {
                AuthError::Unavailable(format!("{what}: {said}"))
            } else if refreshing {
                AuthError::SignInNeeded(format!("{what} was refused: {said}"))
            } else {
                AuthError::Refused(format!("{what} was refused: {said}"))
            }
        }
        RequestTokenError::Request(e) => AuthError::Unavailable(format!("{what}: {e}")),
        RequestTokenError::Parse(e, _) => AuthError::Unavailable(format!(
            "{what}: the identity platform's answer does not read as OAuth: {e}"
        )),
        RequestTokenError::Other(e) => AuthError::Unavailable(format!("{what}: {e}")),
    }
}

/// Why a request to the identity platform did not get an answer.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HttpFailure(String);

/// Our HTTP client as the `oauth2` crate's async client (its future named `Send`, which the
/// compiler cannot prove through a closure).
struct Http(reqwest::Client);

impl<'c> oauth2::AsyncHttpClient<'c> for Http {
    type Error = HttpFailure;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<oauth2::HttpResponse, HttpFailure>> + Send + 'c>,
    >;

    fn call(&'c self, request: oauth2::HttpRequest) -> Self::Future {
        Box::pin(send(&self.0, request))
    }
}

/// One request to the identity platform: the request as `oauth2` built it, the answer as it
/// reads it.
async fn send(
    http: &reqwest::Client,
    request: oauth2::HttpRequest,
) -> Result<oauth2::HttpResponse, HttpFailure> {
    let request = reqwest::Request::try_from(request).map_err(|e| HttpFailure(e.to_string()))?;
    let response = http
        .execute(request)
        .await
        .map_err(|e| HttpFailure(e.without_url().to_string()))?;
    let mut out = http::Response::builder().status(response.status());
    for (name, value) in response.headers() {
        out = out.header(name, value);
    }
    let body = response
        .bytes()
        .await
        .map_err(|e| HttpFailure(e.without_url().to_string()))?;
    out.body(body.to_vec())
        .map_err(|e| HttpFailure(e.to_string()))
}

/// `teams-token.json` in the home `dir`.
pub fn token_path(dir: &Path) -> PathBuf {
    dir.join(TOKEN_FILE)
}

/// Reads the saved sign-in, if any.
pub fn load(path: &Path) -> Result<Option<Tokens>, AuthError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            AuthError::SignInNeeded(format!("{} cannot be read: {e}", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(AuthError::SignInNeeded(format!(
            "{} cannot be read: {e}",
            path.display()
        ))),
    }
}

/// Saves a sign-in (0600, atomically).
pub fn save(path: &Path, tokens: &Tokens) -> std::io::Result<()> {
    let mut text = serde_json::to_vec_pretty(tokens).map_err(std::io::Error::other)?;
    text.push(b'\n');
    write_atomic(path, &text)
}

/// How the daemon signs in.
enum Mode {
    /// As the signed-in user, from `teams-token.json`.
    Delegated(PathBuf),
    /// As the app, with its secret.
    AppOnly(String),
}

/// The daemon's side: a valid access token when Graph needs one.
pub struct Auth {
    identity: Identity,
    mode: Mode,
    held: tokio::sync::Mutex<Held>,
    /// Access tokens obtained by a refresh (or, app-only, a new client credentials grant).
    pub refreshes: AtomicU64,
    /// Refreshes that failed.
    pub refresh_failures: AtomicU64,
}

/// The tokens in use and the file they came from, as last seen.
#[derive(Default)]
struct Held {
    tokens: Option<Tokens>,
    /// The file's modification time and length when read: a change means a new sign-in.
    stamp: Option<(SystemTime, u64)>,
    /// Why the held refresh token no longer works; kept until the file changes.
    dead: Option<String>,
}

impl Auth {
    /// Signing in as `settings` say: app-only when `user` is set (with `secret`), else as the
    /// user signed in with `switchboard login teams` (the file in `home_dir`).
    pub fn new(settings: &TeamsSettings, home_dir: &Path, secret: Option<String>) -> Arc<Auth> {
        let mode = match (settings.is_app_only(), secret) {
            (true, Some(secret)) => Mode::AppOnly(secret),
            (true, None) => Mode::AppOnly(String::new()),
            (false, _) => Mode::Delegated(token_path(home_dir)),
        };
        Arc::new(Auth {
            identity: Identity::new(settings),
            mode,
            held: tokio::sync::Mutex::default(),
            refreshes: AtomicU64::new(0),
            refresh_failures: AtomicU64::new(0),
        })
    }

    /// Whether the app signs in on its own.
    pub fn is_app_only(&self) -> bool {
        matches!(self.mode, Mode::AppOnly(_))
    }

    /// A valid access token: the held one, or a new one when it is about to expire.
    pub async fn token(&self) -> Result<String, AuthError> {
        let mut held = self.held.lock().await;
        self.reload(&mut held)?;
        if let Some(t) = &held.tokens
            && t.expires_at - EXPIRY_MARGIN > Utc::now()
        {
            return Ok(t.access_token.clone());
        }
        self.renew_held(&mut held).await
    }

    /// A new access token after Graph refused `rejected` (a `401`): refreshed once, unless
    /// another request refreshed it meanwhile.
    pub async fn renew(&self, rejected: &str) -> Result<String, AuthError> {
        let mut held = self.held.lock().await;
        self.reload(&mut held)?;
        if let Some(t) = &held.tokens
            && t.access_token != rejected
        {
            return Ok(t.access_token.clone());
        }
        self.renew_held(&mut held).await
    }

    /// Reads `teams-token.json` again when it changed (a new `switchboard login teams`).
    fn reload(&self, held: &mut Held) -> Result<(), AuthError> {
        let Mode::Delegated(path) = &self.mode else {
            return Ok(());
        };
        let stamp = std::fs::metadata(path)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())));
        if stamp.is_none() {
            *held = Held::default();
            return Err(AuthError::SignInNeeded("not signed in".into()));
        }
        if stamp != held.stamp {
            *held = Held {
                stamp,
                ..Held::default()
            };
            let tokens =
                load(path)?.ok_or_else(|| AuthError::SignInNeeded("not signed in".into()))?;
            if tokens.client_id != self.identity.client_id || tokens.tenant != self.identity.tenant
            {
                held.dead = Some(format!(
                    "signed in with app \"{}\" to tenant \"{}\", but `teams` names app \"{}\" \
                     and tenant \"{}\"",
                    tokens.client_id, tokens.tenant, self.identity.client_id, self.identity.tenant
                ));
            }
            held.tokens = Some(tokens);
        }
        match &held.dead {
            Some(why) => Err(AuthError::SignInNeeded(why.clone())),
            None => Ok(()),
        }
    }

    /// Gets a new access token in place of the held one.
    async fn renew_held(&self, held: &mut Held) -> Result<String, AuthError> {
        let result = match &self.mode {
            Mode::AppOnly(secret) if secret.is_empty() => {
                return Err(AuthError::Refused(
                    "app-only sign-in (`teams.user`) needs the app's secret in \
                     SWITCHBOARD_TEAMS_CLIENT_SECRET"
                        .into(),
                ));
            }
            Mode::AppOnly(secret) => self.identity.app_token(secret).await,
            Mode::Delegated(path) => {
                let Some(refresh) = held.tokens.as_ref().and_then(|t| t.refresh_token.clone())
                else {
                    return Err(AuthError::SignInNeeded("no refresh token was kept".into()));
                };
                let result = self.identity.refresh(&refresh).await;
                if let Ok(tokens) = &result {
                    // The refresh token is rotated: the old one may not work again.
                    if let Err(e) = save(path, tokens) {
                        tracing::warn!(path = %path.display(), cause = %e, "teams: cannot save the refreshed sign-in; it lasts until the daemon stops");
                    }
                    held.stamp = std::fs::metadata(path)
                        .ok()
                        .and_then(|m| Some((m.modified().ok()?, m.len())));
                }
                result
            }
        };
        match result {
            Ok(tokens) => {
                self.refreshes.fetch_add(1, Ordering::Relaxed);
                let access = tokens.access_token.clone();
                held.tokens = Some(tokens);
                Ok(access)
            }
            Err(e) => {
                self.refresh_failures.fetch_add(1, Ordering::Relaxed);
                if let AuthError::SignInNeeded(why) = &e {
                    held.dead = Some(why.clone());
                }
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_never_print() {
        let t = Tokens {
            access_token: "eyJ0eXAiOiJKV1Qi.secret".into(),
            refresh_token: Some("AwABAAAAvPM1KaPlrEqd.secret".into()),
            expires_at: Utc::now(),
            tenant: "organizations".into(),
            client_id: "c".into(),
            scope: "Chat.Read".into(),
        };
        let shown = format!("{t:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn the_daemons_futures_can_be_spawned() {
        fn is_send<T: Send>(_: T) {}
        let s = TeamsSettings {
            client_id: "c".into(),
            ..TeamsSettings::default()
        };
        let auth = Auth::new(&s, Path::new("/nonexistent"), None);
        let graph = super::super::client::Graph::new(&s.graph_url(), auth.clone());
        is_send(auth.token());
        is_send(auth.renew("x"));
        is_send(graph.get("/me"));
        is_send(graph.pages("/me/chats", 1, |_| true));
    }

    #[test]
    fn scopes_are_qualified_outside_the_global_cloud() {
        let mut s = TeamsSettings {
            client_id: "c".into(),
            ..TeamsSettings::default()
        };
        let id = Identity::new(&s);
        assert_eq!(
            id.scopes,
            [
                "Chat.Read",
                "ChatMessage.Send",
                "User.Read",
                "offline_access"
            ]
        );
        assert_eq!(
            id.token_url,
            "https://login.microsoftonline.com/organizations/oauth2/v2.0/token"
        );
        s.cloud = Some("usgov".into());
        let id = Identity::new(&s);
        assert_eq!(id.scopes[0], "https://graph.microsoft.us/Chat.Read");
        assert_eq!(id.app_scope, "https://graph.microsoft.us/.default");
        assert_eq!(
            id.device_url,
            "https://login.microsoftonline.us/organizations/oauth2/v2.0/devicecode"
        );
    }
}
