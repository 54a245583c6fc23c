//! What a node's thread asks of the operating system beyond the socket itself: a random
//! seed, a larger receive buffer, a wait on two file descriptors, and an eventfd.

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// Asked of the kernel for the receive buffer; a sync arrives as a burst of chunks.
const RECV_BUFFER_BYTES: libc::c_int = 4 << 20;

pub(super) fn random_seed() -> u64 {
    let mut seed = [0u8; 8];
    getrandom::fill(&mut seed).expect("the OS RNG is available");
    u64::from_le_bytes(seed)
}

pub(super) fn grow_receive_buffer(socket: &UdpSocket) {
    let size = RECV_BUFFER_BYTES;
    // Best effort: the kernel caps it at net.core.rmem_max, which is fine.
    // SAFETY: a valid socket fd and a correctly sized int option value.
    unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// Sleeps until the socket or the waker is readable, or `timeout` passes.
pub(super) fn wait_readable(socket: RawFd, waker: RawFd, timeout: Duration) {
    let mut fds = [
        libc::pollfd {
            fd: socket,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: waker,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // Round up so a timer is never polled for before it is due.
    let millis = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, millis);
    }
}

/// A non-blocking Linux eventfd: `signal` makes it readable, `drain` resets it.
pub(super) struct EventFd(RawFd);

impl EventFd {
    pub(super) fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(EventFd(fd))
    }

    pub(super) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our own fd. A full counter (EAGAIN)
        // already means readable, so the result needs no handling.
        unsafe {
            libc::write(self.0, (&one as *const u64).cast(), 8);
        }
    }

    pub(super) fn drain(&self) {
        let mut value: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64 from our own fd; EAGAIN means already 0.
        unsafe {
            libc::read(self.0, (&mut value as *mut u64).cast(), 8);
        }
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: we own the fd and close it once.
        unsafe {
            libc::close(self.0);
        }
    }
}
