//! What `switchboard` exits with when a command fails: the CLI's one mapping of an error to an
//! exit code.
//!
//! | code | when |
//! | --- | --- |
//! | 0 | done |
//! | 1 | a file it checked is invalid (`config check`, `rules check`, `rules test`) |
//! | 2 | anything else failed: usage, I/O, the daemon not reachable, a call refused as `invalid` or `failed` |
//! | 3 | `status`: no daemon runs |
//! | 4 | the daemon refused: what the command names does not exist (`unknown`, `not_found`) |
//! | 5 | the daemon refused: too late, it is closed (`expired`, `already_answered`) |
//! | 6 | the daemon refused: not allowed (`not_allowed`) |
//! | 7 | the daemon refused: not now (`full`, `unavailable`, `not_recorded`); retry later |
//! | 8 | `stop`: the daemon stopped with changes of state it could not save (the count on stderr) |
//!
//! So a script can tell `switchboard confirm 7 yes` that came too late (5) from one with a
//! wrong id (4), without reading the sentence on stderr.

use std::process::ExitCode;

use crate::control::{ApiError, RefusalCode};

/// Anything else failed.
pub const ERROR: u8 = 2;
/// What the command names does not exist.
pub const UNKNOWN: u8 = 4;
/// Too late: it is closed.
pub const CLOSED: u8 = 5;
/// Not allowed.
pub const NOT_ALLOWED: u8 = 6;
/// Not now; retry later.
pub const NOT_NOW: u8 = 7;

/// `stop`: the daemon stopped with changes of state the actions journal could not take.
pub const UNSAVED: u8 = 8;

/// The exit code for `err`: the refusal's, when the daemon refused, else [`ERROR`].
pub fn code_of(err: &anyhow::Error) -> ExitCode {
    let refusal = err
        .chain()
        .find_map(|cause| cause.downcast_ref::<ApiError>())
        .and_then(ApiError::refusal);
    ExitCode::from(refusal.map_or(ERROR, code_of_refusal))
}

/// The exit code of a refusal of kind `code`.
pub fn code_of_refusal(code: RefusalCode) -> u8 {
    match code {
        RefusalCode::Unknown | RefusalCode::NotFound => UNKNOWN,
        RefusalCode::Expired | RefusalCode::AlreadyAnswered => CLOSED,
        RefusalCode::NotAllowed => NOT_ALLOWED,
        RefusalCode::Full | RefusalCode::Unavailable | RefusalCode::NotRecorded => NOT_NOW,
        RefusalCode::Invalid | RefusalCode::Failed => ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_keeps_its_code_through_the_error_chain() {
        let refused = ApiError::refused(RefusalCode::Expired, "confirm 3 expired");
        let err = anyhow::Error::new(refused).context("switchboard confirm 3 yes");
        assert_eq!(code_of(&err), ExitCode::from(CLOSED));
        let other = anyhow::anyhow!("cannot read the token");
        assert_eq!(code_of(&other), ExitCode::from(ERROR));
        assert_eq!(code_of_refusal(RefusalCode::Unknown), UNKNOWN);
        assert_eq!(code_of_refusal(RefusalCode::NotAllowed), NOT_ALLOWED);
        assert_eq!(code_of_refusal(RefusalCode::Full), NOT_NOW);
    }
}
