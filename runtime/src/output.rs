//! The program's stdout: kept in memory, bounded, and able to tell afterwards that the bound was hit.

use bytes::{Bytes, BytesMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi_io::poll::Pollable;
use wasmtime_wasi_io::streams::{OutputStream, StreamError};

/// An output stream that keeps at most `capacity` bytes. For a program's stdout ([`CappedOutput::new`])
/// a write past the bound fails the guest's write and sets [`CappedOutput::overflowed`], so the host can
/// report `limit-exceeded(output)` instead of the guest's own, less specific, failure. For a plug-in's
/// stderr ([`CappedOutput::keeping_tail`]) nothing fails: the oldest bytes make room, because what a
/// crash explains is at the end.
#[derive(Clone)]
pub struct CappedOutput {
    capacity: usize,
    keep_tail: bool,
    buffer: Arc<Mutex<BytesMut>>,
    overflowed: Arc<AtomicBool>,
}

impl CappedOutput {
    pub fn new(capacity: usize) -> Self {
        Self { capacity, keep_tail: false, buffer: Arc::default(), overflowed: Arc::default() }
    }

    /// A stream that keeps the last `capacity` bytes written and never fails a write.
    pub fn keeping_tail(capacity: usize) -> Self {
        Self { keep_tail: true, ..Self::new(capacity) }
    }

    /// Forgets everything written so far (a reused plug-in instance starts each call empty).
    pub fn clear(&self) {
        self.buffer.lock().expect("stdout buffer poisoned").clear();
        self.overflowed.store(false, Ordering::Relaxed);
    }

    /// The last `n` non-empty lines written, oldest first.
    pub fn last_lines(&self, n: usize) -> Vec<String> {
        let text = self.text();
        let mut lines: Vec<String> = text.lines().rev().filter(|l| !l.trim().is_empty()).take(n).map(str::to_string).collect();
        lines.reverse();
        lines
    }

    /// Everything written so far, as text (invalid UTF-8 replaced), never longer than the bound. Each
    /// byte of an invalid or cut sequence becomes U+FFFD, three bytes: a write cut at the bound in the
    /// middle of `é` made 1 byte of stdout 3 (found by the fuzzer), and a guest writing invalid bytes
    /// could triple its output. The text is cut back to the bound at a character boundary (for a tail,
    /// from the front).
    pub fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.buffer.lock().expect("stdout buffer poisoned")).into_owned();
        if text.len() > self.capacity {
            if self.keep_tail {
                let mut start = text.len() - self.capacity;
                while !text.is_char_boundary(start) {
                    start += 1;
                }
                text.drain(..start);
            } else {
                let mut end = self.capacity;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
            }
        }
        text
    }

    /// Whether the program tried to write past the bound.
    pub fn overflowed(&self) -> bool {
        self.overflowed.load(Ordering::Relaxed)
    }
}

impl IsTerminal for CappedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(AsyncCappedOutput(self.clone()))
    }
}

#[async_trait::async_trait]
impl OutputStream for CappedOutput {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        let mut buffer = self.buffer.lock().expect("stdout buffer poisoned");
        if self.keep_tail {
            let keep = bytes.len().min(self.capacity);
            let drop = (buffer.len() + keep).saturating_sub(self.capacity);
            if drop > 0 {
                let _ = buffer.split_to(drop);
                self.overflowed.store(true, Ordering::Relaxed);
            }
            buffer.extend_from_slice(&bytes[bytes.len() - keep..]);
            return Ok(());
        }
        let room = self.capacity - buffer.len();
        if bytes.len() > room {
            buffer.extend_from_slice(&bytes[..room]);
            self.overflowed.store(true, Ordering::Relaxed);
            return Err(StreamError::Trap(wasmtime::Error::new(OutputLimitExceeded(self.capacity))));
        }
        buffer.extend_from_slice(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        if self.keep_tail {
            return Ok(self.capacity.max(4096));
        }
        let used = self.buffer.lock().expect("stdout buffer poisoned").len();
        // Always offer room, so that a write past the bound reaches `write` and is reported as such.
        Ok((self.capacity - used).max(4096))
    }
}

#[async_trait::async_trait]
impl Pollable for CappedOutput {
    async fn ready(&mut self) {}
}

/// The trap raised when a program writes past its stdout bound.
#[derive(Debug, thiserror::Error)]
#[error("the program wrote more than {0} bytes to stdout")]
pub struct OutputLimitExceeded(pub usize);

struct AsyncCappedOutput(CappedOutput);

impl tokio::io::AsyncWrite for AsyncCappedOutput {
    fn poll_write(mut self: std::pin::Pin<&mut Self>, _cx: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        let result = OutputStream::write(&mut self.0, Bytes::copy_from_slice(buf)).map(|()| buf.len()).map_err(|e| std::io::Error::other(e.to_string()));
        std::task::Poll::Ready(result)
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, _cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: std::pin::Pin<&mut Self>, _cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_keeping_stream_keeps_the_last_bytes_and_never_fails() {
        let mut tail = CappedOutput::keeping_tail(10);
        for chunk in ["first\n", "second\n", "third line\n"] {
            OutputStream::write(&mut tail, Bytes::from(chunk)).expect("a tail stream never fails a write");
        }
        assert_eq!(tail.text(), "hird line\n");
        assert!(tail.overflowed());
        OutputStream::write(&mut tail, Bytes::from("a\nb\n\nc\n")).unwrap();
        assert_eq!(tail.last_lines(2), ["b", "c"], "blank lines are skipped");
        tail.clear();
        assert_eq!(tail.text(), "");
        assert!(!tail.overflowed());
    }

    #[test]
    fn the_text_stays_within_the_bound_when_a_character_or_invalid_bytes_are_cut() {
        let mut capped = CappedOutput::new(1);
        assert!(OutputStream::write(&mut capped, Bytes::from("é")).is_err());
        assert_eq!(capped.text(), "", "half an `é` is dropped, not replaced by three bytes");
        let mut capped = CappedOutput::new(100);
        assert!(OutputStream::write(&mut capped, Bytes::from(format!("{}é", "x".repeat(99)))).is_err());
        assert_eq!(capped.text(), "x".repeat(99));
        let mut capped = CappedOutput::new(8);
        OutputStream::write(&mut capped, Bytes::from_static(&[0xff; 8])).unwrap();
        assert!(capped.text().len() <= 8, "{:?}", capped.text());
        let mut tail = CappedOutput::keeping_tail(4);
        OutputStream::write(&mut tail, Bytes::from_static(&[0xff; 4])).unwrap();
        assert!(tail.text().len() <= 4, "{:?}", tail.text());
    }

    #[test]
    fn a_capped_stream_fails_the_write_past_its_bound() {
        let mut capped = CappedOutput::new(4);
        assert!(OutputStream::write(&mut capped, Bytes::from("abcdef")).is_err());
        assert_eq!(capped.text(), "abcd");
        assert!(capped.overflowed());
    }
}
