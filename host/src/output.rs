//! What a hook writes to stdout and stderr: kept up to a bound, the rest counted, never
//! refused. A charm whose write failed would panic (Rust's `println!` does), so a verbose
//! charm would fail for its verbosity; here it only loses the excess, and says so.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// A hook's stdout and stderr, shared by both streams: the first `capacity` bytes, and how
/// many lines past them were dropped.
#[derive(Clone)]
pub(crate) struct HookOutput {
    inner: Arc<Mutex<Kept>>,
    capacity: usize,
}

#[derive(Default)]
struct Kept {
    bytes: Vec<u8>,
    dropped_lines: u64,
    /// Whether bytes were dropped after the last newline counted: a last line with no
    /// newline counts too.
    partial: bool,
}

impl HookOutput {
    pub(crate) fn new(capacity: usize) -> Self {
        HookOutput {
            inner: Arc::default(),
            capacity,
        }
    }

    fn push(&self, buf: &[u8]) {
        let mut kept = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let room = self
            .capacity
            .saturating_sub(kept.bytes.len())
            .min(buf.len());
        kept.bytes.extend_from_slice(&buf[..room]);
        let dropped = &buf[room..];
        if dropped.is_empty() {
            return;
        }
        let newlines = dropped.iter().filter(|&&b| b == b'\n').count() as u64;
        kept.dropped_lines += newlines;
        kept.partial = dropped.last() != Some(&b'\n');
    }

    /// The output kept, as text (bytes that are not UTF-8 replaced), and a last line
    /// saying how many lines were dropped, if any.
    pub(crate) fn contents(&self) -> String {
        let kept = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut text = String::from_utf8_lossy(&kept.bytes).into_owned();
        let dropped = kept.dropped_lines + u64::from(kept.partial);
        if dropped > 0 {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "{dropped} lines dropped: a hook's output is kept up to {} KiB\n",
                self.capacity >> 10
            ));
        }
        text
    }
}

impl IsTerminal for HookOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for HookOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for HookOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for HookOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always ready: what does not fit is dropped, not waited for.
        Ok(64 << 10)
    }
}

impl tokio::io::AsyncWrite for HookOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_past_the_capacity_is_dropped_and_counted() {
        let out = HookOutput::new(8);
        out.push(b"one\ntwo\nthree\nfour\n");
        assert_eq!(
            out.contents(),
            "one\ntwo\n2 lines dropped: a hook's output is kept up to 0 KiB\n"
        );
        let out = HookOutput::new(6);
        out.push(b"one\ntwo\nthree");
        // "tw" kept, "o\n" and "three" dropped: two lines.
        assert_eq!(
            out.contents(),
            "one\ntw\n2 lines dropped: a hook's output is kept up to 0 KiB\n"
        );
        let out = HookOutput::new(64);
        out.push(b"\xff\xfe ok\n");
        assert_eq!(out.contents(), "\u{fffd}\u{fffd} ok\n");
    }
}
