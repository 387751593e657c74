//! Standard output for every command: a reader that goes away early (`dump
//! | head`) ends the command quietly, with the status a process killed by
//! `SIGPIPE` reports (141, as `cat` or `seq` would show), never a panic.
//! Every other write failure is the command's failure (exit 2).

use std::cell::RefCell;
use std::io::Write as _;

thread_local! {
    /// Lines held back by [`settled`] while a pass may still be retried.
    static HELD: RefCell<Option<Vec<String>>> = const { RefCell::new(None) };
}

/// Runs `pass` up to `tries` times, holding its output back, until a
/// pass finds all well (`Ok(true)`); prints the last pass's output and
/// returns its result (a failure's output dropped). For reading commands
/// beside a running node, whose files move under a pass (a segment
/// reclaimed between its listing and its read, a tail being written):
/// damage on disk is found by every pass, a moving figure is not.
pub(crate) fn settled(
    tries: usize,
    mut pass: impl FnMut() -> Result<bool, String>,
) -> Result<bool, String> {
    let mut last = Err(String::new());
    for i in 0..tries.max(1) {
        HELD.with_borrow_mut(|h| *h = Some(Vec::new()));
        last = pass();
        let lines = HELD.with_borrow_mut(Option::take).unwrap_or_default();
        let final_pass = i + 1 >= tries || last == Ok(true);
        if final_pass {
            if last.is_ok() {
                for l in lines {
                    line(format_args!("{l}"));
                }
            }
            break;
        }
    }
    last
}

/// The exit status of a command whose reader closed the pipe: 128 + SIGPIPE.
pub(crate) const CLOSED_PIPE: i32 = 141;

/// Writes one line to standard output (see the module doc).
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
    let held = HELD.with_borrow_mut(|h| h.as_mut().map(|h| h.push(args.to_string())).is_some());
    if held {
        return;
    }
    let mut out = std::io::stdout().lock();
    let written = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
    if let Err(e) = written {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(CLOSED_PIPE);
        }
        eprintln!("error: writing to standard output: {e}");
        std::process::exit(2);
    }
}

/// `println!` for the commands' output, through [`line()`].
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}
pub(crate) use say;
