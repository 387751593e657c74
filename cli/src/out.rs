//! Standard output for every command: a reader that goes away early (`dump
//! | head`) ends the command quietly, with the status a process killed by
//! `SIGPIPE` reports (141, as `cat` or `seq` would show), never a panic.
//! Every other write failure is the command's failure (exit 2).

use std::io::Write as _;

/// The exit status of a command whose reader closed the pipe: 128 + SIGPIPE.
pub(crate) const CLOSED_PIPE: i32 = 141;

/// Writes one line to standard output (see the module doc).
pub(crate) fn line(args: std::fmt::Arguments<'_>) {
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
