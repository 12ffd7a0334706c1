//! TCP plumbing of a simulated replica: a listener that sets `TCP_NODELAY` (SSE frames are
//! small and must not wait for Nagle) and keeps a handle on every accepted connection, so
//! killing the replica can break them all at once, as a dying process would.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use super::replica::lock;

#[derive(Debug, Default)]
struct RegistryState {
    closed: bool,
    next: u64,
    /// A duplicate of each open connection's socket, used only to shut it down.
    conns: HashMap<u64, std::net::TcpStream>,
}

/// The open connections of one serving generation.
#[derive(Debug, Default)]
pub(crate) struct ConnRegistry {
    state: Mutex<RegistryState>,
}

impl ConnRegistry {
    /// Tracks `s`; `None` (and the connection is shut down) once the registry is closed.
    #[cfg(unix)]
    fn register(self: &Arc<Self>, s: &TcpStream) -> Option<ConnEntry> {
        use std::os::fd::AsFd;
        let dup = s
            .as_fd()
            .try_clone_to_owned()
            .map(std::net::TcpStream::from);
        let mut st = lock(&self.state);
        let Ok(dup) = dup else {
            // Out of descriptors: serve it untracked rather than refuse it.
            return (!st.closed).then_some(ConnEntry {
                registry: None,
                id: 0,
            });
        };
        if st.closed {
            let _ = dup.shutdown(std::net::Shutdown::Both);
            return None;
        }
        st.next += 1;
        let id = st.next;
        st.conns.insert(id, dup);
        Some(ConnEntry {
            registry: Some(self.clone()),
            id,
        })
    }

    #[cfg(not(unix))]
    fn register(self: &Arc<Self>, _s: &TcpStream) -> Option<ConnEntry> {
        (!lock(&self.state).closed).then_some(ConnEntry {
            registry: None,
            id: 0,
        })
    }

    /// Refuses further connections and shuts down every open one (both directions): their
    /// reads see EOF and their writes fail, so in-flight responses break.
    pub(crate) fn close_all(&self) {
        let conns = {
            let mut st = lock(&self.state);
            st.closed = true;
            std::mem::take(&mut st.conns)
        };
        for s in conns.values() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        lock(&self.state).conns.len()
    }
}

/// Removes its connection from the registry when the connection is dropped.
#[derive(Debug)]
struct ConnEntry {
    registry: Option<Arc<ConnRegistry>>,
    id: u64,
}

impl Drop for ConnEntry {
    fn drop(&mut self) {
        if let Some(r) = &self.registry {
            lock(&r.state).conns.remove(&self.id);
        }
    }
}

/// An accepted connection.
#[derive(Debug)]
pub(crate) struct TrackedStream {
    io: TcpStream,
    _entry: ConnEntry,
}

impl AsyncRead for TrackedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for TrackedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A TCP listener whose connections are tracked in a [`ConnRegistry`].
#[derive(Debug)]
pub(crate) struct TrackedListener {
    listener: TcpListener,
    registry: Arc<ConnRegistry>,
}

impl TrackedListener {
    pub(crate) fn new(listener: TcpListener, registry: Arc<ConnRegistry>) -> Self {
        TrackedListener { listener, registry }
    }
}

impl axum::serve::Listener for TrackedListener {
    type Io = TrackedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.listener.accept().await {
                Ok((io, addr)) => {
                    let _ = io.set_nodelay(true);
                    if let Some(entry) = self.registry.register(&io) {
                        return (TrackedStream { io, _entry: entry }, addr);
                    }
                }
                Err(e) => {
                    let transient = matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionRefused
                            | io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                    );
                    if !transient {
                        // Typically out of file descriptors: back off briefly.
                        tracing::warn!("serve-sim accept error: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}
