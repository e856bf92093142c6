//! The runtime the stack runs on inside a C program: one worker thread of this library's
//! own, started on first use. C threads call in and wait on it; they are never its
//! workers, so waiting never blocks the runtime itself.

use std::future::Future;
use std::sync::OnceLock;

/// The runtime.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("iwarp-verbs")
            .enable_all()
            .build()
            .expect("start the iwarp verbs runtime thread")
    })
}

/// Runs `f` to completion on the runtime, the calling C thread waiting for it.
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    runtime().block_on(f)
}
