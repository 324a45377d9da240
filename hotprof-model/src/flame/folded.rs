//! Aggregated stacks → Brendan Gregg's folded format (`frame;frame;frame WEIGHT`), and back.
//!
//! # Convention
//!
//! A folded line is, root first (the order inferno and `flamegraph.pl` expect):
//!
//! ```text
//! comm;user_root;…;user_leaf;kernel_root_[k];…;kernel_leaf_[k] WEIGHT
//! ```
//!
//! Kernel frames carry perf's `_[k]` suffix (what `stackcollapse-perf.pl --kernel` and
//! `inferno-collapse-perf --kernel` emit). Why: the same name can be a user and a kernel
//! function (`memcpy`), and the suffix keeps them apart when stacks merge; inferno's
//! `perl`/`java`/`js` palettes paint `_[k]` frames orange, and inferno strips the suffix from
//! labels and tooltips, so the SVG still reads `vfs_read`; and a name ending in `]` can never
//! be mistaken for a sample count. User frames and the `comm` root frame carry no suffix.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io::{self, Write};

/// One aggregated stack as the eBPF side reports it: per distinct (kernel stack id, user stack
/// id, pid), the summed latency and the number of calls (or, for `hotprof sample`, samples).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackRecord {
    /// Kernel return addresses, leaf first, as `bpf_get_stackid` stores them. A 0 ends the
    /// stack (the unused tail of a `STACK_TRACE` map value).
    pub kernel: Vec<u64>,
    /// User return addresses, leaf first (`BPF_F_USER_STACK`); empty when not captured.
    pub user: Vec<u64>,
    /// Task name (`bpf_get_current_comm`), the root frame.
    pub comm: String,
    /// Process id (tgid, not a thread id): user addresses are symbolized in its address space.
    pub pid: u32,
    /// Summed latency of the calls with this stack, in nanoseconds.
    pub total_ns: u64,
    /// Number of calls (or samples) with this stack.
    pub count: u64,
    /// A kernel frame below the last address that no address names: the syscall of a
    /// `--syscall` run (`getpid [syscall]`), whose stacks end in the syscall entry code.
    pub leaf: Option<String>,
}

/// What a folded line's weight — and so a frame's width — measures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Weight {
    /// Summed latency in ns: wide frames are where the time went.
    #[default]
    LatencyNs,
    /// Number of calls (or samples, for on-CPU sampling).
    Count,
}

impl Weight {
    /// The unit inferno prints in tooltips: `ns` or `calls`.
    pub fn count_name(self) -> &'static str {
        match self {
            Weight::LatencyNs => "ns",
            Weight::Count => "calls",
        }
    }

    fn of(self, record: &StackRecord) -> u64 {
        match self {
            Weight::LatencyNs => record.total_ns,
            Weight::Count => record.count,
        }
    }
}

/// Names the frames of a stack. [`fold`] takes it as a trait so it stays pure: the real
/// implementation is [`super::Symbols`] (kallsyms + blazesym), tests pass a table.
pub trait FrameNames {
    /// The name of one kernel address (`vfs_read`, `ext4_file_read_iter [ext4]`, `0xffff…`).
    fn kernel_frame(&self, address: u64) -> String;
    /// One name per user address of `pid`, in the same order; never fails (`[unknown]`).
    fn user_frames(&self, pid: u32, addresses: &[u64]) -> Vec<String>;
}

/// The kernel-frame suffix of the folded convention (see the module docs).
pub const KERNEL_SUFFIX: &str = "_[k]";

/// Folds records into `(stack, weight)` lines, root first (see the module docs for the
/// convention), merging identical stacks and summing their weights (saturating: a u64 of ns is
/// 584 years). Stacks of weight 0 are dropped: they would draw nothing. The result is sorted by
/// stack, so the output is deterministic whatever order the BPF maps were read in.
pub fn fold(records: &[StackRecord], weight: Weight, names: &dyn FrameNames) -> Vec<(String, u64)> {
    let records: Vec<&StackRecord> = records
        .iter()
        .filter(|record| weight.of(record) > 0)
        .collect();
    let user_names = user_names(&records, names);
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for record in records {
        let kernel = until_zero(&record.kernel);
        let user = until_zero(&record.user);

        let mut stack = sanitize_frame(&record.comm);
        // User frames root first, then the kernel ones: the kernel was entered from user space.
        for address in user.iter().rev() {
            stack.push(';');
            stack.push_str(&user_names[&(record.pid, *address)]);
        }
        for &address in kernel.iter().rev() {
            stack.push(';');
            stack.push_str(&sanitize_frame(&names.kernel_frame(address)));
            stack.push_str(KERNEL_SUFFIX);
        }
        if let Some(leaf) = &record.leaf {
            stack.push(';');
            stack.push_str(&sanitize_frame(leaf));
            stack.push_str(KERNEL_SUFFIX);
        }
        let total = merged.entry(stack).or_insert(0);
        *total = total.saturating_add(weight.of(record));
    }
    merged.into_iter().collect()
}

/// Sanitized names of every user address, asked for once per pid with all of that pid's
/// distinct addresses: one pass over a process's maps instead of one per stack.
fn user_names(records: &[&StackRecord], names: &dyn FrameNames) -> HashMap<(u32, u64), String> {
    let mut by_pid: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for record in records {
        by_pid
            .entry(record.pid)
            .or_default()
            .extend_from_slice(until_zero(&record.user));
    }
    let mut out = HashMap::new();
    for (pid, mut addresses) in by_pid {
        addresses.sort_unstable();
        addresses.dedup();
        if addresses.is_empty() {
            continue;
        }
        let frames = names.user_frames(pid, &addresses);
        for (index, address) in addresses.into_iter().enumerate() {
            let frame = frames.get(index).map_or(super::UNKNOWN, String::as_str);
            out.insert((pid, address), sanitize_frame(frame));
        }
    }
    out
}

/// Merges lines with the same stack (summing, saturating), drops weight-0 lines and sorts by
/// stack: the canonical form [`fold`] produces, for input read back with [`parse_folded`].
///
/// A sort and one pass rather than a map keyed by stack: the same result, markedly faster for
/// a million long stacks (`cargo xtask bench`'s flamegraph section).
pub fn merge_folded(folded: &[(String, u64)]) -> Vec<(String, u64)> {
    merge_folded_owned(
        folded
            .iter()
            .filter(|(_, weight)| *weight > 0)
            .cloned()
            .collect(),
    )
}

/// [`merge_folded`] in place, for input that is not needed afterwards: no second copy of a
/// million stacks.
pub fn merge_folded_owned(mut folded: Vec<(String, u64)>) -> Vec<(String, u64)> {
    folded.retain(|(_, weight)| *weight > 0);
    // Equal stacks are summed, so their relative order does not matter.
    folded.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    folded.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            kept.1 = kept.1.saturating_add(later.1);
        }
        same
    });
    folded
}

/// The frames of a stack array up to its first 0 (unused map slots are zeroed).
fn until_zero(frames: &[u64]) -> &[u64] {
    let end = frames
        .iter()
        .position(|&address| address == 0)
        .unwrap_or(frames.len());
    &frames[..end]
}

/// Makes a name safe as one folded frame: `;` (the frame separator) becomes `:`, control
/// characters and other whitespace become spaces, runs of spaces collapse, and the ends are
/// trimmed (inferno trims lines). A name whose last word is a number (`worker 2`) gets that
/// space replaced by `_`, since inferno would read `… 2 100` as a two-column differential
/// line. An empty name becomes `[unknown]`.
pub fn sanitize_frame(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let c = match c {
            ';' => ':',
            c if c.is_whitespace() || c.is_control() => ' ',
            c => c,
        };
        if c == ' ' && (out.is_empty() || out.ends_with(' ')) {
            continue;
        }
        out.push(c);
    }
    while out.ends_with(' ') {
        out.pop();
    }
    if out.is_empty() {
        return super::UNKNOWN.to_string();
    }
    if let Some((head, last)) = out.rsplit_once(' ')
        && is_count(last)
    {
        out = format!("{head}_{last}");
    }
    out
}

/// Whether inferno would read this word as a sample count (`12`, `12.5`).
fn is_count(word: &str) -> bool {
    !word.is_empty()
        && word.bytes().any(|b| b.is_ascii_digit())
        && word.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && word.bytes().filter(|&b| b == b'.').count() <= 1
}

/// Why a folded line was refused; its `Display` is one line naming the line number.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("folded input line {line}: {reason}")]
pub struct FoldedError {
    /// 1-based line number.
    pub line: usize,
    pub reason: FoldedReason,
}

/// What is wrong with a folded line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FoldedReason {
    NotUtf8,
    /// No space-separated weight after the stack.
    MissingWeight,
    /// The weight is not a whole non-negative number (the offending text, shortened).
    BadWeight(String),
    /// The weight does not fit in a u64.
    WeightTooLarge,
    EmptyStack,
    /// `a;;b`, or a stack starting or ending with `;`.
    EmptyFrame,
    /// The stack ends in ` <number>`: inferno would take it for a second weight column.
    AmbiguousNumber,
    /// A control character other than a tab (a stray `\r`, an escape sequence…).
    ControlCharacter,
}

impl fmt::Display for FoldedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotUtf8 => f.write_str("not valid UTF-8"),
            Self::MissingWeight => f.write_str("no weight: expected 'frame;frame;... WEIGHT'"),
            Self::BadWeight(text) => {
                write!(f, "weight '{text}' is not a whole non-negative number")
            }
            Self::WeightTooLarge => f.write_str("weight does not fit in 64 bits"),
            Self::EmptyStack => f.write_str("empty stack before the weight"),
            Self::EmptyFrame => {
                f.write_str("empty frame name (';;', or ';' at an end of the stack)")
            }
            Self::AmbiguousNumber => f.write_str(
                "stack ends in a space and a number, which reads as a second weight column",
            ),
            Self::ControlCharacter => f.write_str("control character in the stack"),
        }
    }
}

/// Parses folded stacks (`frame;frame;frame WEIGHT` per line, weight after the last space), as
/// written by [`write_folded`], `stackcollapse-*.pl` or `inferno-collapse-*`. Blank lines are
/// skipped; surrounding whitespace and `\r\n` endings are tolerated. Lines are returned in input
/// order, unmerged (see [`merge_folded`]). Anything else is an error naming the first bad line,
/// because a silently skipped line would make the flame graph's total disagree with the
/// recording's.
pub fn parse_folded(data: &[u8]) -> Result<Vec<(String, u64)>, FoldedError> {
    Ok(parse_folded_lines(data)?
        .into_iter()
        .map(|line| (line.stack.to_string(), line.weight))
        .collect())
}

/// One line of folded input, borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FoldedLine<'a> {
    /// The stack, root first, checked by [`check_stack`].
    pub stack: &'a str,
    pub weight: u64,
    /// The line itself when it is exactly `STACK WEIGHT` (one space, no leading zero), so a
    /// renderer can hand it on without building a copy.
    pub canonical: Option<&'a str>,
}

/// [`parse_folded`] without copying: every line borrows from `data`. For a million-line file
/// that is one copy of the stacks in memory, not two.
pub fn parse_folded_lines(data: &[u8]) -> Result<Vec<FoldedLine<'_>>, FoldedError> {
    let mut out = Vec::new();
    for_each_line(data, |line| {
        out.push(line.folded());
        Ok(())
    })?;
    Ok(out)
}

/// Folded input checked for drawing, as `inferno-flamegraph` holds it: one trimmed line each,
/// borrowed from the input, weight-0 lines dropped, unmerged (inferno sums the weights of equal
/// stacks that it reads one after another, so sorted duplicates draw as if merged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoldedText<'a> {
    /// The lines, in input order, as inferno reads them: `STACK WEIGHT` with the surrounding
    /// whitespace trimmed (extra spaces before the weight and leading zeros are left as they
    /// are: inferno reads them as hotprof does). `&str`s, as inferno holds them: sorting
    /// 12-byte offsets into the input instead took a fifth longer (an addition and a bounds
    /// check in every comparison).
    pub lines: Vec<&'a str>,
    /// The sum of the weights; `None` if it does not fit in a u64.
    pub total: Option<u64>,
    /// No stack has a space or a tab, the only bytes allowed in a stack that sort below the
    /// space before the weight: sorting the lines as text then sorts them by stack, equal
    /// stacks next to each other. With one, the line `a;b 5` sorts after `a;b !c 1` (`!` is
    /// below `5`) though its stack sorts before: such input is merged and rebuilt first
    /// ([`FoldedText::folded_lines`]).
    pub plain: bool,
}

impl<'a> FoldedText<'a> {
    /// The lines as [`FoldedLine`]s (for input that is not [`plain`](Self::plain)).
    pub fn folded_lines(&self) -> Vec<FoldedLine<'a>> {
        self.lines
            .iter()
            .map(|text| {
                parse_line(text.as_bytes())
                    .ok()
                    .flatten()
                    .expect("a line of FoldedText parses again")
                    .folded()
            })
            .collect()
    }
}

/// [`parse_folded_lines`] for drawing: only the trimmed lines are kept (16 bytes a line, as
/// inferno keeps them, instead of a [`FoldedLine`]'s 40), and the weights are summed here.
pub fn parse_folded_text(data: &[u8]) -> Result<FoldedText<'_>, FoldedError> {
    let mut lines = Vec::new();
    let mut total = Some(0u64);
    let mut plain = true;
    for_each_line(data, |line| {
        if line.weight > 0 {
            lines.push(line.text);
            total = total.and_then(|total| total.checked_add(line.weight));
            plain &= line.plain;
        }
        Ok(())
    })?;
    Ok(FoldedText {
        lines,
        total,
        plain,
    })
}

/// One checked line of folded input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ParsedLine<'a> {
    /// The line, trimmed.
    text: &'a str,
    /// The stack, trimmed.
    stack: &'a str,
    weight: u64,
    weight_text: &'a str,
    /// The stack has no space and no tab (see [`FoldedText::plain`]).
    plain: bool,
}

impl<'a> ParsedLine<'a> {
    fn folded(self) -> FoldedLine<'a> {
        let canonical = (self.stack.len() + 1 + self.weight_text.len() == self.text.len()
            && (self.weight_text == "0" || !self.weight_text.starts_with('0')))
        .then_some(self.text);
        FoldedLine {
            stack: self.stack,
            weight: self.weight,
            canonical,
        }
    }
}

/// Calls `each` with every non-blank line of `data`, in order; stops at the first bad line.
fn for_each_line<'a>(
    data: &'a [u8],
    mut each: impl FnMut(ParsedLine<'a>) -> Result<(), FoldedError>,
) -> Result<(), FoldedError> {
    // The line ends, found with memchr (`split` on a byte closure looks at one byte at a time),
    // then the end of the data: the same lines as `data.split(|&b| b == b'\n')`.
    let ends = memchr::memchr_iter(b'\n', data).chain(std::iter::once(data.len()));
    let mut start = 0;
    for (index, end) in ends.enumerate() {
        let raw = &data[start..end];
        start = end + 1;
        match parse_line(raw) {
            Ok(Some(parsed)) => each(parsed)?,
            Ok(None) => {}
            Err(reason) => {
                return Err(FoldedError {
                    line: index + 1,
                    reason,
                });
            }
        }
    }
    Ok(())
}

/// Parses one line (without its `\n`): `None` for a blank one.
fn parse_line(raw: &[u8]) -> Result<Option<ParsedLine<'_>>, FoldedReason> {
    let text = trim_ascii_whitespace(raw);
    // Fast path, nearly every line: printable ASCII, checked together with the stack in
    // `scan_stack`'s one vectorized pass. Anything else takes the general path, whose verdicts
    // these are (`parse_line_matches_the_general_path` pins that). `text` is trimmed, so a
    // space in it has a non-space before it.
    if let Some(space) = text.iter().rposition(|&b| b == b' ') {
        let weight_bytes = &text[space + 1..];
        let mut stack_end = space;
        while text[stack_end - 1] == b' ' {
            stack_end -= 1;
        }
        let scan = scan_stack(&text[..stack_end]);
        if scan.printable && weight_bytes.iter().all(u8::is_ascii_digit) {
            // Printable ASCII, spaces and digits: valid UTF-8.
            let text = std::str::from_utf8(text).map_err(|_| FoldedReason::NotUtf8)?;
            let stack = &text[..stack_end];
            let weight_text = &text[space + 1..];
            let weight = parse_weight(weight_text)?;
            if scan.space {
                check_stack(stack)?;
            } else if scan.double_separator || stack.starts_with(';') || stack.ends_with(';') {
                // Without spaces, a frame is empty only if it has no byte at all.
                return Err(FoldedReason::EmptyFrame);
            }
            return Ok(Some(ParsedLine {
                text,
                stack,
                weight,
                weight_text,
                plain: !scan.space,
            }));
        }
    }
    parse_line_general(raw)
}

/// [`parse_line`] for any line: UTF-8, Unicode whitespace, control characters.
fn parse_line_general(raw: &[u8]) -> Result<Option<ParsedLine<'_>>, FoldedReason> {
    let text = std::str::from_utf8(raw)
        .map_err(|_| FoldedReason::NotUtf8)?
        .trim();
    if text.is_empty() {
        return Ok(None);
    }
    let (stack, weight_text) = text.rsplit_once(' ').ok_or(FoldedReason::MissingWeight)?;
    let weight = parse_weight(weight_text)?;
    let stack = stack.trim_end();
    check_stack(stack)?;
    Ok(Some(ParsedLine {
        text,
        stack,
        weight,
        weight_text,
        plain: !stack.bytes().any(|b| b == b' ' || b == b'\t'),
    }))
}

/// `str::trim` for the ASCII whitespace at the ends (`\t` to `\r` and the space); a line
/// ending in other whitespace leaves the fast path, and `str::trim` trims it there.
fn trim_ascii_whitespace(bytes: &[u8]) -> &[u8] {
    let ws = |b: &u8| matches!(b, b'\t'..=b'\r' | b' ');
    let start = bytes.iter().position(|b| !ws(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !ws(b))
        .map_or(start, |end| end + 1);
    &bytes[start..end]
}

/// What one pass over a stack's bytes found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StackScan {
    /// Only bytes b' '..=b'~'.
    printable: bool,
    space: bool,
    /// `;;` somewhere: an empty frame.
    double_separator: bool,
}

/// One pass, in 32-byte chunks without an early exit inside one, which the compiler turns into
/// vector compares (each byte beside the next, for `;;`).
fn scan_stack(bytes: &[u8]) -> StackScan {
    let Some((&last, _)) = bytes.split_last() else {
        return StackScan {
            printable: true,
            space: false,
            double_separator: false,
        };
    };
    let unprintable = |byte: u8| byte.wrapping_sub(b' ') >= 95;
    let (mut bad, mut space, mut double) = (unprintable(last), last == b' ', false);
    let (bytes, next) = (&bytes[..bytes.len() - 1], &bytes[1..]);
    for (chunk, next) in bytes.chunks(32).zip(next.chunks(32)) {
        for (&byte, &following) in chunk.iter().zip(next) {
            bad |= unprintable(byte);
            space |= byte == b' ';
            double |= (byte == b';') & (following == b';');
        }
        if bad {
            break;
        }
    }
    StackScan {
        printable: !bad,
        space,
        double_separator: double,
    }
}

fn parse_weight(text: &str) -> Result<u64, FoldedReason> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FoldedReason::BadWeight(shorten(text)));
    }
    text.parse().map_err(|_| FoldedReason::WeightTooLarge)
}

/// Checks that `stack` is one that inferno reads back as exactly this stack.
///
/// One pass over the bytes (this runs on every stack `render_flamegraph` draws, and on every
/// read stack with a space): the same verdicts as `split(';')` + `trim()` and
/// `chars().any(char::is_control)`, which `check_stack_matches_the_char_based_definition` pins.
pub(crate) fn check_stack(stack: &str) -> Result<(), FoldedReason> {
    if stack.is_empty() {
        return Err(FoldedReason::EmptyStack);
    }
    let bytes = stack.as_bytes();
    // Fast path, taken by nearly every real stack: printable ASCII only (a check the compiler
    // vectorizes), so no control characters, and a frame is empty only if all spaces.
    if printable_ascii(bytes) {
        // One branch-free pass: a frame is empty if a `;` or the end comes before any
        // non-space byte since the last `;`.
        let (mut has_text, mut empty) = (false, false);
        for &byte in bytes {
            let separator = byte == b';';
            empty |= separator & !has_text;
            has_text = (has_text | (byte != b' ')) & !separator;
        }
        if empty | !has_text {
            return Err(FoldedReason::EmptyFrame);
        }
        return check_last_word(stack);
    }
    let mut frame_start = 0;
    // Whether the current frame has an ASCII byte that is neither whitespace nor control,
    // so that `trim()` cannot make it empty.
    let mut frame_has_text = false;
    let mut empty_frame = false;
    let mut control = false;
    for (index, &byte) in bytes.iter().enumerate() {
        match byte {
            b';' => {
                if !frame_has_text && stack[frame_start..index].trim().is_empty() {
                    empty_frame = true;
                }
                frame_start = index + 1;
                frame_has_text = false;
            }
            // C0 controls but tab, and DEL.
            0x00..=0x08 | 0x0a..=0x1f | 0x7f => control = true,
            // C1 controls U+0080..U+009F are 0xC2 0x80..0x9F in UTF-8.
            0xc2 if matches!(bytes.get(index + 1), Some(0x80..=0x9f)) => control = true,
            b'!'..=b'~' => frame_has_text = true,
            _ => {}
        }
    }
    if !frame_has_text && stack[frame_start..].trim().is_empty() {
        empty_frame = true;
    }
    if empty_frame {
        return Err(FoldedReason::EmptyFrame);
    }
    if control {
        return Err(FoldedReason::ControlCharacter);
    }
    check_last_word(stack)
}

/// Only bytes b' '..=b'~'? In 32-byte chunks without early exit inside one, which the
/// compiler turns into vector compares (`all` alone stops at each byte and does not).
fn printable_ascii(bytes: &[u8]) -> bool {
    bytes.chunks(32).all(|chunk| {
        chunk
            .iter()
            .fold(true, |ok, &byte| ok & (byte.wrapping_sub(b' ') < 95))
    })
}

/// A stack ending in ` NUMBER` would be read by inferno as a two-column differential line.
fn check_last_word(stack: &str) -> Result<(), FoldedReason> {
    if stack
        .rsplit_once(' ')
        .is_some_and(|(_, last)| is_count(last))
    {
        return Err(FoldedReason::AmbiguousNumber);
    }
    Ok(())
}

/// At most 40 characters, control characters escaped, so an error stays one short line.
fn shorten(text: &str) -> String {
    let mut short: String = text
        .chars()
        .take(40)
        .collect::<String>()
        .escape_debug()
        .collect();
    if text.chars().count() > 40 {
        short.push('…');
    }
    short
}

/// Writes `stack weight` lines, one per entry, in the given order.
pub fn write_folded<W: Write>(folded: &[(String, u64)], mut writer: W) -> io::Result<()> {
    for (stack, weight) in folded {
        writeln!(writer, "{stack} {weight}")?;
    }
    writer.flush()
}

/// Sum of the weights, `None` on u64 overflow.
pub fn total_weight(folded: &[(String, u64)]) -> Option<u64> {
    folded
        .iter()
        .try_fold(0u64, |total, (_, weight)| total.checked_add(*weight))
}

#[cfg(test)]
mod tests {
    #[test]
    fn check_stack_matches_the_char_based_definition() {
        // The definition the byte scan must agree with.
        fn reference(stack: &str) -> Result<(), super::FoldedReason> {
            use super::FoldedReason;
            if stack.is_empty() {
                return Err(FoldedReason::EmptyStack);
            }
            if stack.split(';').any(|frame| frame.trim().is_empty()) {
                return Err(FoldedReason::EmptyFrame);
            }
            if stack.chars().any(|c| c.is_control() && c != '\t') {
                return Err(FoldedReason::ControlCharacter);
            }
            if stack
                .rsplit_once(' ')
                .is_some_and(|(_, last)| super::is_count(last))
            {
                return Err(FoldedReason::AmbiguousNumber);
            }
            Ok(())
        }
        let pieces = [
            "a", "b c", " ", "\t", ";", "\u{3000}", "\u{85}", "\u{9f}", "\u{a0}", "\u{7f}", "\n",
            "\u{1}", "é", "12", "1.5", "_[k]", "\u{2028}", "x\u{c2}", "",
        ];
        let mut cases = Vec::new();
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    cases.push(format!("{a}{b}{c}"));
                    cases.push(format!("{a};{b}{c}"));
                    cases.push(format!("{a}{b};{c}"));
                }
            }
        }
        for stack in &cases {
            assert_eq!(super::check_stack(stack), reference(stack), "{stack:?}");
        }
    }

    #[test]
    fn parse_line_matches_the_general_path() {
        let pieces = [
            "a",
            "b;c",
            ";",
            " ",
            "  ",
            "\t",
            "5",
            "05",
            "0",
            "\r",
            "é",
            "\u{a0}",
            "\u{b}",
            "x y",
            "1",
            "18446744073709551616",
            "",
        ];
        let mut lines = 0;
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    for weight in ["", " 7", " 007", "  12 ", " x"] {
                        let line = format!("{a}{b}{c}{weight}");
                        assert_eq!(
                            super::parse_line(line.as_bytes()),
                            super::parse_line_general(line.as_bytes()),
                            "{line:?}"
                        );
                        lines += 1;
                    }
                }
            }
        }
        assert!(lines > 20_000);
        // The fast path's own verdicts, on lines it takes.
        let parsed = super::parse_line(b"  a;b   12 \r").unwrap().unwrap();
        assert_eq!(
            (parsed.text, parsed.stack, parsed.weight, parsed.plain),
            ("a;b   12", "a;b", 12, true)
        );
        assert_eq!(parsed.folded().canonical, None);
        assert!(!super::parse_line(b"a b;c 1").unwrap().unwrap().plain);
        assert!(!super::parse_line(b"a\tb;c 1").unwrap().unwrap().plain);
        assert!(super::parse_line(b"\xc3\xa9;c 1").unwrap().unwrap().plain);
    }

    #[test]
    fn scan_stack_finds_double_separators_across_chunks() {
        for len in 2..80 {
            for at in 0..len - 1 {
                let mut stack = vec![b'a'; len];
                stack[at] = b';';
                let single = super::scan_stack(&stack);
                assert!(single.printable && !single.space && !single.double_separator);
                stack[at + 1] = b';';
                assert!(super::scan_stack(&stack).double_separator, "{len} {at}");
                stack[at + 1] = b' ';
                assert!(super::scan_stack(&stack).space, "{len} {at}");
                stack[at + 1] = 0x7f;
                assert!(!super::scan_stack(&stack).printable, "{len} {at}");
            }
        }
    }

    #[test]
    fn parse_folded_text_keeps_the_trimmed_lines_and_sums() {
        let text = parse_folded_text(b"a;b 2\n\n  a;c  5 \r\na;d 0\nb 007").unwrap();
        assert_eq!(text.lines, ["a;b 2", "a;c  5", "b 007"]);
        assert_eq!(text.total, Some(14));
        assert!(text.plain);
        let lines: Vec<_> = text
            .folded_lines()
            .iter()
            .map(|l| (l.stack, l.weight))
            .collect();
        assert_eq!(lines, [("a;b", 2), ("a;c", 5), ("b", 7)]);
        let text = parse_folded_text(b"a 18446744073709551615\nb 1\nc x y 1\n").unwrap();
        assert_eq!(text.total, None);
        assert!(!text.plain);
        let error = parse_folded_text(b"a 1\n\nb;;c 2\n").unwrap_err();
        assert_eq!((error.line, error.reason), (3, FoldedReason::EmptyFrame));
        let error = parse_folded_text(b"a 1\nb \xff 2\n").unwrap_err();
        assert_eq!((error.line, error.reason), (2, FoldedReason::NotUtf8));
        assert_eq!(parse_folded_text(b"").unwrap().lines, Vec::<&str>::new());
    }

    use super::*;
    use std::cell::Cell;

    /// Names kernel addresses `k<hex>` and user addresses `u<hex>`, unless listed.
    struct Table(HashMap<u64, &'static str>);

    impl FrameNames for Table {
        fn kernel_frame(&self, address: u64) -> String {
            self.0
                .get(&address)
                .map_or_else(|| format!("k{address:x}"), |s| s.to_string())
        }
        fn user_frames(&self, pid: u32, addresses: &[u64]) -> Vec<String> {
            addresses
                .iter()
                .map(|a| {
                    self.0
                        .get(a)
                        .map_or_else(|| format!("u{a:x}@{pid}"), |s| s.to_string())
                })
                .collect()
        }
    }

    fn table() -> Table {
        Table(HashMap::from([
            (0xffff_0001, "vfs_read"),
            (0xffff_0002, "ksys_read"),
            (0xffff_0003, "__x64_sys_read"),
            (0xffff_0004, "do_syscall_64"),
            (0x1001, "read"),
            (0x1002, "main"),
        ]))
    }

    fn record(kernel: &[u64], user: &[u64], comm: &str, total_ns: u64, count: u64) -> StackRecord {
        StackRecord {
            kernel: kernel.to_vec(),
            user: user.to_vec(),
            comm: comm.into(),
            pid: 42,
            total_ns,
            count,
            leaf: None,
        }
    }

    #[test]
    fn folds_root_first_with_kernel_suffix_and_user_frames_before_kernel() {
        let records = [record(
            &[0xffff_0001, 0xffff_0002, 0xffff_0003, 0xffff_0004],
            &[0x1001, 0x1002],
            "cat",
            500,
            2,
        )];
        let folded = fold(&records, Weight::LatencyNs, &table());
        assert_eq!(
            folded,
            [(
                "cat;main;read;do_syscall_64_[k];__x64_sys_read_[k];ksys_read_[k];vfs_read_[k]"
                    .to_string(),
                500
            )]
        );
        assert_eq!(fold(&records, Weight::Count, &table())[0].1, 2);
    }

    #[test]
    fn asks_for_user_names_once_per_pid() {
        struct Counting(Cell<usize>);
        impl FrameNames for Counting {
            fn kernel_frame(&self, address: u64) -> String {
                format!("k{address:x}")
            }
            fn user_frames(&self, pid: u32, addresses: &[u64]) -> Vec<String> {
                self.0.set(self.0.get() + 1);
                assert!(
                    addresses.windows(2).all(|w| w[0] < w[1]),
                    "sorted and distinct: {addresses:?}"
                );
                // Too short an answer: the missing names become [unknown].
                addresses[..addresses.len() - 1]
                    .iter()
                    .map(|a| format!("u{a:x}@{pid}"))
                    .collect()
            }
        }
        let mut records = Vec::new();
        for pid in [1, 2] {
            records.push(StackRecord {
                user: vec![0x30, 0x10],
                pid,
                count: 1,
                comm: "c".into(),
                ..Default::default()
            });
            records.push(StackRecord {
                user: vec![0x20, 0x10],
                pid,
                count: 1,
                comm: "c".into(),
                ..Default::default()
            });
        }
        let names = Counting(Cell::new(0));
        let folded = fold(&records, Weight::Count, &names);
        assert_eq!(names.0.get(), 2);
        assert_eq!(folded[0], ("c;u10@1;[unknown]".to_string(), 1));
        assert_eq!(folded[1], ("c;u10@1;u20@1".to_string(), 1));
        assert_eq!(folded.len(), 4);
    }

    #[test]
    fn merges_identical_stacks_and_sorts() {
        let records = [
            record(&[0xffff_0001, 0xffff_0002], &[], "b", 10, 1),
            record(&[0xffff_0001], &[], "a", 7, 1),
            // Same stack from another pid/user-stack-less record: merged.
            record(&[0xffff_0001, 0xffff_0002, 0], &[], "b", 5, 3),
        ];
        let folded = fold(&records, Weight::LatencyNs, &table());
        assert_eq!(
            folded,
            [
                ("a;vfs_read_[k]".to_string(), 7),
                ("b;ksys_read_[k];vfs_read_[k]".to_string(), 15)
            ]
        );
        let by_count = fold(&records, Weight::Count, &table());
        assert_eq!(by_count[1].1, 4);
    }

    #[test]
    fn zero_slots_end_a_stack_and_zero_weights_are_dropped() {
        let records = [
            record(&[0xffff_0001, 0, 0xffff_0002], &[0x1001, 0], "x", 1, 1),
            record(&[0xffff_0001], &[], "y", 0, 1),
        ];
        assert_eq!(
            fold(&records, Weight::LatencyNs, &table()),
            [("x;read;vfs_read_[k]".to_string(), 1)]
        );
        assert_eq!(fold(&records, Weight::Count, &table()).len(), 2);
    }

    #[test]
    fn weights_saturate_instead_of_overflowing() {
        let records = [
            record(&[0xffff_0001], &[], "x", u64::MAX, 1),
            record(&[0xffff_0001], &[], "x", 5, 1),
        ];
        assert_eq!(fold(&records, Weight::LatencyNs, &table())[0].1, u64::MAX);
    }

    #[test]
    fn an_empty_stack_is_just_the_comm() {
        assert_eq!(
            fold(
                &[record(&[], &[], "idle", 3, 1)],
                Weight::LatencyNs,
                &table()
            ),
            [("idle".to_string(), 3)]
        );
    }

    #[test]
    fn sanitizes_separators_whitespace_and_trailing_numbers() {
        assert_eq!(sanitize_frame("a;b"), "a:b");
        assert_eq!(sanitize_frame("  tab\there\nnl  "), "tab here nl");
        assert_eq!(sanitize_frame("kworker/0:1 2"), "kworker/0:1_2");
        assert_eq!(sanitize_frame("Web Content"), "Web Content");
        assert_eq!(
            sanitize_frame("ext4_file_read_iter [ext4]"),
            "ext4_file_read_iter [ext4]"
        );
        assert_eq!(sanitize_frame(""), "[unknown]");
        assert_eq!(sanitize_frame(" \n"), "[unknown]");
        assert_eq!(
            sanitize_frame("<[u8; 8] as Debug>::fmt"),
            "<[u8: 8] as Debug>::fmt"
        );
        for name in ["x 1", "a;b 2.5", " ", "f\r\n3"] {
            let frame = sanitize_frame(name);
            assert_eq!(check_stack(&frame), Ok(()), "{name:?} → {frame:?}");
        }
    }

    #[test]
    fn parses_what_it_writes() {
        let folded = vec![
            ("a;b_[k]".to_string(), 3),
            ("a;c d [m]_[k]".to_string(), u64::MAX),
            ("z".to_string(), 0),
        ];
        let mut bytes = Vec::new();
        write_folded(&folded, &mut bytes).unwrap();
        assert_eq!(
            bytes,
            b"a;b_[k] 3\na;c d [m]_[k] 18446744073709551615\nz 0\n"
        );
        assert_eq!(parse_folded(&bytes).unwrap(), folded);
    }

    #[test]
    fn parse_tolerates_crlf_blank_lines_and_padding() {
        let parsed = parse_folded(b"\r\n  a;b 1\r\n\n\ta;b   2 \n").unwrap();
        assert_eq!(parsed, [("a;b".to_string(), 1), ("a;b".to_string(), 2)]);
        assert_eq!(merge_folded(&parsed), [("a;b".to_string(), 3)]);
        assert_eq!(parse_folded(b"").unwrap(), []);
    }

    #[test]
    fn parse_errors_are_one_line_and_name_the_line() {
        let cases: [(&[u8], usize, FoldedReason); 10] = [
            (b"a;b 1\nno_weight\n", 2, FoldedReason::MissingWeight),
            (b"a;b x1\n", 1, FoldedReason::BadWeight("x1".into())),
            (b"a;b -1\n", 1, FoldedReason::BadWeight("-1".into())),
            (b"a;b 1.5\n", 1, FoldedReason::BadWeight("1.5".into())),
            (
                b"a;b 18446744073709551616\n",
                1,
                FoldedReason::WeightTooLarge,
            ),
            (b" 5\n", 1, FoldedReason::MissingWeight),
            (b"a;;b 5\n", 1, FoldedReason::EmptyFrame),
            (b"a;b 3 5\n", 1, FoldedReason::AmbiguousNumber),
            (b"ok 1\n\xff 2\n", 2, FoldedReason::NotUtf8),
            (b"a\rb;c 2\n", 1, FoldedReason::ControlCharacter),
        ];
        for (input, line, reason) in cases {
            let error = parse_folded(input).unwrap_err();
            assert_eq!(
                error,
                FoldedError { line, reason },
                "{:?}",
                String::from_utf8_lossy(input)
            );
            let message = error.to_string();
            assert!(
                message.starts_with(&format!("folded input line {line}: ")),
                "{message}"
            );
            assert!(!message.contains('\n'), "{message}");
        }
        let long = format!("a {}\n", "x".repeat(100));
        let message = parse_folded(long.as_bytes()).unwrap_err().to_string();
        assert!(message.len() < 120, "{message}");
        let control = parse_folded(b"a 1\x1b[2J\n").unwrap_err().to_string();
        assert!(!control.contains('\x1b'), "{control:?}");
    }

    #[test]
    fn parse_never_panics_on_arbitrary_bytes() {
        // A cheap stand-in for the fuzz target: every byte string of a small alphabet.
        let alphabet = [b'a', b';', b' ', b'1', b'\n', b'\r', 0xff, b'.'];
        let mut input = Vec::new();
        for n in 0..(8u32.pow(5)) {
            input.clear();
            let mut k = n;
            for _ in 0..5 {
                input.push(alphabet[(k % 8) as usize]);
                k /= 8;
            }
            if let Ok(lines) = parse_folded(&input) {
                for (stack, _) in &lines {
                    assert_eq!(check_stack(stack), Ok(()));
                }
            }
        }
    }

    #[test]
    fn totals_detect_overflow() {
        assert_eq!(total_weight(&[("a".into(), 2), ("b".into(), 3)]), Some(5));
        assert_eq!(
            total_weight(&[("a".into(), u64::MAX), ("b".into(), 1)]),
            None
        );
        assert_eq!(total_weight(&[]), Some(0));
    }
}
