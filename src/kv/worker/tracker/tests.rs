//! Tests of the tracker's decisions that need no postoffice.

use super::replaced::kept_for_replacement;
use super::*;

/// A send that failed for the server's channel.
fn channel_failed() -> Error {
    Error::PeerLost("server rank 0 (id 8) is gone".into())
}

#[test]
fn a_part_whose_server_is_replaced_is_kept_for_the_replacement() {
    assert!(kept_for_replacement(true, false, &channel_failed()));
    assert!(kept_for_replacement(
        true,
        false,
        &Error::Van("connection reset".into())
    ));
}

/// After a final loss (the postoffice's `has_failed`: no replacement comes) a refused send
/// fails the request at once; kept, it would wait for `PS_TIMEOUT`.
#[test]
fn a_refusal_after_a_final_loss_fails_the_request_at_once() {
    assert!(!kept_for_replacement(true, true, &channel_failed()));
    assert!(!kept_for_replacement(
        true,
        true,
        &Error::Van("connection reset".into())
    ));
}

#[test]
fn nothing_is_kept_without_replacements_or_for_another_error() {
    assert!(!kept_for_replacement(false, false, &channel_failed()));
    assert!(!kept_for_replacement(
        true,
        false,
        &Error::InvalidArgument("internal: no server rank 9".into())
    ));
}
