//! The terminal's keys, read on a thread of their own (crossterm reads block) and passed to
//! `top`'s loop as the table's [`Input`]s.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use tokio::sync::mpsc;

use super::table::Input;

/// What the terminal said.
pub enum TerminalEvent {
    Key(Input),
    /// The window changed size: draw again.
    Resized,
}

/// The reading thread; stops when dropped.
pub struct Keys {
    pub events: mpsc::UnboundedReceiver<std::io::Result<TerminalEvent>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// How long a read waits before looking whether to stop.
const POLL: Duration = Duration::from_millis(50);

impl Keys {
    pub fn start() -> Self {
        let (sender, events) = mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let event = match event::poll(POLL) {
                        Ok(false) => continue,
                        Ok(true) => event::read(),
                        Err(error) => Err(error),
                    };
                    let failed = event.is_err();
                    let passed = match event {
                        Ok(Event::Key(key)) => translate(key).map(|i| Ok(TerminalEvent::Key(i))),
                        Ok(Event::Resize(..)) => Some(Ok(TerminalEvent::Resized)),
                        Ok(_) => None,
                        Err(error) => Some(Err(error)),
                    };
                    if let Some(passed) = passed
                        && sender.send(passed).is_err()
                    {
                        break;
                    }
                    if failed {
                        break;
                    }
                }
            })
        };
        Self {
            events,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn translate(key: KeyEvent) -> Option<Input> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    Some(match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Input::Interrupt,
        KeyCode::Char(c) => Input::Char(c),
        KeyCode::Up => Input::Up,
        KeyCode::Down => Input::Down,
        KeyCode::Enter => Input::Enter,
        KeyCode::Esc => Input::Escape,
        KeyCode::Backspace => Input::Backspace,
        _ => return None,
    })
}
