//! The write timeout (`--timeout-s`): a connection whose reply cannot be written for that long is closed.
//!
//! A client that never reads a reply leaves its bytes in the kernel's socket queues until they fill; then
//! hyper stops polling the reply, and what the reply has not yet sent (the engine's events, a whole JSON
//! body) waits in the server for as long as the connection stays open. Every accepted socket is wrapped in
//! [`WriteDeadline`]: a write the socket has not taken for the timeout fails with `TimedOut`, hyper drops the
//! connection and its reply, which closes the job's channel, and the engine cancels the job's sequences at
//! their next token (freeing their slots and caches) or, if they had ended, only the events are freed. The
//! clock runs only while a write is waiting, so an idle keep-alive connection, or a reply that waits for its
//! tokens, is not cut off; any progress starts it again (llama-server's `--timeout` is the same per-write
//! limit).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

/// A listener whose connections are [`WriteDeadline`]s.
pub struct WriteTimeoutListener {
    /// The listener accepted from.
    pub inner: TcpListener,
    /// The limit (`None`: no limit).
    pub timeout: Option<Duration>,
    /// Connections closed for it, counted here (`/health`'s `write_timeouts`).
    pub timeouts: Arc<AtomicU64>,
}

impl axum::serve::Listener for WriteTimeoutListener {
    type Io = WriteDeadline;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, peer) = axum::serve::Listener::accept(&mut self.inner).await;
        (WriteDeadline { io, peer, timeout: self.timeout, waiting: None, timed_out: false, timeouts: self.timeouts.clone() }, peer)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection whose writes fail once one has waited for the timeout.
pub struct WriteDeadline {
    io: TcpStream,
    peer: SocketAddr,
    timeout: Option<Duration>,
    /// Started when a write found the socket full; dropped when one goes through.
    waiting: Option<Pin<Box<Sleep>>>,
    timed_out: bool,
    timeouts: Arc<AtomicU64>,
}

impl WriteDeadline {
    fn timed_out_error(&self) -> io::Error {
        io::Error::new(io::ErrorKind::TimedOut, format!("the client at {} took none of the reply for {:?}", self.peer, self.timeout.unwrap_or_default()))
    }

    /// What a write (or flush) the socket answered with `polled` returns: a wait past the timeout is an
    /// error, and registers this task to be woken when the timeout passes.
    fn deadline<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        let Some(timeout) = self.timeout else { return polled };
        if !polled.is_pending() {
            self.waiting = None;
            return polled;
        }
        let waiting = self.waiting.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if waiting.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.waiting = None;
        self.timed_out = true;
        self.timeouts.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            peer = %self.peer,
            timeout_s = timeout.as_secs_f64(),
            "a reply could not be written for --timeout-s (its client does not read): closing the connection, which cancels its request"
        );
        Poll::Ready(Err(self.timed_out_error()))
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if self.timed_out {
            return Poll::Ready(Err(self.timed_out_error()));
        }
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.deadline(cx, polled)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        if self.timed_out {
            return Poll::Ready(Err(self.timed_out_error()));
        }
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.deadline(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.deadline(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
