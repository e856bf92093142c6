//! The tools' standard output and error, for readers that go away: `iwperf ... | head -1`
//! closes the pipe after one line. `println!` panics on the next write then ("failed
//! printing to stdout: Broken pipe"); these end the program quietly instead, as a C tool
//! killed by SIGPIPE ends (Rust ignores SIGPIPE, so a write to a closed pipe is an error,
//! and the tools' sockets must not raise the signal).
//!
//! [`outln!`](crate::outln) and [`out!`](crate::out) write to standard output: if its
//! reader is gone the program exits at once with status [`CLOSED_PIPE_STATUS`] and no
//! message; any other write error ends it with status 1, naming the error.
//! [`errln!`](crate::errln) writes to standard error, and a closed one is ignored (there
//! is nowhere left to say anything).

use std::fmt;
use std::io::{self, Write};

/// The exit status when standard output's reader went away: 128 + SIGPIPE (13), what a
/// shell shows for a C tool the signal killed.
pub const CLOSED_PIPE_STATUS: i32 = 141;

/// Writes `args` to standard output (what [`out!`](crate::out) and
/// [`outln!`](crate::outln) expand to); see the module's documentation for a closed one.
pub fn out(args: fmt::Arguments<'_>) {
    let mut stdout = io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|()| stdout.flush());
    if let Err(e) = written {
        failed(&e);
    }
}

/// Writes `args` to standard error (what [`errln!`](crate::errln) expands to), ignoring
/// a closed one.
pub fn err(args: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// Flushes standard output; see the module's documentation for a closed one.
pub fn flush() {
    if let Err(e) = io::stdout().lock().flush() {
        failed(&e);
    }
}

/// Ends the program after standard output failed with `e`.
fn failed(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(CLOSED_PIPE_STATUS);
    }
    err(format_args!("cannot write to standard output: {e}\n"));
    std::process::exit(1);
}

/// `print!` for the tools: a closed standard output ends the program quietly (see
/// [`stdio`](crate::stdio)).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdio::out(format_args!($($arg)*))
    };
}

/// `println!` for the tools: a closed standard output ends the program quietly (see
/// [`stdio`](crate::stdio)).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::stdio::out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdio::out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` for the tools: a closed standard error is ignored (see
/// [`stdio`](crate::stdio)).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::stdio::err(format_args!("{}\n", format_args!($($arg)*)))
    };
}
