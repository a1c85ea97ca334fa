//! The exit status of every command, in one place: the codes, what each means (for `--help`
//! and the man pages), and [`status_of`], the CLI's one mapping of an error to its code.
//!
//! | code | when |
//! | --- | --- |
//! | 0 | done |
//! | 1 | it failed: an invalid file (`config check`, `rules check`, `rules test`), a rejected reload, an I/O error, a call refused as `invalid` or `failed`, a daemon that does not answer |
//! | 2 | the command line is wrong (clap's own usage errors exit 2 as well) |
//! | 3 | no daemon runs on the home (`status`, and every command that needs one) |
//! | 4 | the daemon refused: what the command names does not exist (`unknown`, `not_found`) |
//! | 5 | the daemon refused: too late, it is closed (`expired`, `already_answered`) |
//! | 6 | the daemon refused: not allowed (`not_allowed`) |
//! | 7 | the daemon refused: not now (`full`, `unavailable`, `not_recorded`); retry later |
//! | 8 | `stop`: the daemon stopped with changes of state it could not save (the count on stderr) |
//!
//! So a script tells the cases apart without reading the sentence on stderr: a usage error
//! from a runtime one, `switchboard confirm 7 yes` that came too late (5) from one with a
//! wrong id (4).

use std::process::ExitCode;

use crate::control::{ApiError, RefusalCode};

/// Done.
pub const OK: u8 = 0;
/// It failed: an invalid file, a failed reload, an I/O error, a daemon that does not answer.
pub const FAILURE: u8 = 1;
/// The command line is wrong (an unknown flag, a missing argument).
pub const USAGE: u8 = 2;
/// No daemon runs on the home (`status` says so with this code too).
pub const NOT_RUNNING: u8 = 3;
/// The daemon refused: what the command names does not exist.
pub const UNKNOWN: u8 = 4;
/// The daemon refused: too late, it is closed.
pub const CLOSED: u8 = 5;
/// The daemon refused: not allowed.
pub const NOT_ALLOWED: u8 = 6;
/// The daemon refused: not now; retry later.
pub const NOT_NOW: u8 = 7;
/// `stop`: the daemon stopped with changes of state the actions journal could not take.
pub const UNSAVED: u8 = 8;

/// Every code with what it means, in order.
pub const CODES: &[(u8, &str)] = &[
    (OK, "done"),
    (
        FAILURE,
        "failed: an invalid file, a rejected reload, an I/O error, a daemon that does not answer",
    ),
    (
        USAGE,
        "the command line is wrong: an unknown flag, a missing or invalid argument",
    ),
    (NOT_RUNNING, "no switchboard daemon runs on the home"),
    (
        UNKNOWN,
        "the daemon refused: what the command names does not exist (an unknown confirm)",
    ),
    (
        CLOSED,
        "the daemon refused: too late, it is closed (an expired or already answered confirm)",
    ),
    (
        NOT_ALLOWED,
        "the daemon refused: not allowed (an answer the rule's `approveVia` does not allow)",
    ),
    (
        NOT_NOW,
        "the daemon refused: not now (a full queue, an answer it could not record); retry later",
    ),
    (
        UNSAVED,
        "`stop`: the daemon stopped with changes of state it could not save",
    ),
];

/// The exit statuses as `--help` shows them.
pub fn help() -> String {
    let mut text = String::from("Exit status:\n");
    for (code, meaning) in CODES {
        text.push_str(&format!("  {code}  {meaning}\n"));
    }
    text
}

/// A command line that is wrong in a way clap cannot see (`confirm 7` without `yes` or `no`):
/// exit [`USAGE`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// No daemon answers on the home: exit [`NOT_RUNNING`].
pub use crate::backend::NotRunning;

/// The exit status for `err`: the first cause in its chain that has a code of its own, else
/// [`FAILURE`].
pub fn status_of(err: &anyhow::Error) -> u8 {
    for cause in err.chain() {
        if cause.is::<UsageError>() || cause.is::<clap::Error>() {
            return USAGE;
        }
        if cause.is::<NotRunning>() {
            return NOT_RUNNING;
        }
        match cause.downcast_ref::<ApiError>() {
            Some(ApiError::Refused(refused)) => return code_of_refusal(refused.code),
            Some(ApiError::Unavailable { .. }) => return NOT_RUNNING,
            _ => {}
        }
    }
    FAILURE
}

/// The exit code for `err`, as the process's exit status.
pub fn code_of(err: &anyhow::Error) -> ExitCode {
    code(status_of(err))
}

/// The exit code of a refusal of kind `code`.
pub fn code_of_refusal(code: RefusalCode) -> u8 {
    match code {
        RefusalCode::Unknown | RefusalCode::NotFound => UNKNOWN,
        RefusalCode::Expired | RefusalCode::AlreadyAnswered => CLOSED,
        RefusalCode::NotAllowed => NOT_ALLOWED,
        RefusalCode::Full | RefusalCode::Unavailable | RefusalCode::NotRecorded => NOT_NOW,
        RefusalCode::Invalid | RefusalCode::Failed => FAILURE,
    }
}

/// `code` as the process's exit status.
pub fn code(code: u8) -> ExitCode {
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_has_its_code_and_the_rest_fail_with_one() {
        let usage = anyhow::Error::new(UsageError("confirm 7 needs an answer".into()));
        assert_eq!(status_of(&usage), USAGE);
        let absent = anyhow::Error::new(NotRunning {
            home: "/h".into(),
            cause: "no such file".into(),
        });
        assert_eq!(status_of(&absent), NOT_RUNNING);
        assert_eq!(
            status_of(&absent.context("pending")),
            NOT_RUNNING,
            "found under context"
        );
        assert_eq!(status_of(&anyhow::anyhow!("disk full")), FAILURE);
        let help = help();
        for (code, _) in CODES {
            assert!(help.contains(&format!("  {code}  ")), "{help}");
        }
    }

    #[test]
    fn a_refusal_keeps_its_code_through_the_error_chain() {
        let refused = ApiError::refused(RefusalCode::Expired, "confirm 3 expired");
        let err = anyhow::Error::new(refused).context("switchboard confirm 3 yes");
        assert_eq!(status_of(&err), CLOSED);
        assert_eq!(code_of(&err), ExitCode::from(CLOSED));
        let invalid = anyhow::Error::new(ApiError::refused(RefusalCode::Invalid, "bad"));
        assert_eq!(status_of(&invalid), FAILURE);
        assert_eq!(code_of_refusal(RefusalCode::Unknown), UNKNOWN);
        assert_eq!(code_of_refusal(RefusalCode::NotAllowed), NOT_ALLOWED);
        assert_eq!(code_of_refusal(RefusalCode::Full), NOT_NOW);
    }
}
