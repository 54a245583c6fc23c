//! What a session counts: messages refused by reason, and messages and bytes sent and
//! accepted by kind.

use crate::wire::SESSION_FORM;

/// Counts of what the session refused or sent, each named for `stats()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// Too short for a trailer, or no decodable sender identity.
    pub dropped_malformed: u64,
    /// A sender site name that breaks the resource name rules.
    pub dropped_bad_identity: u64,
    /// Addressed to another node: captured elsewhere and replayed here.
    pub dropped_misdirected: u64,
    /// Sent more than [`MAX_CLOCK_SKEW`] away from our clock.
    pub dropped_stale: u64,
    /// A sequence number its sender's window has seen, or one older than the window.
    pub dropped_replayed: u64,
    /// From a site whose certificate we have not verified (it is asked for a `HELLO`).
    pub dropped_unknown_sender: u64,
    /// A signature that is not the sender site's (its sender is asked for a `HELLO`: it may
    /// have renewed its certificate).
    pub dropped_bad_signature: u64,
    /// Messages taken under the key their site signed with before its latest `HELLO`
    /// (within [`KEY_SWITCH_GRACE`] of the switch).
    pub previous_key_messages: u64,
    /// A `HELLO` whose certificate does not prove the claimed site.
    pub dropped_untrusted_certificate: u64,
    /// From an identity whose `HELLO` named protocol versions we share none of.
    pub dropped_incompatible_version: u64,
    pub hellos_sent: u64,
    pub hellos_received: u64,
    /// On-demand answers not sent because the second's budget was spent.
    pub answers_withheld: u64,
    /// Signed messages refused unchecked: the second's budget of signature checks for
    /// their sender was spent ([`super::SignedChecks`]).
    pub dropped_over_budget: u64,
    /// In the session form, under a session this node does not hold (it is answered
    /// with a `HELLO` and a handshake, paced).
    pub dropped_unknown_session: u64,
    /// In the session form, with a tag the session's key did not make, or from another
    /// identity than the session's.
    pub dropped_bad_tag: u64,
    /// Messages sent and accepted in the session form (also counted by kind).
    pub session_messages_sent: u64,
    pub session_messages_accepted: u64,
    /// Handshakes this node started, and those that completed (its response came).
    pub handshakes_started: u64,
    pub handshakes_completed: u64,
    /// Handshake messages not taken: not for this identity, no handshake of ours under
    /// way for that index, or a key that does not agree.
    pub handshakes_refused: u64,
    /// Sessions held now.
    pub sessions: u64,
    /// Messages sent, and their bytes (sealed, before encryption), by kind: indexed like
    /// [`MESSAGE_KINDS`].
    pub sent: [KindCount; MESSAGE_KINDS.len()],
    /// Messages accepted (verified), by kind.
    pub accepted: [KindCount; MESSAGE_KINDS.len()],
}

/// The message kinds, in order of their kind byte (0x01 first), as stats name them.
pub const MESSAGE_KINDS: [&str; 11] = [
    "foca",
    "sync_request",
    "sync_response",
    "leave",
    "hello",
    "conflict",
    "digest",
    "repair",
    "handshake_init",
    "handshake_response",
    "handshake_confirm",
];

/// How many messages of one kind, and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindCount {
    pub messages: u64,
    pub bytes: u64,
}

pub(super) fn count_kind(counts: &mut [KindCount; MESSAGE_KINDS.len()], message: &[u8]) {
    if let Some(count) = message
        .first()
        .and_then(|kind| counts.get_mut(usize::from(*kind & !SESSION_FORM).wrapping_sub(1)))
    {
        count.messages += 1;
        count.bytes += message.len() as u64;
    }
}
