//! Passing a descriptor over the socket (SCM_RIGHTS), for the streams of `send` and
//! `receive`: the CLI hands the daemon its stdout or stdin, and the daemon reads or writes
//! the pipe itself. The stream never passes through the CLI or the JSON lines.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

/// Sends `fd` with one byte on `socket`.
pub(crate) fn send_fd(socket: &UnixStream, fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("descriptor does not fit its message"));
    }
    sendmsg(
        socket,
        &[IoSlice::new(b"F")],
        &mut control,
        SendFlags::empty(),
    )?;
    Ok(())
}

/// Receives the byte and the descriptor [`send_fd`] sent (close-on-exec).
pub(crate) fn receive_fd(socket: &UnixStream) -> std::io::Result<OwnedFd> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let message = recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
    if message.bytes == 0 {
        return Err(std::io::Error::other(
            "client closed before passing its stream",
        ));
    }
    let mut found = None;
    for item in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = item {
            for fd in fds {
                found.get_or_insert(fd);
            }
        }
    }
    found.ok_or_else(|| std::io::Error::other("client sent no descriptor"))
}
