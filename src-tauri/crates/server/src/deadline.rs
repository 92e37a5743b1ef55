//! A deadline for a connection's first request headers. axum's `serve`
//! sets no header read timeout, so a client that opens connections and never
//! finishes a request line (slowloris) kept each one open for as long as it
//! liked (measured before this: 65 s and counting). Each connection now gets
//! [`HEADER_TIMEOUT`] to send its first header block (up to the blank line
//! that ends it); a connection that has not is closed. After that the
//! connection reads freely: a streamed answer may take minutes, and the
//! client is silent meanwhile. Bodies have their own deadline (routes.rs).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;

/// How long a new connection has to send its first request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// A TCP listener whose connections get a header deadline.
#[derive(Debug)]
pub struct DeadlineListener {
    pub inner: TcpListener,
    pub header_timeout: Duration,
}

impl axum::serve::Listener for DeadlineListener {
    type Io = HeaderDeadline;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => return (HeaderDeadline::new(stream, self.header_timeout), addr),
                // Out of file descriptors and the like: pause instead of spinning.
                Err(e) => {
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection that must have sent a whole header block (ending in a
/// blank line) before its deadline; reads fail with `TimedOut` once it passes.
#[derive(Debug)]
pub struct HeaderDeadline {
    stream: TcpStream,
    /// `None` once the first headers are in.
    deadline: Option<Pin<Box<Sleep>>>,
    /// The last bytes read, to find "\r\n\r\n" across reads.
    tail: Vec<u8>,
}

impl HeaderDeadline {
    fn new(stream: TcpStream, timeout: Duration) -> Self {
        Self { stream, deadline: Some(Box::pin(tokio::time::sleep(timeout))), tail: Vec::with_capacity(8) }
    }

    /// Notes `bytes` just read; true once the end of a header block was seen.
    fn saw_header_end(&mut self, bytes: &[u8]) -> bool {
        self.tail.extend_from_slice(bytes);
        let found = self.tail.windows(4).any(|w| w == b"\r\n\r\n");
        let keep = self.tail.len().saturating_sub(3);
        self.tail.drain(..keep);
        found
    }
}

impl AsyncRead for HeaderDeadline {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if self.deadline.is_none() {
            return polled;
        }
        match polled {
            Poll::Ready(Ok(())) => {
                let read = buf.filled()[before..].to_vec();
                if self.saw_header_end(&read) {
                    self.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match self.deadline.as_mut().map(|d| d.as_mut().poll(cx)) {
                Some(Poll::Ready(())) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the request's headers did not arrive in time",
                ))),
                _ => Poll::Pending,
            },
            other => other,
        }
    }
}

impl AsyncWrite for HeaderDeadline {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_end_of_the_headers_is_found_across_reads() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (stream, _) = listener.accept().await.unwrap();
        let mut c = HeaderDeadline::new(stream, Duration::from_secs(1));
        assert!(!c.saw_header_end(b"GET / HTTP/1.1\r\nHost: x\r"));
        assert!(!c.saw_header_end(b"\n"));
        assert!(c.saw_header_end(b"\r\n"), "split over three reads");
        assert!(c.tail.len() <= 3);
    }
}
