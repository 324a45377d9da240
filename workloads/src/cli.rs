//! Command-line handling shared by every workload program.
//!
//! Hand-rolled on purpose: the binaries are linked statically for a bare
//! busybox guest and may depend on std and libc only.

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use crate::report::Report;

/// Why a program stopped early.
///
/// The variant decides the exit status so that a test harness can tell
/// "called wrongly" (2) from "the kernel refused" (1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The command line is wrong: exit status 2.
    Usage(String),
    /// The work itself failed, e.g. a system call returned an error: exit status 1.
    Failed(String),
}

impl Error {
    pub fn usage(msg: impl Into<String>) -> Self {
        Self::Usage(msg.into())
    }

    pub fn failed(msg: impl Into<String>) -> Self {
        Self::Failed(msg.into())
    }

    /// `what` failed; the reason is the calling thread's current `errno`.
    /// Call it right after the failing libc call, before anything else can
    /// overwrite `errno`.
    pub fn last_os(what: &str) -> Self {
        Self::os(what, io::Error::last_os_error())
    }

    /// `what` failed with `err`.
    pub fn os(what: &str, err: io::Error) -> Self {
        Self::Failed(format!("{what}: {err}"))
    }

    fn exit_status(&self) -> u8 {
        match self {
            Self::Usage(_) => 2,
            Self::Failed(_) => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Usage(msg) => write!(f, "{msg} (try --help)"),
            Self::Failed(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for Error {}

/// An option a program accepts, named without the leading `--`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opt {
    /// `--name VALUE` or `--name=VALUE`.
    Value(&'static str),
    /// `--name`, a switch without a value.
    Flag(&'static str),
}

impl Opt {
    fn name(self) -> &'static str {
        match self {
            Self::Value(name) | Self::Flag(name) => name,
        }
    }
}

/// A parsed command line: positional arguments plus the options given.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Args {
    positionals: Vec<String>,
    options: Vec<(&'static str, Option<String>)>,
}

impl Args {
    /// Splits `args` (without the program name) into positionals and the
    /// options listed in `spec`. Options may appear anywhere; `--` ends them.
    pub fn parse<I>(args: I, spec: &[Opt]) -> Result<Self, Error>
    where
        I: IntoIterator<Item = String>,
    {
        let mut parsed = Self::default();
        let mut rest = args.into_iter();
        while let Some(arg) = rest.next() {
            if arg == "--" {
                parsed.positionals.extend(rest);
                break;
            }
            if let Some(body) = arg.strip_prefix("--") {
                parsed.take_option(body, spec, &mut rest)?;
            } else if looks_like_short_option(&arg) {
                return Err(Error::usage(format!("unknown option {arg}")));
            } else {
                parsed.positionals.push(arg);
            }
        }
        Ok(parsed)
    }

    fn take_option(
        &mut self,
        body: &str,
        spec: &[Opt],
        rest: &mut impl Iterator<Item = String>,
    ) -> Result<(), Error> {
        let (name, inline_value) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (body, None),
        };
        let Some(&opt) = spec.iter().find(|opt| opt.name() == name) else {
            return Err(Error::usage(format!("unknown option --{name}")));
        };
        if self.options.iter().any(|(known, _)| *known == opt.name()) {
            return Err(Error::usage(format!("--{name} given more than once")));
        }
        let value = match (opt, inline_value) {
            (Opt::Flag(_), None) => None,
            (Opt::Flag(_), Some(_)) => {
                return Err(Error::usage(format!("--{name} takes no value")));
            }
            (Opt::Value(_), Some(value)) => Some(value),
            (Opt::Value(_), None) => match rest.next() {
                Some(value) => Some(value),
                None => return Err(Error::usage(format!("--{name} needs a value"))),
            },
        };
        self.options.push((opt.name(), value));
        Ok(())
    }

    /// Returns exactly `N` positionals, or a usage error naming them.
    pub fn positionals<const N: usize>(&self, names: [&str; N]) -> Result<[&str; N], Error> {
        if self.positionals.len() != N {
            let plural = if N == 1 { "" } else { "s" };
            return Err(Error::usage(format!(
                "expected {N} argument{plural} ({}), got {}",
                names.join(" "),
                self.positionals.len()
            )));
        }
        Ok(std::array::from_fn(|i| self.positionals[i].as_str()))
    }

    /// All positionals, for programs with subcommands.
    pub fn all_positionals(&self) -> &[String] {
        &self.positionals
    }

    /// The value of `--name VALUE`, if given.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(known, _)| *known == name)
            .and_then(|(_, value)| value.as_deref())
    }

    /// Whether the switch `--name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.options.iter().any(|(known, _)| *known == name)
    }
}

/// `-x` is an (unknown) option, but `-5` is a number that should fail with
/// a range message rather than a confusing "unknown option".
fn looks_like_short_option(arg: &str) -> bool {
    let mut chars = arg.chars();
    chars.next() == Some('-') && chars.next().is_some_and(|c| !c.is_ascii_digit())
}

/// True when `--help` or `-h` appears before any `--`.
pub fn wants_help(args: &[String]) -> bool {
    args.iter()
        .take_while(|arg| *arg != "--")
        .any(|arg| arg == "--help" || arg == "-h")
}

/// Parses a plain decimal integer in `min..=max`; `what` names it in errors.
pub fn parse_int(what: &str, text: &str, min: u64, max: u64) -> Result<u64, Error> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::usage(format!(
            "{what} must be a non-negative integer, got '{text}'"
        )));
    }
    let value = text
        .parse::<u64>()
        .map_err(|_| Error::usage(format!("{what} is too large: {text}")))?;
    if !(min..=max).contains(&value) {
        return Err(Error::usage(format!(
            "{what} must be in {min}..={max}, got {text}"
        )));
    }
    Ok(value)
}

/// Parses a byte count such as `4096`, `64K`, `64KiB` or `1M` (binary
/// multiples, case-insensitive) in `min..=max`.
pub fn parse_bytes(what: &str, text: &str, min: u64, max: u64) -> Result<u64, Error> {
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(digits_end);
    let multiplier: u64 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => {
            return Err(Error::usage(format!(
                "{what} must be a byte count like 4096, 64K or 1M, got '{text}'"
            )));
        }
    };
    let count = parse_int(what, digits, 0, u64::MAX)?;
    let value = count
        .checked_mul(multiplier)
        .ok_or_else(|| Error::usage(format!("{what} is too large: {text}")))?;
    if !(min..=max).contains(&value) {
        return Err(Error::usage(format!(
            "{what} must be in {min}..={max} bytes, got {text}"
        )));
    }
    Ok(value)
}

/// Parses a duration: a decimal number with an optional unit `ns`, `us`,
/// `ms` or `s` (the default), e.g. `2`, `0.5`, `250ms`. Must lie in `min..=max`.
pub fn parse_duration(
    what: &str,
    text: &str,
    min: Duration,
    max: Duration,
) -> Result<Duration, Error> {
    let bad = || {
        Error::usage(format!(
            "{what} must be a duration like 2, 0.5, 250ms or 100us, got '{text}'"
        ))
    };
    let number_end = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_end);
    let unit_ns: u128 = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        _ => return Err(bad()),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty()
        || !all_digits(whole)
        || !all_digits(fraction)
        || fraction.len() > 9
    {
        return Err(bad());
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| bad())?
    };
    let fraction_ns = if fraction.is_empty() {
        0
    } else {
        let scale = 10u128.pow(fraction.len() as u32);
        fraction.parse::<u128>().map_err(|_| bad())? * unit_ns / scale
    };
    let nanos = whole.saturating_mul(unit_ns).saturating_add(fraction_ns);
    let value = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
    if value < min || value > max {
        return Err(Error::usage(format!(
            "{what} must be between {min:?} and {max:?}, got {text}"
        )));
    }
    Ok(value)
}

/// The program's arguments as UTF-8 strings (without the program name).
fn collect_args() -> Result<Vec<String>, Error> {
    std::env::args_os()
        .skip(1)
        .map(|arg: OsString| {
            arg.into_string()
                .map_err(|raw| Error::usage(format!("argument {raw:?} is not valid UTF-8")))
        })
        .collect()
}

/// Runs a workload program: handles `--help`, parses options per `spec`,
/// runs `body`, prints its report as the last stdout line and maps errors
/// to one stderr line plus exit status 2 (usage) or 1 (failure).
pub fn run_main(
    name: &str,
    usage: &str,
    spec: &[Opt],
    body: impl FnOnce(&Args) -> Result<Report, Error>,
) -> ExitCode {
    let outcome = collect_args().and_then(|raw| {
        if wants_help(&raw) {
            return Ok(None);
        }
        let args = Args::parse(raw, spec)?;
        body(&args).map(Some)
    });
    let printed = match outcome {
        Ok(None) => write_stdout(usage.trim_end()),
        Ok(Some(report)) => write_stdout(&report.to_string()),
        Err(err) => {
            // Nothing sensible is left to do if even stderr is gone.
            let _ = writeln!(io::stderr(), "{name}: error: {err}");
            return ExitCode::from(err.exit_status());
        }
    };
    match printed {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let _ = writeln!(io::stderr(), "{name}: error: writing stdout: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Writes one line and flushes, reporting failure (e.g. a closed pipe)
/// instead of panicking the way `println!` would.
fn write_stdout(line: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &[Opt] = &[Opt::Value("threads"), Opt::Flag("all")];

    fn parse(args: &[&str]) -> Result<Args, Error> {
        Args::parse(args.iter().map(|s| s.to_string()), SPEC)
    }

    fn is_usage<T: fmt::Debug>(result: Result<T, Error>) -> bool {
        matches!(result, Err(Error::Usage(_)))
    }

    #[test]
    fn options_anywhere_in_both_spellings() {
        let a = parse(&["--threads", "4", "100"]).unwrap();
        assert_eq!(a.positionals(["N"]).unwrap(), ["100"]);
        assert_eq!(a.value("threads"), Some("4"));
        let b = parse(&["100", "--threads=8", "--all"]).unwrap();
        assert_eq!(b.value("threads"), Some("8"));
        assert!(b.flag("all"));
        assert!(!a.flag("all"));
    }

    #[test]
    fn double_dash_ends_options() {
        let a = parse(&["--", "--threads", "-x"]).unwrap();
        assert_eq!(a.all_positionals(), ["--threads", "-x"]);
        assert_eq!(a.value("threads"), None);
    }

    #[test]
    fn bad_options_are_usage_errors() {
        assert!(is_usage(parse(&["--nope"])));
        assert!(is_usage(parse(&["-x"])));
        assert!(is_usage(parse(&["--threads"])));
        assert!(is_usage(parse(&["--threads", "1", "--threads", "2"])));
        assert!(is_usage(parse(&["--all=yes"])));
    }

    #[test]
    fn negative_number_is_a_positional() {
        let a = parse(&["-5"]).unwrap();
        assert_eq!(a.positionals(["N"]).unwrap(), ["-5"]);
        assert!(is_usage(parse_int("N", "-5", 1, 10)));
    }

    #[test]
    fn positional_count_is_checked() {
        let a = parse(&["1", "2"]).unwrap();
        let err = a.positionals(["N"]).unwrap_err();
        assert_eq!(
            err,
            Error::usage("expected 1 argument (N), got 2".to_string())
        );
        assert_eq!(a.positionals(["A", "B"]).unwrap(), ["1", "2"]);
    }

    #[test]
    fn help_is_found_before_double_dash_only() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(wants_help(&args(&["5", "--help"])));
        assert!(wants_help(&args(&["-h"])));
        assert!(!wants_help(&args(&["--", "--help"])));
        assert!(!wants_help(&args(&["5"])));
    }

    #[test]
    fn integers() {
        assert_eq!(parse_int("N", "10000", 1, u64::MAX), Ok(10000));
        assert_eq!(parse_int("N", "0", 0, 5), Ok(0));
        for bad in ["", "+5", "1e3", "12a", " 1", "0x10"] {
            assert!(is_usage(parse_int("N", bad, 0, 100)), "{bad:?}");
        }
        assert!(is_usage(parse_int("N", "0", 1, 5)));
        assert!(is_usage(parse_int("N", "6", 1, 5)));
        assert!(is_usage(parse_int(
            "N",
            "99999999999999999999999",
            1,
            u64::MAX
        )));
    }

    #[test]
    fn byte_counts() {
        let p = |t| parse_bytes("BYTES", t, 1, 1 << 40);
        assert_eq!(p("4096"), Ok(4096));
        assert_eq!(p("64K"), Ok(65536));
        assert_eq!(p("64kib"), Ok(65536));
        assert_eq!(p("1M"), Ok(1 << 20));
        assert_eq!(p("2GiB"), Ok(2 << 30));
        for bad in ["", "K", "4 K", "4KB", "-1", "1.5M", "0"] {
            assert!(is_usage(p(bad)), "{bad:?}");
        }
        assert!(is_usage(parse_bytes("B", "99999999999999G", 1, u64::MAX)));
    }

    #[test]
    fn durations() {
        let max = Duration::from_secs(86_400);
        let p = |t| parse_duration("SECONDS", t, Duration::from_nanos(1), max);
        assert_eq!(p("2"), Ok(Duration::from_secs(2)));
        assert_eq!(p("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(p("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(p(".25"), Ok(Duration::from_millis(250)));
        assert_eq!(p("1."), Ok(Duration::from_secs(1)));
        assert_eq!(p("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(p("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(p("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(p("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(p("0.000000001"), Ok(Duration::from_nanos(1)));
        for bad in [
            "",
            ".",
            "s",
            "1..2",
            "1h",
            "-1",
            "1 s",
            "0",
            "0.0000000001",
            "86401",
        ] {
            assert!(is_usage(p(bad)), "{bad:?}");
        }
    }

    #[test]
    fn usage_errors_point_at_help() {
        assert_eq!(
            Error::usage("bad").to_string(),
            "bad (try --help)".to_string()
        );
        assert_eq!(Error::failed("boom").to_string(), "boom");
        assert_eq!(Error::usage("x").exit_status(), 2);
        assert_eq!(Error::failed("x").exit_status(), 1);
    }
}
