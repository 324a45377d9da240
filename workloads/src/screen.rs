//! A terminal screen, as far as a full-screen program drawn with ANSI sequences needs one:
//! printable characters (UTF-8), CR, LF, backspace, cursor positioning (`CSI row;col H`,
//! `CSI n A/B/C/D/G/d`), erasing (`CSI n J`, `CSI n K`), the alternate screen
//! (`CSI ?1049 h/l`, `?47`, `?1047`); colours and every other sequence are read and ignored.
//! Enough for ratatui's crossterm backend, which `hotprof top` draws with; `pty_run` keeps one
//! so a test can read the screen in a guest without tmux.

/// What the screen shows, and where the next character goes.
#[derive(Debug, Clone)]
pub struct Screen {
    cols: usize,
    rows: usize,
    cells: Vec<Vec<char>>,
    /// The main screen's cells while the alternate screen is shown.
    saved_main: Option<Vec<Vec<char>>>,
    row: usize,
    col: usize,
    parser: Parser,
    /// Bytes of an incomplete UTF-8 character.
    pending: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq)]
enum Parser {
    Text,
    Escape,
    /// `ESC [` and the parameter bytes so far.
    Csi(String),
    /// `ESC ]`: an operating-system command, up to BEL or `ESC \`.
    Osc {
        escaped: bool,
    },
    /// `ESC (`, `ESC )` and the like: one more byte.
    Charset,
}

impl Screen {
    pub fn new(cols: usize, rows: usize) -> Self {
        Self {
            cols,
            rows,
            cells: vec![vec![' '; cols]; rows],
            saved_main: None,
            row: 0,
            col: 0,
            parser: Parser::Text,
            pending: Vec::new(),
        }
    }

    /// Whether the alternate screen is shown.
    pub fn alternate(&self) -> bool {
        self.saved_main.is_some()
    }

    /// The screen as text: one line per row, trailing spaces trimmed.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for row in &self.cells {
            let line: String = row.iter().collect();
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.byte(byte);
        }
    }

    fn byte(&mut self, byte: u8) {
        match std::mem::replace(&mut self.parser, Parser::Text) {
            Parser::Text => self.text_byte(byte),
            Parser::Escape => {
                self.parser = match byte {
                    b'[' => Parser::Csi(String::new()),
                    b']' => Parser::Osc { escaped: false },
                    b'(' | b')' | b'*' | b'+' => Parser::Charset,
                    _ => Parser::Text,
                }
            }
            Parser::Csi(mut params) => {
                if (0x40..=0x7e).contains(&byte) {
                    self.csi(&params, byte);
                } else {
                    params.push(byte as char);
                    self.parser = Parser::Csi(params);
                }
            }
            Parser::Osc { escaped } => {
                let done = byte == 0x07 || (escaped && byte == b'\\');
                if !done {
                    self.parser = Parser::Osc {
                        escaped: byte == 0x1b,
                    };
                }
            }
            Parser::Charset => {}
        }
    }

    fn text_byte(&mut self, byte: u8) {
        match byte {
            0x1b => self.parser = Parser::Escape,
            b'\r' => self.col = 0,
            b'\n' => self.line_feed(),
            0x08 => self.col = self.col.saturating_sub(1),
            0x00..=0x1f | 0x7f => {}
            _ => {
                self.pending.push(byte);
                match std::str::from_utf8(&self.pending) {
                    Ok(text) => {
                        let chars: Vec<char> = text.chars().collect();
                        self.pending.clear();
                        for c in chars {
                            self.put(c);
                        }
                    }
                    // Incomplete: wait for the rest (at most 4 bytes).
                    Err(err) if err.error_len().is_none() && self.pending.len() < 4 => {}
                    Err(_) => {
                        self.pending.clear();
                        self.put('\u{fffd}');
                    }
                }
            }
        }
    }

    fn put(&mut self, c: char) {
        if self.col >= self.cols {
            self.col = 0;
            self.line_feed();
        }
        self.cells[self.row][self.col] = c;
        self.col += 1;
    }

    fn line_feed(&mut self) {
        if self.row + 1 < self.rows {
            self.row += 1;
        } else {
            self.cells.remove(0);
            self.cells.push(vec![' '; self.cols]);
        }
    }

    fn csi(&mut self, params: &str, command: u8) {
        let private = params.starts_with('?');
        let numbers: Vec<usize> = params
            .trim_start_matches('?')
            .split(';')
            .map(|n| n.parse().unwrap_or(0))
            .collect();
        let n = |index: usize, default: usize| match numbers.get(index) {
            Some(&0) | None => default,
            Some(&n) => n,
        };
        match (private, command) {
            (false, b'H' | b'f') => {
                self.row = (n(0, 1) - 1).min(self.rows - 1);
                self.col = (n(1, 1) - 1).min(self.cols - 1);
            }
            (false, b'A') => self.row = self.row.saturating_sub(n(0, 1)),
            (false, b'B') => self.row = (self.row + n(0, 1)).min(self.rows - 1),
            (false, b'C') => self.col = (self.col + n(0, 1)).min(self.cols - 1),
            (false, b'D') => self.col = self.col.saturating_sub(n(0, 1)),
            (false, b'G') => self.col = (n(0, 1) - 1).min(self.cols - 1),
            (false, b'd') => self.row = (n(0, 1) - 1).min(self.rows - 1),
            (false, b'J') => self.erase_display(numbers.first().copied().unwrap_or(0)),
            (false, b'K') => self.erase_line(numbers.first().copied().unwrap_or(0)),
            (true, b'h')
                if self.saved_main.is_none()
                    && numbers.iter().any(|&m| [47, 1047, 1049].contains(&m)) =>
            {
                let blank = vec![vec![' '; self.cols]; self.rows];
                self.saved_main = Some(std::mem::replace(&mut self.cells, blank));
            }
            (true, b'l') if numbers.iter().any(|&m| [47, 1047, 1049].contains(&m)) => {
                if let Some(main) = self.saved_main.take() {
                    self.cells = main;
                }
            }
            _ => {}
        }
    }

    fn erase_display(&mut self, how: usize) {
        let (row, col) = (self.row, self.col);
        match how {
            0 => {
                self.erase_line(0);
                self.cells[row + 1..].iter_mut().for_each(|r| r.fill(' '));
            }
            1 => {
                self.cells[..row].iter_mut().for_each(|r| r.fill(' '));
                self.cells[row][..=col.min(self.cols - 1)].fill(' ');
            }
            _ => self.cells.iter_mut().for_each(|r| r.fill(' ')),
        }
    }

    fn erase_line(&mut self, how: usize) {
        let col = self.col.min(self.cols);
        let line = &mut self.cells[self.row];
        match how {
            0 => line[col..].fill(' '),
            1 => line[..(col + 1).min(self.cols)].fill(' '),
            _ => line.fill(' '),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_prints_and_erases() {
        let mut screen = Screen::new(10, 3);
        screen.feed("\x1b[2;3Hab\x1b[1;1Hxyz\x1b[38;5;12mµs\x1b[0m".as_bytes());
        assert_eq!(screen.text(), "xyzµs\n  ab\n\n");
        screen.feed(b"\x1b[1;3H\x1b[K\x1b[3;1Hend\r\nnext");
        assert_eq!(
            screen.text(),
            "  ab\nend\nnext\n",
            "erased, then scrolled a line"
        );
        screen.feed(b"\x1b[2J");
        assert_eq!(screen.text(), "\n\n\n");
    }

    #[test]
    fn the_alternate_screen_keeps_the_main_one() {
        let mut screen = Screen::new(8, 2);
        screen.feed(b"$ top\r\n");
        screen.feed(b"\x1b[?1049h\x1b[?25l\x1b[1;1HTABLE");
        assert!(screen.alternate());
        assert_eq!(screen.text(), "TABLE\n\n");
        screen.feed(b"\x1b[?1049l\x1b[?25h");
        assert!(!screen.alternate());
        assert_eq!(screen.text(), "$ top\n\n");
    }

    #[test]
    fn split_utf8_titles_and_unknown_sequences_are_handled() {
        let mut screen = Screen::new(8, 1);
        let bytes = "\x1b]0;title\x07a\x1b(Bµ\x1b[>4;1m".as_bytes();
        for byte in bytes {
            screen.feed(&[*byte]);
        }
        assert_eq!(screen.text(), "aµ\n");
    }
}
