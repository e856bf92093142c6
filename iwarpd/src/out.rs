//! Standard output for a reader that may stop reading (`iwarpd check | head -1`,
//! `iwarpd stat --json | head -c0`): where `println!` panics on a closed pipe, these
//! stop writing quietly, as Unix tools do, and the program goes on to its own end and
//! exit status (a daemon serves on, a check still exits 1 if it failed).

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once standard output cannot be written any more: nothing more is tried.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

/// Writes `text` to standard output and flushes it, so a script reading line by line
/// sees it at once. A reader that went away (a closed pipe) ends the output quietly;
/// another write error is said once on standard error. Returns whether the text was
/// written.
pub(crate) fn print(text: &str) -> bool {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return false;
    }
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => true,
        Err(e) => {
            STDOUT_GONE.store(true, Ordering::Relaxed);
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                eprint(&format!(
                    "iwarpd: cannot write to standard output ({e}): the rest of the output is \
                     left out\n"
                ));
            }
            false
        }
    }
}

/// [`print`] with a line end.
pub(crate) fn line(text: &str) -> bool {
    print(&format!("{text}\n"))
}

/// Writes `text` to standard error; a closed or failing standard error is ignored (there
/// is nowhere left to say so).
pub(crate) fn eprint(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// [`eprint`] with a line end.
pub(crate) fn eline(text: &str) {
    eprint(&format!("{text}\n"));
}
