//! Just enough of the kernel audit netlink protocol to load syscall rules
//! without auditctl, which the busybox guest does not have.
//!
//! Layouts follow include/uapi/linux/audit.h and include/uapi/linux/netlink.h.
//! Everything is native-endian (x86_64: little-endian), as the kernel expects.
//! The byte encoding is kept apart from the socket so it can be unit-tested.

use std::fmt;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Netlink message types and flags (include/uapi/linux/netlink.h).
pub const NLMSG_ERROR: u16 = 2;
pub const NLMSG_DONE: u16 = 3;
pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_ACK: u16 = 0x4;
/// `struct nlmsghdr`: len u32, type u16, flags u16, seq u32, pid u32.
pub const NLMSG_HDRLEN: usize = 16;

/// Audit netlink message types.
pub const AUDIT_GET: u16 = 1000;
pub const AUDIT_SET: u16 = 1001;
pub const AUDIT_ADD_RULE: u16 = 1011;
pub const AUDIT_DEL_RULE: u16 = 1012;
pub const AUDIT_LIST_RULES: u16 = 1013;

/// `audit_status.mask` bit saying the `enabled` member is to be applied.
pub const AUDIT_STATUS_ENABLED: u32 = 0x1;
/// Size of `struct audit_status` in 6.x (11 u32s); older kernels read a prefix.
pub const AUDIT_STATUS_LEN: usize = 11 * 4;

/// The exit filter list: rules checked at every audited syscall exit.
pub const AUDIT_FILTER_EXIT: u32 = 0x04;
/// Rule action: generate a record when the rule matches.
pub const AUDIT_ALWAYS: u32 = 2;
/// Field types.
pub const AUDIT_UID: u32 = 1;
pub const AUDIT_ARCH: u32 = 11;
pub const AUDIT_FILTERKEY: u32 = 210;
/// Field operator `==` (goes in `fieldflags`).
pub const AUDIT_EQUAL: u32 = 0x4000_0000;
/// EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE, i.e. `-F arch=b64` on x86-64.
pub const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE, i.e. `-F arch=b64` on arm64.
pub const AUDIT_ARCH_AARCH64: u32 = 183 | 0x8000_0000 | 0x4000_0000;
/// This build's `-F arch=b64`: a rule naming another architecture never applies to a syscall
/// here (the walk still runs, but the syscall numbers would be another table's).
pub const AUDIT_ARCH_NATIVE: u32 = if cfg!(target_arch = "aarch64") {
    AUDIT_ARCH_AARCH64
} else {
    AUDIT_ARCH_X86_64
};

/// `mask` words: one bit per syscall number.
pub const AUDIT_BITMASK_SIZE: usize = 64;
pub const AUDIT_MAX_FIELDS: usize = 64;
/// The top `AUDIT_SYSCALL_CLASSES` bits of `mask` select syscall classes,
/// not syscalls, so a syscall number must stay below this.
pub const MAX_SYSCALL_NR: u32 = (AUDIT_BITMASK_SIZE * 32 - 16 - 1) as u32;
/// `struct audit_rule_data` without its trailing `buf[]`:
/// flags, action, field_count, mask[64], fields[64], values[64],
/// fieldflags[64], buflen.
pub const RULE_HEADER_LEN: usize = 4 * (3 + AUDIT_BITMASK_SIZE + 3 * AUDIT_MAX_FIELDS + 1);
/// Maximum filter key length the kernel accepts.
pub const AUDIT_MAX_KEY_LEN: usize = 256;

/// The filter key (`-k`) marking the rules this crate loads, so `clear`
/// removes exactly those and leaves anyone else's alone.
pub const HOTPROF_KEY: &str = "hotprof_workloads";
/// The uid of the first rule; each further rule uses the next uid.
pub const FIRST_UID: u32 = 1000;

/// Field types whose value is the length of a string stored in `buf`, in
/// field order (kernel/auditfilter.c, audit_data_to_entry).
const STRING_FIELDS: &[u32] = &[
    13,
    14,
    15,
    16,
    17, // AUDIT_SUBJ_{USER,ROLE,TYPE,SEN,CLR}
    19,
    20,
    21,
    22,
    23,  // AUDIT_OBJ_{USER,ROLE,TYPE,LEV_LOW,LEV_HIGH}
    105, // AUDIT_WATCH
    107, // AUDIT_DIR
    112, // AUDIT_EXE
    AUDIT_FILTERKEY,
];

/// One condition of a rule: `fields[i]`, `fieldflags[i]` and `values[i]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub kind: u32,
    pub op: u32,
    pub value: u32,
}

/// `struct audit_rule_data`. Only built by the constructors below, which
/// keep `fields` within AUDIT_MAX_FIELDS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    flags: u32,
    action: u32,
    mask: [u32; AUDIT_BITMASK_SIZE],
    fields: Vec<Field>,
    buf: Vec<u8>,
}

impl Rule {
    /// The rule `auditctl -a always,exit -F arch=b64 -S <syscall> -F uid=<uid>
    /// -k hotprof_workloads` would load.
    ///
    /// Why it looks like this: any exit rule makes the kernel run
    /// `__audit_filter_op` over the exit list on every syscall exit; a
    /// distinct uid per rule keeps the kernel from rejecting duplicates
    /// (EEXIST), and since the uids belong to nobody in the guest the rules
    /// never match and generate no records.
    pub fn hotprof(syscall: u32, uid: u32) -> Self {
        let mut mask = [0u32; AUDIT_BITMASK_SIZE];
        // Callers keep `syscall` <= MAX_SYSCALL_NR; the modulo only keeps an
        // out-of-range number from panicking.
        let word = (syscall / 32) as usize % AUDIT_BITMASK_SIZE;
        mask[word] |= 1 << (syscall % 32);
        let field = |kind, value| Field {
            kind,
            op: AUDIT_EQUAL,
            value,
        };
        Self {
            flags: AUDIT_FILTER_EXIT,
            action: AUDIT_ALWAYS,
            mask,
            fields: vec![
                field(AUDIT_ARCH, AUDIT_ARCH_NATIVE),
                field(AUDIT_UID, uid),
                field(AUDIT_FILTERKEY, HOTPROF_KEY.len() as u32),
            ],
            buf: HOTPROF_KEY.as_bytes().to_vec(),
        }
    }

    /// Serialises to the bytes of `struct audit_rule_data` plus `buf`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(RULE_HEADER_LEN + self.buf.len());
        let mut put = |v: u32| out.extend_from_slice(&v.to_ne_bytes());
        put(self.flags);
        put(self.action);
        put(self.fields.len() as u32);
        self.mask.iter().for_each(|&word| put(word));
        let columns: [fn(&Field) -> u32; 3] = [|f| f.kind, |f| f.value, |f| f.op];
        for column in columns {
            for i in 0..AUDIT_MAX_FIELDS {
                put(self.fields.get(i).map_or(0, column));
            }
        }
        put(self.buf.len() as u32);
        out.extend_from_slice(&self.buf);
        out
    }

    /// Parses `struct audit_rule_data` as the kernel sends it for
    /// AUDIT_LIST_RULES.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < RULE_HEADER_LEN {
            return Err(format!(
                "rule data too short: {} < {RULE_HEADER_LEN} bytes",
                bytes.len()
            ));
        }
        let word = |index: usize| read_u32(bytes, index * 4);
        let field_count = word(2) as usize;
        if field_count > AUDIT_MAX_FIELDS {
            return Err(format!("rule data has {field_count} fields"));
        }
        let fields_at = 3 + AUDIT_BITMASK_SIZE;
        let values_at = fields_at + AUDIT_MAX_FIELDS;
        let flags_at = values_at + AUDIT_MAX_FIELDS;
        let buflen = word(flags_at + AUDIT_MAX_FIELDS) as usize;
        let buf = bytes
            .get(RULE_HEADER_LEN..RULE_HEADER_LEN.saturating_add(buflen))
            .ok_or_else(|| format!("rule data buflen {buflen} exceeds the message"))?;
        Ok(Self {
            flags: word(0),
            action: word(1),
            mask: std::array::from_fn(|i| word(3 + i)),
            fields: (0..field_count)
                .map(|i| Field {
                    kind: word(fields_at + i),
                    value: word(values_at + i),
                    op: word(flags_at + i),
                })
                .collect(),
            buf: buf.to_vec(),
        })
    }

    pub fn fields(&self) -> &[Field] {
        &self.fields
    }

    /// The filter key (`-k`), if the rule has one.
    pub fn key(&self) -> Option<&[u8]> {
        let mut offset = 0usize;
        for field in &self.fields {
            if !STRING_FIELDS.contains(&field.kind) {
                continue;
            }
            let end = offset.checked_add(field.value as usize)?;
            let text = self.buf.get(offset..end)?;
            if field.kind == AUDIT_FILTERKEY {
                return Some(text);
            }
            offset = end;
        }
        None
    }

    /// Whether this crate loaded the rule (it carries [`HOTPROF_KEY`]).
    pub fn is_hotprof(&self) -> bool {
        self.key() == Some(HOTPROF_KEY.as_bytes())
    }

    /// The value of the first `kind` field.
    pub fn field_value(&self, kind: u32) -> Option<u32> {
        self.fields.iter().find(|f| f.kind == kind).map(|f| f.value)
    }
}

/// The parts of `struct audit_status` worth reporting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub enabled: u32,
    pub failure: u32,
    pub pid: u32,
    pub backlog_limit: u32,
    pub lost: u32,
    pub backlog: u32,
}

impl Status {
    /// Parses the payload of an AUDIT_GET reply.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        // mask, enabled, failure, pid, rate_limit, backlog_limit, lost, backlog
        if bytes.len() < 8 * 4 {
            return Err(format!("audit status too short: {} bytes", bytes.len()));
        }
        let word = |index: usize| read_u32(bytes, index * 4);
        Ok(Self {
            enabled: word(1),
            failure: word(2),
            pid: word(3),
            backlog_limit: word(5),
            lost: word(6),
            backlog: word(7),
        })
    }
}

/// The AUDIT_SET payload that changes only `enabled`.
pub fn encode_set_enabled(enabled: u32) -> Vec<u8> {
    let mut status = vec![0u8; AUDIT_STATUS_LEN];
    status[0..4].copy_from_slice(&AUDIT_STATUS_ENABLED.to_ne_bytes());
    status[4..8].copy_from_slice(&enabled.to_ne_bytes());
    status
}

/// A netlink message: `struct nlmsghdr` followed by the payload, padded to
/// four bytes (NLMSG_ALIGN). Our port id is left 0 for the kernel to fill.
pub fn encode_message(kind: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let len = NLMSG_HDRLEN + payload.len();
    let mut out = Vec::with_capacity(align4(len));
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&seq.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(payload);
    out.resize(align4(len), 0);
    out
}

/// One received netlink message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    pub payload: Vec<u8>,
}

/// Splits a received datagram into its netlink messages.
pub fn decode_messages(mut datagram: &[u8]) -> Result<Vec<Message>, String> {
    let mut messages = Vec::new();
    while datagram.len() >= NLMSG_HDRLEN {
        let len = read_u32(datagram, 0) as usize;
        if len < NLMSG_HDRLEN || len > datagram.len() {
            return Err(format!(
                "bad netlink message length {len} ({} bytes left)",
                datagram.len()
            ));
        }
        messages.push(Message {
            kind: u16::from_ne_bytes([datagram[4], datagram[5]]),
            flags: u16::from_ne_bytes([datagram[6], datagram[7]]),
            seq: read_u32(datagram, 8),
            payload: datagram[NLMSG_HDRLEN..len].to_vec(),
        });
        datagram = &datagram[align4(len).min(datagram.len())..];
    }
    Ok(messages)
}

/// The `error` of an NLMSG_ERROR payload (`struct nlmsgerr`): 0 for an ACK,
/// otherwise a negative errno.
pub fn ack_error(payload: &[u8]) -> Result<i32, String> {
    payload
        .get(0..4)
        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| format!("NLMSG_ERROR payload too short: {} bytes", payload.len()))
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn align4(len: usize) -> usize {
    (len + 3) & !3
}

/// Why a request failed.
#[derive(Debug)]
pub enum RequestError {
    /// The kernel answered with this (positive) errno.
    Kernel(i32),
    /// A socket call failed.
    Io(&'static str, io::Error),
    /// The reply made no sense, or never came.
    Protocol(String),
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Kernel(errno) => write!(
                f,
                "kernel replied {} ({})",
                errno_name(*errno),
                io::Error::from_raw_os_error(*errno)
            ),
            Self::Io(what, err) => write!(f, "{what}: {err}"),
            Self::Protocol(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for RequestError {}

/// The symbolic name of the errnos the audit code is likely to return.
pub fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOBUFS => "ENOBUFS",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        _ => return format!("errno {errno}"),
    };
    name.to_owned()
}

/// How long to wait for the kernel's answer before giving up.
// A plain integer: musl's `libc::time_t` is deprecated (it is to change to 64 bits).
const REPLY_TIMEOUT_SECS: u8 = 5;
/// Audit replies are at most MAX_AUDIT_MESSAGE_LENGTH (8970) bytes.
const RECV_BUFFER_LEN: usize = 64 * 1024;

/// Whether a reply handler wants more messages.
enum Flow {
    More,
    Done,
}

/// A NETLINK_AUDIT socket talking to the kernel.
pub struct AuditSocket {
    fd: OwnedFd,
    next_seq: u32,
    buffer: Vec<u8>,
}

impl AuditSocket {
    pub fn open() -> Result<Self, RequestError> {
        // SAFETY: socket(2) takes only integers and touches no memory of ours; the result is
        // checked below.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_AUDIT,
            )
        };
        if raw < 0 {
            return Err(RequestError::Io(
                "socket(AF_NETLINK, NETLINK_AUDIT)",
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: `raw` is a freshly created descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        set_receive_timeout(&fd)?;
        Ok(Self {
            fd,
            next_seq: 1,
            buffer: vec![0; RECV_BUFFER_LEN],
        })
    }

    /// AUDIT_GET: the kernel's audit status.
    pub fn status(&mut self) -> Result<Status, RequestError> {
        let mut status = None;
        self.transact(AUDIT_GET, NLM_F_REQUEST, &[], |msg| {
            if msg.kind != AUDIT_GET {
                return Ok(Flow::More);
            }
            status = Some(Status::decode(&msg.payload).map_err(RequestError::Protocol)?);
            Ok(Flow::Done)
        })?;
        status.ok_or_else(|| RequestError::Protocol("no AUDIT_GET reply".into()))
    }

    /// AUDIT_SET with only `enabled` changed.
    pub fn set_enabled(&mut self, enabled: u32) -> Result<(), RequestError> {
        self.command(AUDIT_SET, &encode_set_enabled(enabled))
    }

    pub fn add_rule(&mut self, rule: &Rule) -> Result<(), RequestError> {
        self.command(AUDIT_ADD_RULE, &rule.encode())
    }

    /// Deletes the loaded rule equal to `rule` (as listed by [`Self::list_rules`]).
    pub fn delete_rule(&mut self, rule: &Rule) -> Result<(), RequestError> {
        self.command(AUDIT_DEL_RULE, &rule.encode())
    }

    /// AUDIT_LIST_RULES: every loaded rule, of every filter list.
    pub fn list_rules(&mut self) -> Result<Vec<Rule>, RequestError> {
        let mut rules = Vec::new();
        self.transact(AUDIT_LIST_RULES, NLM_F_REQUEST, &[], |msg| match msg.kind {
            AUDIT_LIST_RULES => {
                rules.push(Rule::decode(&msg.payload).map_err(RequestError::Protocol)?);
                Ok(Flow::More)
            }
            NLMSG_DONE => Ok(Flow::Done),
            _ => Ok(Flow::More),
        })?;
        Ok(rules)
    }

    /// A request whose only answer is the ACK.
    fn command(&mut self, kind: u16, payload: &[u8]) -> Result<(), RequestError> {
        self.transact(kind, NLM_F_REQUEST | NLM_F_ACK, payload, |msg| {
            Ok(if msg.kind == NLMSG_ERROR {
                Flow::Done
            } else {
                Flow::More
            })
        })
    }

    /// Sends one request and feeds its replies to `handle` until it is done.
    /// An NLMSG_ERROR carrying an errno ends the exchange with that error.
    fn transact(
        &mut self,
        kind: u16,
        flags: u16,
        payload: &[u8],
        mut handle: impl FnMut(&Message) -> Result<Flow, RequestError>,
    ) -> Result<(), RequestError> {
        let seq = self.send(kind, flags, payload)?;
        loop {
            for msg in self.receive()? {
                if msg.seq != seq {
                    continue;
                }
                if msg.kind == NLMSG_ERROR {
                    let error = ack_error(&msg.payload).map_err(RequestError::Protocol)?;
                    if error != 0 {
                        return Err(RequestError::Kernel(-error));
                    }
                }
                if let Flow::Done = handle(&msg)? {
                    return Ok(());
                }
            }
        }
    }

    fn send(&mut self, kind: u16, flags: u16, payload: &[u8]) -> Result<u32, RequestError> {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let message = encode_message(kind, flags, seq, payload);
        // SAFETY: an all-zero sockaddr_nl is valid; it addresses the kernel (pid 0).
        let mut kernel: libc::sockaddr_nl = unsafe { mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: the message and address buffers are valid for the lengths given.
        let sent = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                message.as_ptr().cast(),
                message.len(),
                0,
                (&raw const kernel).cast(),
                mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(RequestError::Io(
                "sendto(NETLINK_AUDIT)",
                io::Error::last_os_error(),
            ));
        }
        Ok(seq)
    }

    fn receive(&mut self) -> Result<Vec<Message>, RequestError> {
        loop {
            // SAFETY: `buffer` is valid and writable for its whole length.
            let got = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buffer.as_mut_ptr().cast(),
                    self.buffer.len(),
                    0,
                )
            };
            if got >= 0 {
                return decode_messages(&self.buffer[..got as usize])
                    .map_err(RequestError::Protocol);
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => {
                    return Err(RequestError::Protocol(format!(
                        "no reply from the kernel within {REPLY_TIMEOUT_SECS} s"
                    )));
                }
                _ => return Err(RequestError::Io("recv(NETLINK_AUDIT)", err)),
            }
        }
    }
}

/// Bounds every wait for a reply so a silent kernel cannot hang a test.
fn set_receive_timeout(fd: &OwnedFd) -> Result<(), RequestError> {
    let timeout = libc::timeval {
        tv_sec: REPLY_TIMEOUT_SECS.into(),
        tv_usec: 0,
    };
    // SAFETY: `timeout` is a valid timeval of the size given.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const timeout).cast(),
            mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(RequestError::Io(
            "setsockopt(SO_RCVTIMEO)",
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(bytes: &[u8], index: usize) -> u32 {
        read_u32(bytes, index * 4)
    }

    #[test]
    fn header_length_matches_the_uapi_struct() {
        assert_eq!(RULE_HEADER_LEN, 1040);
        assert_eq!(AUDIT_ARCH_X86_64, 0xC000_003E);
        assert_eq!(AUDIT_ARCH_AARCH64, 0xC000_00B7);
        assert_eq!(MAX_SYSCALL_NR, 2031);
    }

    #[test]
    fn hotprof_rule_bytes() {
        let syscall = libc::SYS_acct as u32; // 163 on x86_64
        let bytes = Rule::hotprof(syscall, 1003).encode();
        assert_eq!(bytes.len(), 1040 + HOTPROF_KEY.len());
        assert_eq!(word(&bytes, 0), AUDIT_FILTER_EXIT);
        assert_eq!(word(&bytes, 1), AUDIT_ALWAYS);
        assert_eq!(word(&bytes, 2), 3, "field_count");
        // mask[]: only bit 163 = word 5, bit 3.
        for i in 0..64 {
            let expected = if i == 5 { 1 << 3 } else { 0 };
            assert_eq!(word(&bytes, 3 + i), expected, "mask[{i}]");
        }
        // fields[] at word 67, values[] at 131, fieldflags[] at 195.
        assert_eq!(&bytes[268..280], &[11, 0, 0, 0, 1, 0, 0, 0, 210, 0, 0, 0]);
        assert_eq!(word(&bytes, 70), 0, "unused fields are zero");
        assert_eq!(word(&bytes, 131), 0xC000_003E);
        assert_eq!(word(&bytes, 132), 1003);
        assert_eq!(word(&bytes, 133), HOTPROF_KEY.len() as u32);
        for i in 195..198 {
            assert_eq!(&bytes[i * 4..i * 4 + 4], &[0, 0, 0, 0x40]);
        }
        assert_eq!(word(&bytes, 198), 0);
        // buflen, then the key.
        assert_eq!(word(&bytes, 259), HOTPROF_KEY.len() as u32);
        assert_eq!(&bytes[1040..], HOTPROF_KEY.as_bytes());
    }

    #[test]
    fn rules_round_trip_and_are_recognised() {
        let rule = Rule::hotprof(163, 1000);
        let decoded = Rule::decode(&rule.encode()).unwrap();
        assert_eq!(decoded, rule);
        assert!(decoded.is_hotprof());
        assert_eq!(decoded.field_value(AUDIT_UID), Some(1000));
        assert_eq!(decoded.fields().len(), 3);
    }

    #[test]
    fn key_is_found_after_other_string_fields() {
        let mut rule = Rule::hotprof(2, 1000);
        // Prepend an AUDIT_DIR string field ("/tmp"), as auditctl -F dir=/tmp would.
        rule.fields.insert(
            0,
            Field {
                kind: 107,
                op: AUDIT_EQUAL,
                value: 4,
            },
        );
        rule.buf.splice(0..0, *b"/tmp");
        assert_eq!(rule.key(), Some(HOTPROF_KEY.as_bytes()));
        rule.buf.truncate(6);
        assert_eq!(rule.key(), None, "a truncated buf has no key");
        let foreign = Rule::decode(&{
            let mut r = Rule::hotprof(2, 1000);
            r.buf = b"other_key_here_x".to_vec();
            r.fields[2].value = 16;
            r.encode()
        })
        .unwrap();
        assert!(!foreign.is_hotprof());
    }

    #[test]
    fn decode_rejects_garbage() {
        assert!(Rule::decode(&[0; 100]).is_err());
        let mut bytes = Rule::hotprof(1, 1000).encode();
        bytes[8..12].copy_from_slice(&65u32.to_ne_bytes());
        assert!(Rule::decode(&bytes).is_err(), "too many fields");
        let mut bytes = Rule::hotprof(1, 1000).encode();
        bytes.truncate(1045);
        assert!(Rule::decode(&bytes).is_err(), "buf shorter than buflen");
    }

    #[test]
    fn set_enabled_payload() {
        let payload = encode_set_enabled(1);
        assert_eq!(payload.len(), 44);
        assert_eq!(&payload[..8], &[1, 0, 0, 0, 1, 0, 0, 0]);
        assert!(payload[8..].iter().all(|&b| b == 0));
    }

    #[test]
    fn status_decodes() {
        let words: Vec<u8> = (0u32..11).flat_map(|w| w.to_ne_bytes()).collect();
        let status = Status::decode(&words).unwrap();
        assert_eq!(
            status,
            Status {
                enabled: 1,
                failure: 2,
                pid: 3,
                backlog_limit: 5,
                lost: 6,
                backlog: 7
            }
        );
        assert!(Status::decode(&words[..20]).is_err());
    }

    #[test]
    fn message_framing() {
        let msg = encode_message(AUDIT_SET, NLM_F_REQUEST | NLM_F_ACK, 7, &[1, 2, 3, 4, 5]);
        assert_eq!(
            msg,
            [
                21, 0, 0, 0, 0xe9, 0x03, 5, 0, 7, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 0, 0, 0
            ]
        );
    }

    #[test]
    fn datagram_with_two_messages() {
        let mut datagram = encode_message(AUDIT_LIST_RULES, 2, 9, &[1, 2, 3]);
        datagram.extend(encode_message(NLMSG_DONE, 2, 9, &[0; 4]));
        let messages = decode_messages(&datagram).unwrap();
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0].kind, AUDIT_LIST_RULES);
        assert_eq!(messages[0].payload, [1, 2, 3]);
        assert_eq!(messages[1].kind, NLMSG_DONE);
        assert_eq!(messages[1].seq, 9);
        let mut bad = datagram.clone();
        bad[0] = 200;
        assert!(decode_messages(&bad).is_err());
    }

    #[test]
    fn ack_errors() {
        let ack = (-17i32).to_ne_bytes();
        assert_eq!(ack_error(&ack), Ok(-17));
        assert_eq!(ack_error(&0i32.to_ne_bytes()), Ok(0));
        assert!(ack_error(&[1, 2]).is_err());
        let text = RequestError::Kernel(libc::EEXIST).to_string();
        assert!(
            text.starts_with("kernel replied EEXIST (File exists"),
            "{text}"
        );
        assert_eq!(errno_name(4095), "errno 4095");
    }
}
