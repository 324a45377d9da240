//! Folded stacks → flame graph SVGs, with inferno.
//!
//! Output is deterministic, byte for byte, so golden files can pin it: frame colors come from
//! a hash of the frame name (inferno's `deterministic` option) instead of its default random
//! pick, and lines are merged and validated here before inferno sorts them. The palette is
//! inferno's `perl` one, the simplest that knows perf's `_[k]` convention: kernel frames
//! orange, C++ and Rust paths (`::`) yellow, everything else red (`java` would also paint
//! anything with a `/` or `.` green, `swapper/1` and `libc.so.6+0x…` included). Inferno strips
//! the `_[k]` suffix from labels and tooltips whatever the palette.
//!
//! Frame widths and tooltip counts are the folded weights themselves, so the root frame (`all`)
//! shows the profile's total — the histogram's total latency in ns, or its call count. Tooltip
//! counts go through an f64 in inferno, which is exact up to 2^53 (104 days of summed ns); the
//! frames element's `total_samples` attribute is the exact u64.

use inferno::flamegraph::color::{MultiPalette, Palette};
use inferno::flamegraph::{self, Options};

use std::borrow::Cow;

use super::folded::{
    FoldedLine, FoldedReason, FoldedText, check_stack, merge_folded_owned, total_weight,
};

/// Why an SVG could not be drawn; one line each.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("nothing to draw: {what} has no stack with a non-zero weight")]
    Empty { what: &'static str },
    #[error("{what}: the weights add up to more than 2^64")]
    Overflow { what: &'static str },
    #[error("{what}: stack '{stack}': {reason}")]
    BadStack {
        what: &'static str,
        stack: String,
        reason: FoldedReason,
    },
    #[error("inferno could not draw the flame graph: {0}")]
    Inferno(#[from] std::io::Error),
}

/// Draws a flame graph of `folded` (`stack weight` pairs, root-first stacks, any order,
/// duplicates summed). `count_name` is the unit in tooltips: `ns` for latency, `calls` for
/// counts, `samples` for sampling. Fails on an empty (or all-zero) profile rather than drawing
/// inferno's error picture, and on stacks inferno would misread (see [`super::parse_folded`]).
pub fn render_flamegraph(
    folded: &[(String, u64)],
    title: &str,
    subtitle: Option<&str>,
    count_name: &str,
) -> Result<Vec<u8>, RenderError> {
    render_flamegraph_owned(folded.to_vec(), title, subtitle, count_name)
}

/// [`render_flamegraph`] consuming its input, which is merged and turned into inferno's lines
/// in place: one copy of the stacks in memory instead of two (`hotprof flamegraph` on a
/// million-line file).
pub fn render_flamegraph_owned(
    folded: Vec<(String, u64)>,
    title: &str,
    subtitle: Option<&str>,
    count_name: &str,
) -> Result<Vec<u8>, RenderError> {
    let (lines, _) = prepare(folded, "the profile")?;
    let mut options = options(title, subtitle.map(str::to_string), count_name);
    // `prepare` sorted the lines exactly as inferno would (whole lines, all distinct), so
    // inferno need not sort a million lines a second time.
    options.no_sort = true;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)?;
    Ok(svg)
}

/// [`render_flamegraph`] for input parsed by [`super::parse_folded_lines`] (`hotprof
/// flamegraph FILE`): the lines are checked already and borrow from the input, and only lines
/// that had to change (duplicates merged, non-canonical spacing) are rebuilt, so a million-line
/// file is held once, as inferno's own binary holds it.
pub fn render_folded_lines(
    mut lines: Vec<FoldedLine<'_>>,
    title: &str,
    subtitle: Option<&str>,
    count_name: &str,
) -> Result<Vec<u8>, RenderError> {
    let what = "the profile";
    lines.retain(|line| line.weight > 0);
    // Equal stacks are summed, so their relative order does not matter.
    lines.sort_unstable_by(|a, b| a.stack.cmp(b.stack));
    lines.dedup_by(|later, kept| {
        let same = later.stack == kept.stack;
        if same {
            kept.weight = kept.weight.saturating_add(later.weight);
            kept.canonical = None;
        }
        same
    });
    let total = lines
        .iter()
        .try_fold(0u64, |total, line| total.checked_add(line.weight))
        .ok_or(RenderError::Overflow { what })?;
    if total == 0 {
        return Err(RenderError::Empty { what });
    }
    let mut texts: Vec<Cow<'_, str>> = lines
        .iter()
        .map(|line| match line.canonical {
            Some(text) => Cow::Borrowed(text),
            None => Cow::Owned(format!("{} {}", line.stack, line.weight)),
        })
        .collect();
    drop(lines);
    sort_as_inferno(&mut texts);
    let mut options = options(title, subtitle.map(str::to_string), count_name);
    options.no_sort = true;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, texts.iter().map(|text| &**text), &mut svg)?;
    Ok(svg)
}

/// Lines per block handed to inferno by [`render_folded_text`]: 1 MiB of `&str`s, above
/// glibc's threshold for giving freed memory straight back to the kernel.
const LINES_PER_BLOCK: usize = 1 << 16;

/// `lines` in blocks of [`LINES_PER_BLOCK`], in order. inferno reads the lines once, in order:
/// handed over in blocks that are freed as it goes, their 16 MB (a million lines) are gone by
/// the time its frames take the most memory. The blocks are split off the end and `lines`
/// shrunk after each rather than freed whole: freeing a 16 MB allocation makes glibc raise its
/// mmap threshold to 16 MB, so inferno's growing frame vector would then be moved around the
/// heap, whose freed copies stay resident (the peak grew by more than the blocks saved).
fn into_blocks(mut lines: Vec<&str>) -> Vec<Vec<&str>> {
    let mut blocks = Vec::with_capacity(lines.len().div_ceil(LINES_PER_BLOCK));
    while !lines.is_empty() {
        let start = (lines.len() - 1) / LINES_PER_BLOCK * LINES_PER_BLOCK;
        blocks.push(lines.split_off(start));
        lines.shrink_to_fit();
    }
    blocks.reverse();
    blocks
}

/// Draws the flame graph of `hotprof flamegraph FILE`'s input, parsed by
/// [`super::parse_folded_text`], with the work `inferno-flamegraph` does and no more: one sort
/// of the lines as they are, and inferno's own pass, which sums equal stacks next to each other
/// (the SVG is the one [`render_folded_lines`] draws from merged lines, byte for byte). Input
/// whose stacks have spaces or tabs, where text order is not stack order, goes through
/// [`render_folded_lines`].
pub fn render_folded_text(
    text: FoldedText<'_>,
    title: &str,
    subtitle: Option<&str>,
    count_name: &str,
) -> Result<Vec<u8>, RenderError> {
    let what = "the profile";
    match text.total {
        None => return Err(RenderError::Overflow { what }),
        Some(0) => return Err(RenderError::Empty { what }),
        Some(_) => {}
    }
    if !text.plain {
        return render_folded_lines(text.folded_lines(), title, subtitle, count_name);
    }
    let mut lines = text.lines;
    lines.sort_unstable();
    let blocks = into_blocks(lines);
    let mut options = options(title, subtitle.map(str::to_string), count_name);
    options.no_sort = true;
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, blocks.into_iter().flatten(), &mut svg)?;
    Ok(svg)
}

/// Lines sorted by stack are sorted as whole lines too unless a stack is a prefix of another
/// that continues with a character below ' ' (a tab): then sort as inferno does.
fn sort_as_inferno<T: Ord>(lines: &mut [T]) {
    if !lines.is_sorted() {
        lines.sort_unstable();
    }
}

/// Draws a differential flame graph: frames as wide as in `new`, leaf frames colored by how
/// their weight changed from `base` — red grew, blue shrank, the deeper the more.
///
/// The base is first scaled to the new total (inferno's `differential` with `normalize`), so a
/// profile of a longer or busier run does not paint everything red: colors show the change in
/// each stack's *share*. Stacks only in `base` have width 0 in `new` and do not show; to see
/// what vanished, also draw `render_diff(new, base, …)`.
pub fn render_diff(
    base: &[(String, u64)],
    new: &[(String, u64)],
    title: &str,
    count_name: &str,
) -> Result<Vec<u8>, RenderError> {
    let (base_lines, base_total) = prepare(base.to_vec(), "the base profile")?;
    let (new_lines, new_total) = prepare(new.to_vec(), "the new profile")?;
    let (base_bytes, new_bytes) = (base_lines.join("\n"), new_lines.join("\n"));

    let diff_options = inferno::differential::Options {
        normalize: true,
        ..Default::default()
    };
    let mut two_columns = Vec::new();
    inferno::differential::from_readers(
        diff_options,
        base_bytes.as_bytes(),
        new_bytes.as_bytes(),
        &mut two_columns,
    )?;
    let two_columns = String::from_utf8(two_columns)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;

    let subtitle = format!(
        "base {} {count_name} scaled to the new {} {count_name}; red grew, blue shrank",
        thousands(base_total),
        thousands(new_total),
    );
    let mut options = options(title, Some(subtitle), count_name);
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, two_columns.lines(), &mut svg)?;
    Ok(svg)
}

/// Validated, merged `stack weight` lines and their total.
fn prepare(
    folded: Vec<(String, u64)>,
    what: &'static str,
) -> Result<(Vec<String>, u64), RenderError> {
    let merged = merge_folded_owned(folded);
    for (stack, _) in &merged {
        check_stack(stack).map_err(|reason| {
            let mut shown: String = stack
                .chars()
                .take(80)
                .collect::<String>()
                .escape_debug()
                .collect();
            if stack.chars().count() > 80 {
                shown.push('…');
            }
            RenderError::BadStack {
                what,
                stack: shown,
                reason,
            }
        })?;
    }
    let total = total_weight(&merged).ok_or(RenderError::Overflow { what })?;
    if total == 0 {
        return Err(RenderError::Empty { what });
    }
    let mut lines: Vec<String> = merged
        .into_iter()
        .map(|(mut stack, weight)| {
            stack.push(' ');
            stack.push_str(&weight.to_string());
            stack
        })
        .collect();
    sort_as_inferno(&mut lines);
    Ok((lines, total))
}

fn options(title: &str, subtitle: Option<String>, count_name: &str) -> Options<'static> {
    let mut options = Options::default();
    options.colors = Palette::Multi(MultiPalette::Perl);
    options.deterministic = true;
    options.title = title.to_string();
    options.subtitle = subtitle;
    options.count_name = count_name.to_string();
    options
}

/// `1,234,567`, as inferno prints counts.
fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flame::{parse_folded, parse_folded_lines};

    fn lines(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
        pairs.iter().map(|(s, w)| (s.to_string(), *w)).collect()
    }

    fn text(svg: &[u8]) -> &str {
        std::str::from_utf8(svg).unwrap()
    }

    #[test]
    fn renders_deterministically_with_the_total_on_the_root_frame() {
        let folded = lines(&[
            ("cat;vfs_read_[k]", 1500),
            ("cat;ksys_read_[k];vfs_read_[k]", 2500),
            ("ls;x_[k]", 1000),
        ]);
        let svg = render_flamegraph(&folded, "t", Some("s"), "ns").unwrap();
        assert_eq!(
            svg,
            render_flamegraph(&folded, "t", Some("s"), "ns").unwrap()
        );
        let mut reversed = folded.clone();
        reversed.reverse();
        assert_eq!(
            svg,
            render_flamegraph(&reversed, "t", Some("s"), "ns").unwrap()
        );
        let svg = text(&svg);
        assert!(svg.contains("<title>all (5,000 ns, 100%)</title>"), "{svg}");
        assert!(svg.contains("total_samples=\"5000\""));
        // The _[k] suffix is stripped from what people read.
        assert!(
            svg.contains("<title>ksys_read (2,500 ns, 50.00%)</title>"),
            "{svg}"
        );
        assert!(
            svg.contains("<title>vfs_read (1,500 ns, 30.00%)</title>"),
            "{svg}"
        );
        assert!(!svg.contains("_[k]"));
    }

    #[test]
    fn duplicates_are_summed_and_the_count_name_is_used() {
        let svg = render_flamegraph(&lines(&[("a;b", 2), ("a;b", 3)]), "t", None, "calls").unwrap();
        assert!(
            text(&svg).contains("<title>b (5 calls, 100.00%)</title>"),
            "{}",
            text(&svg)
        );
    }

    #[test]
    fn refuses_empty_overflowing_and_ambiguous_input() {
        assert!(matches!(
            render_flamegraph(&[], "t", None, "ns"),
            Err(RenderError::Empty { .. })
        ));
        assert!(matches!(
            render_flamegraph(&lines(&[("a", 0)]), "t", None, "ns"),
            Err(RenderError::Empty { .. })
        ));
        let overflow = lines(&[("a", u64::MAX), ("b", 1)]);
        assert!(matches!(
            render_flamegraph(&overflow, "t", None, "ns"),
            Err(RenderError::Overflow { .. })
        ));
        let error = render_flamegraph(&lines(&[("a;b 12", 3)]), "t", None, "ns").unwrap_err();
        assert!(matches!(
            error,
            RenderError::BadStack {
                reason: FoldedReason::AmbiguousNumber,
                ..
            }
        ));
        let error = render_flamegraph(&lines(&[("a;\nb", 3)]), "t", None, "ns")
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(!error.contains('\n'), "{error}");
        for error in [
            RenderError::Empty {
                what: "the profile",
            },
            RenderError::Overflow {
                what: "the profile",
            },
        ] {
            assert!(!error.to_string().contains('\n'));
        }
    }

    #[test]
    fn diffs_are_normalized_and_colored_by_change() {
        // The base is half as long a run with the same shape except that b's share grew.
        let base = lines(&[("a;b", 100), ("a;c", 100)]);
        let new = lines(&[("a;b", 300), ("a;c", 100)]);
        let svg = render_diff(&base, &new, "diff", "ns").unwrap();
        assert_eq!(svg, render_diff(&base, &new, "diff", "ns").unwrap());
        let svg = text(&svg);
        assert!(svg.contains("<title>all (400 ns, 100%)</title>"), "{svg}");
        assert!(
            svg.contains("base 200 ns scaled to the new 400 ns"),
            "{svg}"
        );
        // Normalized base: b 200, c 200 → b +100 (+25%), c -100 (-25%).
        assert!(
            svg.contains("<title>b (300 ns, 75.00%; +25.00%)</title>"),
            "{svg}"
        );
        assert!(
            svg.contains("<title>c (100 ns, 25.00%; -25.00%)</title>"),
            "{svg}"
        );
        // Red for growth, blue for shrinkage (inferno's color_scale at the full delta).
        assert!(svg.contains("fill=\"rgb(255,100,100)\""), "{svg}");
        assert!(svg.contains("fill=\"rgb(100,100,255)\""), "{svg}");
        assert!(matches!(
            render_diff(&[], &new, "d", "ns"),
            Err(RenderError::Empty {
                what: "the base profile"
            })
        ));
        assert!(matches!(
            render_diff(&base, &[], "d", "ns"),
            Err(RenderError::Empty {
                what: "the new profile"
            })
        ));
    }

    #[test]
    fn the_borrowed_path_draws_what_the_owned_one_does() {
        // Duplicates, extra spaces, a leading zero, a zero weight, a tab inside a stack whose
        // prefix is another stack (the whole-line order then differs from the stack order).
        let data = b"a;b 2\na;c 5\na;b 3\n  a;d   7 \na;e 007\na;f 0\nx\ty 1\nx 4\n";
        let owned = render_flamegraph(&parse_folded(data).unwrap(), "t", None, "ns").unwrap();
        let lines = parse_folded_lines(data).unwrap();
        assert_eq!(lines[0].canonical, Some("a;b 2"));
        assert_eq!(lines[3].canonical, None, "extra spaces are rebuilt");
        assert_eq!(lines[4].canonical, None, "a leading zero is rebuilt");
        let borrowed = render_folded_lines(lines, "t", None, "ns").unwrap();
        assert_eq!(
            String::from_utf8(borrowed).unwrap(),
            String::from_utf8(owned).unwrap()
        );
        assert!(matches!(
            render_folded_lines(parse_folded_lines(b"a 0\n").unwrap(), "t", None, "ns"),
            Err(RenderError::Empty { .. })
        ));
    }

    #[test]
    fn the_text_path_draws_what_the_merged_one_does() {
        // Plain: duplicates (one of them spaced out, one with a leading zero), a zero weight,
        // stacks that are prefixes of others. Not plain: a tab and a space inside stacks whose
        // prefix is another stack (text order is not stack order there).
        let plain: &[u8] = b"a;b 2\na;c 5\na;b 3\n  a;d   7 \na;c 005\na;f 0\na 4\na;b;c 1\n";
        let not_plain: &[u8] = b"x\ty 1\nx 4\nx !z 2\nx 3\n";
        for data in [plain, not_plain] {
            let text = crate::flame::parse_folded_text(data).unwrap();
            assert_eq!(text.plain, data == plain);
            let drawn = render_folded_text(text, "t", None, "ns").unwrap();
            let merged = render_flamegraph(&parse_folded(data).unwrap(), "t", None, "ns").unwrap();
            assert_eq!(text_of(drawn), text_of(merged));
        }
        let svg = render_folded_text(
            crate::flame::parse_folded_text(plain).unwrap(),
            "t",
            None,
            "ns",
        )
        .unwrap();
        assert!(
            text(&svg).contains("<title>a (27 ns, 100.00%)</title>"),
            "{}",
            text(&svg)
        );
        for (data, empty) in [
            (&b"a 0\n"[..], true),
            (b"a 18446744073709551615\nb 1", false),
        ] {
            let error = render_folded_text(
                crate::flame::parse_folded_text(data).unwrap(),
                "t",
                None,
                "ns",
            )
            .unwrap_err();
            assert_eq!(matches!(error, RenderError::Empty { .. }), empty, "{error}");
            assert_eq!(
                matches!(error, RenderError::Overflow { .. }),
                !empty,
                "{error}"
            );
        }
    }

    fn text_of(svg: Vec<u8>) -> String {
        String::from_utf8(svg).unwrap()
    }

    #[test]
    fn blocks_keep_every_line_in_order() {
        for len in [
            0,
            1,
            LINES_PER_BLOCK - 1,
            LINES_PER_BLOCK,
            LINES_PER_BLOCK + 1,
            3 * LINES_PER_BLOCK + 5,
        ] {
            let names: Vec<String> = (0..len).map(|i| i.to_string()).collect();
            let lines: Vec<&str> = names.iter().map(String::as_str).collect();
            let blocks = into_blocks(lines.clone());
            assert!(
                blocks
                    .iter()
                    .all(|b| !b.is_empty() && b.len() <= LINES_PER_BLOCK)
            );
            assert_eq!(blocks.len(), len.div_ceil(LINES_PER_BLOCK));
            assert_eq!(blocks.concat(), lines);
        }
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(
            thousands(18446744073709551615),
            "18,446,744,073,709,551,615"
        );
    }
}
