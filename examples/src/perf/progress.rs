//! The progress line on stderr, drawn by `indicatif`: percent done, iterations, elapsed
//! time and the live rate (bandwidth, or time per iteration, from indicatif's smoothed
//! estimate), shown only when stderr is a terminal and the run has lasted two seconds.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// When the line first appears.
const SHOW_AFTER: Duration = Duration::from_secs(2);
/// How often the line is updated (indicatif's own limit would let a burst of 20 draws
/// through at first).
const REDRAW: Duration = Duration::from_millis(200);

/// What a run counts to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Goal {
    /// A number of iterations.
    Iters(u64),
    /// A duration (`-D`).
    Time(Duration),
}

/// One run's progress line.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    goal: Goal,
    /// Where the line goes once `show_at` has passed; `None` once it went there, or if
    /// it has nowhere to go (stderr is not a terminal).
    target: Option<ProgressDrawTarget>,
    /// When the line is next updated.
    next_draw: Instant,
    /// The bar draws (its target is set).
    shown: bool,
}

impl Progress {
    /// Starts timing a run called `label`, drawn on stderr if it is a terminal.
    pub fn new(label: impl Into<String>, goal: Goal) -> Self {
        let target = std::io::stderr()
            .is_terminal()
            .then(ProgressDrawTarget::stderr);
        Self::with_target(label, goal, target, SHOW_AFTER)
    }

    /// [`Self::new`] drawing to `target` (`None`: nowhere) from `show_after` on.
    pub fn with_target(
        label: impl Into<String>,
        goal: Goal,
        target: Option<ProgressDrawTarget>,
        show_after: Duration,
    ) -> Self {
        let len = match goal {
            Goal::Iters(n) => Some(n),
            Goal::Time(_) => None,
        };
        let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::hidden())
            .with_message(label.into());
        let this = Self {
            bar,
            goal,
            target,
            next_draw: Instant::now() + show_after,
            shown: false,
        };
        this.styled(None)
    }

    /// Shows the live bandwidth of iterations of `size` octets.
    pub fn with_size(self, size: u64) -> Self {
        self.styled(Some(size))
    }

    /// The line, under 80 columns: `write_bw 65536:  25.0% done, 50 iterations in 2.5 s,
    /// now 9.61 Gbit/s`, or `now 3.20 us/iteration` without a size.
    fn styled(self, size: Option<u64>) -> Self {
        let goal = self.goal;
        let template = "{msg}: {done} done, {pos} iterations in {secs}, now {rate}";
        let style = ProgressStyle::with_template(template)
            .unwrap_or_else(|e| unreachable!("the template is fixed: {e}"))
            .with_key(
                "done",
                move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:5.1}%", percent(goal, s.pos(), s.elapsed()));
                },
            )
            .with_key("secs", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.1} s", s.elapsed().as_secs_f64());
            })
            .with_key(
                "rate",
                move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = w.write_str(&rate(size, s.per_sec()));
                },
            );
        self.bar.set_style(style);
        self
    }

    /// Records `done` iterations; the line appears once the run has lasted two seconds
    /// and is updated every 200 ms.
    pub fn tick(&mut self, done: u64) {
        if !self.shown && self.target.is_none() {
            return;
        }
        let now = Instant::now();
        if now < self.next_draw {
            return;
        }
        self.next_draw = now + REDRAW;
        if let Some(target) = self.target.take() {
            self.bar.set_draw_target(target);
            self.shown = true;
        }
        self.bar.set_position(done);
    }

    /// Clears the line if it was drawn.
    pub fn finish(&mut self) {
        if self.shown {
            self.bar.finish_and_clear();
            self.shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// How far a run toward `goal` is after `done` iterations in `elapsed`, in percent.
fn percent(goal: Goal, done: u64, elapsed: Duration) -> f64 {
    let pct = match goal {
        Goal::Iters(n) => done as f64 * 100.0 / n.max(1) as f64,
        Goal::Time(d) => elapsed.as_secs_f64() * 100.0 / d.as_secs_f64().max(1e-9),
    };
    pct.min(100.0)
}

/// The live rate of `per_sec` iterations of `size` octets a second (`None`: time per
/// iteration).
fn rate(size: Option<u64>, per_sec: f64) -> String {
    match size {
        Some(size) => format!("{:.2} Gbit/s", per_sec * size as f64 * 8.0 / 1e9),
        None if per_sec > 0.0 => format!("{:.2} us/iteration", 1e6 / per_sec),
        None => "no iteration".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use indicatif::TermLike;

    use super::*;

    /// A terminal that keeps what is written to it.
    #[derive(Clone, Debug, Default)]
    struct Screen(Arc<Mutex<String>>);

    impl Screen {
        fn text(&self) -> String {
            self.0.lock().map(|s| s.clone()).unwrap_or_default()
        }
    }

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            200
        }
        fn move_cursor_up(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> io::Result<()> {
            self.write_str(&format!("{s}\n"))
        }
        fn write_str(&self, s: &str) -> io::Result<()> {
            if let Ok(mut t) = self.0.lock() {
                t.push_str(s);
            }
            Ok(())
        }
        fn clear_line(&self) -> io::Result<()> {
            self.write_str("<clear>")
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    fn on(screen: &Screen) -> Option<ProgressDrawTarget> {
        Some(ProgressDrawTarget::term_like(Box::new(screen.clone())))
    }

    #[test]
    fn the_line_shows_percent_iterations_and_the_live_rate() {
        let screen = Screen::default();
        let mut p = Progress::with_target(
            "write_bw 65536",
            Goal::Iters(200),
            on(&screen),
            Duration::ZERO,
        )
        .with_size(65536);
        p.tick(50);
        let text = screen.text();
        assert!(
            text.contains("write_bw 65536:  25.0% done, 50 iterations in "),
            "{text:?}"
        );
        assert!(
            text.contains(" s, now ") && text.contains(" Gbit/s"),
            "{text:?}"
        );
        p.finish();
        assert!(screen.text().ends_with("<clear>"), "{:?}", screen.text());
    }

    #[test]
    fn percent_of_iterations_and_of_time() {
        let s = Duration::from_secs;
        assert_eq!(percent(Goal::Iters(200), 50, s(9)), 25.0);
        assert_eq!(percent(Goal::Time(s(10)), 7, s(5)), 50.0);
        assert_eq!(percent(Goal::Time(s(10)), 7, s(50)), 100.0);
        assert_eq!(rate(Some(65536), 20_000.0), "10.49 Gbit/s");
        assert_eq!(rate(None, 20.0), "50000.00 us/iteration");
        assert_eq!(rate(None, 0.0), "no iteration");
    }

    #[test]
    fn silent_before_two_seconds_and_off_a_terminal() {
        let screen = Screen::default();
        let mut early = Progress::with_target("x", Goal::Iters(9), on(&screen), SHOW_AFTER);
        early.tick(1);
        early.tick(1);
        early.finish();
        assert_eq!(screen.text(), "");
        let mut nowhere = Progress::with_target("x", Goal::Iters(9), None, Duration::ZERO);
        nowhere.tick(1);
        assert!(!nowhere.shown);
    }
}
