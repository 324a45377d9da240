//! `--by`: the fields a call's key is made of, as the user spells them, and how a key's raw
//! values read in a report.

use std::fmt;
use std::str::FromStr;

use profiler_common::{BY_FIELDS_MAX, keys::field};

/// One field of a `--by` key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByField {
    /// Argument n (0..=5), raw.
    Arg(u8),
    /// Argument n's power-of-two class (`argN:log2`).
    ArgLog2(u8),
    /// The return value.
    Ret,
    /// The errno of a negative return, `ok` for the rest.
    Errno,
    /// The call's return address (kprobe and fentry modes), or its call site.
    Caller,
    Cpu,
    Pid,
    Tid,
    Comm,
    Cgroup,
}

/// Why a `--by` key cannot be used; one line each.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ByError {
    #[error(
        "unknown --by key `{0}`: use argN or argN:log2 (N = 0..5), ret, errno, caller, cpu, \
         pid, tid, comm, cgroup"
    )]
    Unknown(String),
    #[error("--by {0}: functions take their arguments in registers 0..5")]
    ArgOutOfRange(String),
    #[error("--by combines at most {BY_FIELDS_MAX} keys, got {0}")]
    TooMany(usize),
    #[error("--by {0} is given twice")]
    Repeated(String),
}

const KEYS: [(&str, ByField); 8] = [
    ("ret", ByField::Ret),
    ("errno", ByField::Errno),
    ("caller", ByField::Caller),
    ("cpu", ByField::Cpu),
    ("pid", ByField::Pid),
    ("tid", ByField::Tid),
    ("comm", ByField::Comm),
    ("cgroup", ByField::Cgroup),
];

impl FromStr for ByField {
    type Err = ByError;

    fn from_str(text: &str) -> Result<Self, ByError> {
        if let Some((_, key)) = KEYS.iter().find(|(name, _)| *name == text) {
            return Ok(*key);
        }
        let Some(rest) = text.strip_prefix("arg") else {
            return Err(ByError::Unknown(text.to_owned()));
        };
        let (index, log2) = match rest.strip_suffix(":log2") {
            Some(index) => (index, true),
            None => (rest, false),
        };
        if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ByError::Unknown(text.to_owned()));
        }
        match index.parse::<u8>() {
            Ok(n) if n <= 5 => Ok(if log2 {
                ByField::ArgLog2(n)
            } else {
                ByField::Arg(n)
            }),
            _ => Err(ByError::ArgOutOfRange(text.to_owned())),
        }
    }
}

impl fmt::Display for ByField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ByField::Arg(n) => write!(f, "arg{n}"),
            ByField::ArgLog2(n) => write!(f, "arg{n}:log2"),
            other => {
                let name = KEYS
                    .iter()
                    .find(|(_, key)| key == other)
                    .map_or("?", |(name, _)| name);
                f.write_str(name)
            }
        }
    }
}

impl ByField {
    /// The field's code in the eBPF `BY_FIELDS` global.
    pub fn code(self) -> u8 {
        match self {
            ByField::Arg(n) => field::ARG | n,
            ByField::ArgLog2(n) => field::ARG_LOG2 | n,
            ByField::Ret => field::RET,
            ByField::Errno => field::ERRNO,
            ByField::Caller => field::CALLER,
            ByField::Cpu => field::CPU,
            ByField::Pid => field::PID,
            ByField::Tid => field::TID,
            ByField::Comm => field::COMM,
            ByField::Cgroup => field::CGROUP,
        }
    }

    /// Whether the field needs the function's arguments or return value (which syscall
    /// tracepoints, kprobes and fentry on 5.17+ all give).
    pub fn reads_registers(self) -> bool {
        matches!(
            self,
            ByField::Arg(_) | ByField::ArgLog2(_) | ByField::Ret | ByField::Errno | ByField::Caller
        )
    }

    /// A raw value as the report prints it (callers are named by the session, which has the
    /// kernel's symbols).
    pub fn describe(self, raw: u64) -> String {
        match self {
            ByField::ArgLog2(_) => log2_range(raw),
            ByField::Ret => profiler_common::keys::signed_return(raw).to_string(),
            ByField::Errno => errno_name(raw),
            ByField::Caller | ByField::Cgroup => format!("{raw:#x}"),
            ByField::Arg(_) | ByField::Cpu | ByField::Pid | ByField::Tid | ByField::Comm => {
                raw.to_string()
            }
        }
    }
}

/// The fields of one `--by` key, checked: 1..=3, none twice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeySpec(Vec<ByField>);

impl KeySpec {
    pub fn new(fields: Vec<ByField>) -> Result<Self, ByError> {
        if fields.len() > BY_FIELDS_MAX {
            return Err(ByError::TooMany(fields.len()));
        }
        for (index, field) in fields.iter().enumerate() {
            if fields[..index].contains(field) {
                return Err(ByError::Repeated(field.to_string()));
            }
        }
        Ok(Self(fields))
    }

    pub fn fields(&self) -> &[ByField] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Only `caller`: the breakdown is the per-caller table (as in call-site mode).
    pub fn is_caller_only(&self) -> bool {
        self.0 == [ByField::Caller]
    }

    /// The eBPF `BY_FIELDS` global.
    pub fn codes(&self) -> [u8; BY_FIELDS_MAX] {
        let mut codes = [field::NONE; BY_FIELDS_MAX];
        for (code, field) in codes.iter_mut().zip(&self.0) {
            *code = field.code();
        }
        codes
    }

    /// The names, as `--by` spells them.
    pub fn names(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }
}

/// `argN:log2` class `c` as the range of values it holds.
fn log2_range(class: u64) -> String {
    match class {
        0 => "0".into(),
        1 => "1".into(),
        64 => "[2^63, 2^64)".into(),
        c if c < 64 => format!("[{}, {})", 1u64 << (c - 1), 1u64 << c),
        other => format!("class {other}"),
    }
}

/// The number of an errno name (`ENOENT` → 2).
pub fn errno_number(name: &str) -> Option<u64> {
    ERRNO_NAMES
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(number, _)| *number)
}

/// `ENOENT` for 2, `ok` for 0, the number for errnos without a name here.
pub fn errno_name(errno: u64) -> String {
    if errno == 0 {
        return "ok".into();
    }
    ERRNO_NAMES
        .iter()
        .find(|(n, _)| *n == errno)
        .map_or_else(|| format!("errno {errno}"), |(_, name)| (*name).to_owned())
}

/// Linux's errno names (`asm-generic/errno*.h`), then the kernel-internal ones a function
/// can return before the syscall layer translates them.
const ERRNO_NAMES: &[(u64, &str)] = &[
    (1, "EPERM"),
    (2, "ENOENT"),
    (3, "ESRCH"),
    (4, "EINTR"),
    (5, "EIO"),
    (6, "ENXIO"),
    (7, "E2BIG"),
    (8, "ENOEXEC"),
    (9, "EBADF"),
    (10, "ECHILD"),
    (11, "EAGAIN"),
    (12, "ENOMEM"),
    (13, "EACCES"),
    (14, "EFAULT"),
    (15, "ENOTBLK"),
    (16, "EBUSY"),
    (17, "EEXIST"),
    (18, "EXDEV"),
    (19, "ENODEV"),
    (20, "ENOTDIR"),
    (21, "EISDIR"),
    (22, "EINVAL"),
    (23, "ENFILE"),
    (24, "EMFILE"),
    (25, "ENOTTY"),
    (26, "ETXTBSY"),
    (27, "EFBIG"),
    (28, "ENOSPC"),
    (29, "ESPIPE"),
    (30, "EROFS"),
    (31, "EMLINK"),
    (32, "EPIPE"),
    (33, "EDOM"),
    (34, "ERANGE"),
    (35, "EDEADLK"),
    (36, "ENAMETOOLONG"),
    (37, "ENOLCK"),
    (38, "ENOSYS"),
    (39, "ENOTEMPTY"),
    (40, "ELOOP"),
    (42, "ENOMSG"),
    (43, "EIDRM"),
    (44, "ECHRNG"),
    (45, "EL2NSYNC"),
    (46, "EL3HLT"),
    (47, "EL3RST"),
    (48, "ELNRNG"),
    (49, "EUNATCH"),
    (50, "ENOCSI"),
    (51, "EL2HLT"),
    (52, "EBADE"),
    (53, "EBADR"),
    (54, "EXFULL"),
    (55, "ENOANO"),
    (56, "EBADRQC"),
    (57, "EBADSLT"),
    (59, "EBFONT"),
    (60, "ENOSTR"),
    (61, "ENODATA"),
    (62, "ETIME"),
    (63, "ENOSR"),
    (64, "ENONET"),
    (65, "ENOPKG"),
    (66, "EREMOTE"),
    (67, "ENOLINK"),
    (68, "EADV"),
    (69, "ESRMNT"),
    (70, "ECOMM"),
    (71, "EPROTO"),
    (72, "EMULTIHOP"),
    (73, "EDOTDOT"),
    (74, "EBADMSG"),
    (75, "EOVERFLOW"),
    (76, "ENOTUNIQ"),
    (77, "EBADFD"),
    (78, "EREMCHG"),
    (79, "ELIBACC"),
    (80, "ELIBBAD"),
    (81, "ELIBSCN"),
    (82, "ELIBMAX"),
    (83, "ELIBEXEC"),
    (84, "EILSEQ"),
    (85, "ERESTART"),
    (86, "ESTRPIPE"),
    (87, "EUSERS"),
    (88, "ENOTSOCK"),
    (89, "EDESTADDRREQ"),
    (90, "EMSGSIZE"),
    (91, "EPROTOTYPE"),
    (92, "ENOPROTOOPT"),
    (93, "EPROTONOSUPPORT"),
    (94, "ESOCKTNOSUPPORT"),
    (95, "EOPNOTSUPP"),
    (96, "EPFNOSUPPORT"),
    (97, "EAFNOSUPPORT"),
    (98, "EADDRINUSE"),
    (99, "EADDRNOTAVAIL"),
    (100, "ENETDOWN"),
    (101, "ENETUNREACH"),
    (102, "ENETRESET"),
    (103, "ECONNABORTED"),
    (104, "ECONNRESET"),
    (105, "ENOBUFS"),
    (106, "EISCONN"),
    (107, "ENOTCONN"),
    (108, "ESHUTDOWN"),
    (109, "ETOOMANYREFS"),
    (110, "ETIMEDOUT"),
    (111, "ECONNREFUSED"),
    (112, "EHOSTDOWN"),
    (113, "EHOSTUNREACH"),
    (114, "EALREADY"),
    (115, "EINPROGRESS"),
    (116, "ESTALE"),
    (117, "EUCLEAN"),
    (118, "ENOTNAM"),
    (119, "ENAVAIL"),
    (120, "EISNAM"),
    (121, "EREMOTEIO"),
    (122, "EDQUOT"),
    (123, "ENOMEDIUM"),
    (124, "EMEDIUMTYPE"),
    (125, "ECANCELED"),
    (126, "ENOKEY"),
    (127, "EKEYEXPIRED"),
    (128, "EKEYREVOKED"),
    (129, "EKEYREJECTED"),
    (130, "EOWNERDEAD"),
    (131, "ENOTRECOVERABLE"),
    (132, "ERFKILL"),
    (133, "EHWPOISON"),
    (512, "ERESTARTSYS"),
    (513, "ERESTARTNOINTR"),
    (514, "ERESTARTNOHAND"),
    (515, "ENOIOCTLCMD"),
    (516, "ERESTART_RESTARTBLOCK"),
    (517, "EPROBE_DEFER"),
    (518, "EOPENSTALE"),
    (519, "ENOPARAM"),
    (524, "ENOTSUPP"),
    (529, "EIOCBQUEUED"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_and_print_as_spelled() {
        for text in [
            "arg0",
            "arg5",
            "arg2:log2",
            "ret",
            "errno",
            "caller",
            "cpu",
            "pid",
            "tid",
            "comm",
            "cgroup",
        ] {
            let field: ByField = text.parse().unwrap();
            assert_eq!(field.to_string(), text);
        }
        assert_eq!("arg2:log2".parse(), Ok(ByField::ArgLog2(2)));
    }

    #[test]
    fn bad_keys_are_one_line_naming_the_key() {
        let unknown = "size".parse::<ByField>().unwrap_err().to_string();
        assert!(unknown.starts_with("unknown --by key `size`"), "{unknown}");
        assert!(!unknown.contains('\n'));
        assert_eq!(
            "arg7".parse::<ByField>(),
            Err(ByError::ArgOutOfRange("arg7".into()))
        );
        assert_eq!(
            "arg".parse::<ByField>(),
            Err(ByError::Unknown("arg".into()))
        );
        assert_eq!(
            "arg1:log3".parse::<ByField>(),
            Err(ByError::Unknown("arg1:log3".into()))
        );
        assert_eq!(
            "arg-1".parse::<ByField>(),
            Err(ByError::Unknown("arg-1".into()))
        );
        assert_eq!(
            "arg300".parse::<ByField>(),
            Err(ByError::ArgOutOfRange("arg300".into()))
        );
    }

    #[test]
    fn a_key_combines_up_to_three_distinct_fields() {
        let four = vec![ByField::Cpu, ByField::Pid, ByField::Tid, ByField::Comm];
        assert_eq!(KeySpec::new(four), Err(ByError::TooMany(4)));
        assert_eq!(
            KeySpec::new(vec![ByField::Cpu, ByField::Cpu]),
            Err(ByError::Repeated("cpu".into()))
        );
        let spec = KeySpec::new(vec![ByField::ArgLog2(2), ByField::Errno]).unwrap();
        assert_eq!(spec.codes(), [field::ARG_LOG2 | 2, field::ERRNO, 0]);
        assert!(
            KeySpec::new(vec![ByField::Caller])
                .unwrap()
                .is_caller_only()
        );
    }

    #[test]
    fn values_read_as_their_meaning() {
        assert_eq!(ByField::ArgLog2(2).describe(13), "[4096, 8192)");
        assert_eq!(ByField::ArgLog2(2).describe(0), "0");
        assert_eq!(ByField::ArgLog2(2).describe(1), "1");
        assert_eq!(ByField::Errno.describe(2), "ENOENT");
        assert_eq!(ByField::Errno.describe(0), "ok");
        assert_eq!(ByField::Errno.describe(512), "ERESTARTSYS");
        assert_eq!(ByField::Errno.describe(999), "errno 999");
        assert_eq!(ByField::Ret.describe((-2i64) as u64), "-2");
        assert_eq!(ByField::Arg(2).describe(4096), "4096");
    }
}
