//! errno, and what a C program is told when it asks for what this stack does not do.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use libc::c_int;

/// An errno value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Errno(pub(crate) c_int);

impl Errno {
    pub(crate) const EINVAL: Self = Self(libc::EINVAL);
    pub(crate) const ENOMEM: Self = Self(libc::ENOMEM);
    pub(crate) const ENODEV: Self = Self(libc::ENODEV);
    pub(crate) const ENODATA: Self = Self(libc::ENODATA);
    pub(crate) const EOPNOTSUPP: Self = Self(libc::EOPNOTSUPP);
    pub(crate) const EBUSY: Self = Self(libc::EBUSY);
    pub(crate) const EIO: Self = Self(libc::EIO);

    /// For verbs that return the error number (`ibv_query_device`, `ibv_post_send`):
    /// it, with errno set too.
    pub(crate) fn code(self) -> c_int {
        set_errno(self);
        self.0
    }

    /// For verbs that return -1 and set errno (`ibv_close_device`, `ibv_query_gid`).
    pub(crate) fn fail(self) -> c_int {
        set_errno(self);
        -1
    }
}

/// Sets this thread's errno.
pub(crate) fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns this thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = e.0 };
}

/// Tells the program's user `what` about `verb`, once per verb (a program that polls
/// in a loop is not made to print a line per poll).
pub(crate) fn once(verb: &str, what: &str) {
    if first(verb) {
        eprintln!("iwarp verbs: {verb}: {what}");
    }
}

/// True the first time `key` is told.
fn first(key: &str) -> bool {
    static TOLD: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    TOLD.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.to_owned())
}

/// Tells the program's user, once per verb, that `verb` is not supported and why
/// (`why`, in their words), and returns `EOPNOTSUPP` for the caller to hand back.
pub(crate) fn unsupported(verb: &str, why: &str) -> Errno {
    if first(verb) {
        eprintln!("iwarp verbs: {verb} is not supported: {why}");
    }
    set_errno(Errno::EOPNOTSUPP);
    Errno::EOPNOTSUPP
}
