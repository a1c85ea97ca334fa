//! The environment of a headless host: an allow-list, never the daemon's whole environment.
//!
//! The host runs prompts built from messages that come from outside, with whatever tools the
//! rule whitelists, so it must not hold switchboard's own secrets (`SWITCHBOARD_TOKEN`,
//! `SWITCHBOARD_GITHUB_SECRET`) nor anything else the daemon happens to inherit (a cloud key
//! in an operator's shell, a CI token). It gets, from the daemon's environment and only when
//! set there:
//!
//! - what any program needs to run: [`RUN`] (and every `LC_*`);
//! - what it needs to reach its model through a proxy: [`NETWORK`];
//! - its own credentials and settings: [`COPILOT`] (and every `COPILOT_PROVIDER_*`, the
//!   bring-your-own-key provider's settings) for Copilot CLI, [`CLAUDE`] for Claude Code,
//!   with [`CLAUDE_BEDROCK`] (and every `AWS_*`) only when `CLAUDE_CODE_USE_BEDROCK` is set,
//!   and [`CLAUDE_VERTEX`] (and every `VERTEX_REGION_*`) only when `CLAUDE_CODE_USE_VERTEX`
//!   is;
//!
//! then everything in `exec.env`, which the operator wrote for the host and which wins.
//! Switches that would widen what the host may do on its own (`COPILOT_ALLOW_ALL`) are not
//! on the list: the rule's whitelist is the only grant.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use super::ExecKind;

/// To run: the search path, the user's home and identity, locale, time zone, temporary and
/// XDG directories.
pub const RUN: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
];

/// To reach the model: proxies (both spellings) and extra CA certificates.
pub const NETWORK: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
    "ALL_PROXY",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
];

/// Copilot CLI's credentials (`copilot help environment`: `COPILOT_GITHUB_TOKEN`, `GH_TOKEN`,
/// `GITHUB_TOKEN`, in that order), its GitHub host, and where it keeps its state.
pub const COPILOT: &[&str] = &[
    "COPILOT_GITHUB_TOKEN",
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "GH_HOST",
    "COPILOT_GH_HOST",
    "COPILOT_HOME",
    "COPILOT_MODEL",
    "COPILOT_OFFLINE",
    "COPILOT_AUTO_UPDATE",
];

/// Claude Code's credentials and where it sends them.
pub const CLAUDE: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_CUSTOM_HEADERS",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
];

/// Claude Code on Amazon Bedrock (with every `AWS_*`).
pub const CLAUDE_BEDROCK: &[&str] = &["ANTHROPIC_BEDROCK_BASE_URL"];

/// Claude Code on Google Vertex AI (with every `VERTEX_REGION_*`).
pub const CLAUDE_VERTEX: &[&str] = &[
    "CLOUD_ML_REGION",
    "ANTHROPIC_VERTEX_PROJECT_ID",
    "ANTHROPIC_VERTEX_BASE_URL",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// The host's environment: the allowed variables of `parent` (the daemon's environment), then
/// `extra` (what switchboard sets for the host, then `exec.env`), later entries winning.
pub fn for_host(
    kind: ExecKind,
    parent: impl IntoIterator<Item = (OsString, OsString)>,
    extra: &[(String, String)],
) -> Vec<(OsString, OsString)> {
    let parent: BTreeMap<OsString, OsString> = parent.into_iter().collect();
    let set = |name: &str| {
        extra.iter().any(|(k, v)| k == name && !v.is_empty())
            || parent.get(OsStr::new(name)).is_some_and(|v| !v.is_empty())
    };
    let bedrock = kind == ExecKind::ClaudeCode && set("CLAUDE_CODE_USE_BEDROCK");
    let vertex = kind == ExecKind::ClaudeCode && set("CLAUDE_CODE_USE_VERTEX");
    let allowed = |name: &str| {
        let (names, prefixes): (&[&str], &[&str]) = match kind {
            ExecKind::CopilotCli => (COPILOT, &["COPILOT_PROVIDER_"]),
            ExecKind::ClaudeCode => (CLAUDE, &[]),
        };
        RUN.contains(&name)
            || name.starts_with("LC_")
            || NETWORK.contains(&name)
            || names.contains(&name)
            || prefixes.iter().any(|p| name.starts_with(p))
            || (bedrock && (CLAUDE_BEDROCK.contains(&name) || name.starts_with("AWS_")))
            || (vertex && (CLAUDE_VERTEX.contains(&name) || name.starts_with("VERTEX_REGION_")))
    };
    let mut env: Vec<(OsString, OsString)> = parent
        .into_iter()
        .filter(|(k, _)| k.to_str().is_some_and(allowed))
        .collect();
    for (k, v) in extra {
        env.retain(|(name, _)| name != OsStr::new(k));
        env.push((k.into(), v.into()));
    }
    env
}

/// The value of `name` in `env` (the last one), when set and not empty.
pub fn get<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    env.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_os_str())
        .filter(|v| !v.to_string_lossy().trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parent(vars: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        vars.iter().map(|(k, v)| (k.into(), v.into())).collect()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<String> {
        let mut n: Vec<String> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        n.sort();
        n
    }

    const DAEMON: &[(&str, &str)] = &[
        ("PATH", "/usr/bin"),
        ("HOME", "/home/me"),
        ("LANG", "C.UTF-8"),
        ("LC_TIME", "en_GB.UTF-8"),
        ("TMPDIR", "/tmp/me"),
        ("https_proxy", "http://proxy:3128"),
        ("SWITCHBOARD_TOKEN", "ingest-secret"),
        ("SWITCHBOARD_GITHUB_SECRET", "hmac-secret"),
        ("SWITCHBOARD_HOME", "/home/me/.switchboard"),
        ("GITHUB_TOKEN", "gh-token"),
        ("COPILOT_PROVIDER_BASE_URL", "http://127.0.0.1:1/v1"),
        ("COPILOT_ALLOW_ALL", "true"),
        ("ANTHROPIC_API_KEY", "sk-ant"),
        ("AWS_SECRET_ACCESS_KEY", "aws-secret"),
        ("DATABASE_URL", "postgres://u:p@db/x"),
    ];

    #[test]
    fn copilot_gets_what_it_needs_and_none_of_switchboards_secrets() {
        let env = for_host(
            ExecKind::CopilotCli,
            parent(DAEMON),
            &[("EXTRA".into(), "from exec.env".into())],
        );
        assert_eq!(
            names(&env),
            [
                "COPILOT_PROVIDER_BASE_URL",
                "EXTRA",
                "GITHUB_TOKEN",
                "HOME",
                "LANG",
                "LC_TIME",
                "PATH",
                "TMPDIR",
                "https_proxy",
            ]
        );
    }

    #[test]
    fn claude_gets_its_own_keys_and_cloud_ones_only_when_it_uses_that_cloud() {
        let env = for_host(ExecKind::ClaudeCode, parent(DAEMON), &[]);
        assert!(get(&env, "ANTHROPIC_API_KEY").is_some());
        for gone in ["GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "SWITCHBOARD_TOKEN"] {
            assert!(get(&env, gone).is_none(), "{gone}");
        }
        let on_bedrock = for_host(
            ExecKind::ClaudeCode,
            parent(DAEMON),
            &[("CLAUDE_CODE_USE_BEDROCK".into(), "1".into())],
        );
        assert_eq!(
            get(&on_bedrock, "AWS_SECRET_ACCESS_KEY"),
            Some(OsStr::new("aws-secret"))
        );
    }

    #[test]
    fn exec_env_wins_and_may_pass_anything_on_purpose() {
        let env = for_host(
            ExecKind::CopilotCli,
            parent(DAEMON),
            &[
                ("HOME".into(), "/srv/host-home".into()),
                ("DATABASE_URL".into(), "postgres://readonly@db/x".into()),
            ],
        );
        assert_eq!(get(&env, "HOME"), Some(OsStr::new("/srv/host-home")));
        assert_eq!(env.iter().filter(|(k, _)| k == "HOME").count(), 1);
        assert_eq!(
            get(&env, "DATABASE_URL"),
            Some(OsStr::new("postgres://readonly@db/x"))
        );
    }
}
