//! The error replies every kind of request shares.

use ipc::control::{Reply, error};

/// An error reply: `code` (from [`ipc::control::error`]) and what to do, in words.
pub(super) fn err(code: u16, text: impl Into<String>) -> Reply {
    Reply::Error {
        code,
        text: text.into(),
    }
}

/// The reply to a request naming a `what` the client does not hold (`id`).
pub(super) fn not_found(what: &str, id: u32) -> Reply {
    err(
        error::NOT_FOUND,
        format!("no {what} {id} of this client (it was freed, or belongs to another process)"),
    )
}
