//! What a client writes, and a blocking client: one connection, a command sent as an array of
//! bulk strings, one reply read at a time. Every read and write has a timeout, a read or write
//! cut short (by the kernel or by a signal) goes on, and a reply's size is bounded.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::error::RespError;
use crate::value::{parse_reply, reply_len, Reply};

/// Append a command, an array of bulk strings, to `out`. Lengths are formatted on the stack,
/// so a pipelining caller that reuses `out` allocates nothing per command.
pub fn write_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    let mut n = itoa::Buffer::new();
    out.push(b'*');
    out.extend_from_slice(n.format(args.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        out.push(b'$');
        out.extend_from_slice(n.format(a.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// A blocking RESP connection.
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    /// Bytes received; those before `start` were already returned.
    input: Vec<u8>,
    start: usize,
    out: Vec<u8>,
    timeout: Duration,
    max_reply: usize,
}

/// Bytes asked of the kernel per read.
const READ_CHUNK: usize = 64 << 10;

impl Client {
    /// How long a connect, a read or a write waits unless told otherwise: a guard against a
    /// hang, not a measure of anything.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
    /// The longest reply accepted unless told otherwise: a bulk string of the largest size a
    /// server accepts (proto-max-bulk-len), and room for its framing.
    pub const DEFAULT_MAX_REPLY: usize = crate::MAX_BULK + (1 << 20);

    /// Connect to `addr` (`HOST:PORT`) with [`Client::DEFAULT_TIMEOUT`].
    pub fn connect(addr: &str) -> Result<Client, RespError> {
        Client::connect_timeout(addr, Client::DEFAULT_TIMEOUT)
    }

    /// Connect to `addr`, waiting at most `timeout` for the connection and then for each read
    /// and write.
    pub fn connect_timeout(addr: &str, timeout: Duration) -> Result<Client, RespError> {
        let sa: SocketAddr = addr
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| RespError::Resolve {
                addr: addr.to_string(),
            })?;
        let stream =
            TcpStream::connect_timeout(&sa, timeout).map_err(|source| RespError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        stream.set_nodelay(true)?;
        let mut c = Client {
            stream,
            input: Vec::new(),
            start: 0,
            out: Vec::new(),
            timeout,
            max_reply: Client::DEFAULT_MAX_REPLY,
        };
        c.set_timeout(timeout)?;
        Ok(c)
    }

    /// Wait at most `timeout` for each read and write from now on.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), RespError> {
        self.stream.set_read_timeout(Some(timeout))?;
        self.stream.set_write_timeout(Some(timeout))?;
        self.timeout = timeout;
        Ok(())
    }

    /// Refuse replies longer than `bytes` (with [`RespError::TooLarge`]).
    pub fn set_max_reply(&mut self, bytes: usize) {
        self.max_reply = bytes;
    }

    /// The connection itself (its address, a shutdown, a raw write).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Send a command without reading its reply (pipelining, or a command that blocks).
    pub fn send(&mut self, args: &[&[u8]]) -> Result<(), RespError> {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        write_command(&mut out, args);
        let sent = self.send_raw(&out);
        self.out = out;
        sent
    }

    /// Send bytes as they are (inline commands, malformed requests, several commands at once).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), RespError> {
        // write_all goes on after a partial write and retries on EINTR.
        self.stream.write_all(bytes).map_err(|e| self.io_error(e))?;
        Ok(())
    }

    /// Send a command and read its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Reply, RespError> {
        self.send(args)?;
        self.read()
    }

    /// Read one reply.
    pub fn read(&mut self) -> Result<Reply, RespError> {
        loop {
            if let Some((reply, n)) = parse_reply(&self.input[self.start..])? {
                self.start += n;
                return Ok(reply);
            }
            self.fill()?;
        }
    }

    /// Read one reply and append its bytes, as the server sent them, to `out`.
    pub fn read_raw(&mut self, out: &mut Vec<u8>) -> Result<(), RespError> {
        loop {
            if let Some(n) = reply_len(&self.input[self.start..])? {
                out.extend_from_slice(&self.input[self.start..self.start + n]);
                self.start += n;
                return Ok(());
            }
            self.fill()?;
        }
    }

    /// Read one line (a part of a stream that is not a reply, such as the header of a
    /// replication snapshot), without its CRLF.
    pub fn read_line(&mut self) -> Result<Vec<u8>, RespError> {
        loop {
            let buffered = &self.input[self.start..];
            if let Some(at) = buffered.windows(2).position(|w| w == b"\r\n") {
                let line = buffered[..at].to_vec();
                self.start += at + 2;
                return Ok(line);
            }
            self.fill()?;
        }
    }

    /// Read exactly `n` bytes (a part of a stream that is not a reply, such as the body of a
    /// replication snapshot, which no CRLF ends).
    pub fn read_bytes(&mut self, n: usize) -> Result<Vec<u8>, RespError> {
        while self.input.len() - self.start < n {
            self.fill()?;
        }
        let bytes = self.input[self.start..self.start + n].to_vec();
        self.start += n;
        Ok(bytes)
    }

    /// Everything left until the server closes the connection (what was received and not yet
    /// read first): what a server says before it closes one.
    pub fn read_to_close(&mut self) -> Result<Vec<u8>, RespError> {
        loop {
            match self.fill() {
                Ok(()) => {}
                Err(RespError::Closed) => break,
                Err(RespError::Io(e)) if e.kind() == ErrorKind::ConnectionReset => break,
                Err(e) => return Err(e),
            }
        }
        let rest = self.input[self.start..].to_vec();
        self.start = self.input.len();
        Ok(rest)
    }

    /// Bytes received and not yet read as a reply, a line or bytes.
    pub fn buffered(&self) -> &[u8] {
        &self.input[self.start..]
    }

    /// Read once more from the connection into the input buffer.
    fn fill(&mut self) -> Result<(), RespError> {
        if self.start == self.input.len() {
            self.input.clear();
            self.start = 0;
        } else if self.start >= READ_CHUNK && self.start * 2 >= self.input.len() {
            self.input.drain(..self.start);
            self.start = 0;
        }
        if self.input.len() - self.start > self.max_reply {
            return Err(RespError::TooLarge {
                limit: self.max_reply,
            });
        }
        let len = self.input.len();
        self.input.resize(len + READ_CHUNK, 0);
        loop {
            match self.stream.read(&mut self.input[len..]) {
                Ok(0) => {
                    self.input.truncate(len);
                    return Err(RespError::Closed);
                }
                Ok(n) => {
                    self.input.truncate(len + n);
                    return Ok(());
                }
                // A signal landing mid-read (a profiler, a harness's SIGCHLD) is not an error.
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.input.truncate(len);
                    return Err(self.io_error(e));
                }
            }
        }
    }

    fn io_error(&self, e: std::io::Error) -> RespError {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => RespError::Timeout(self.timeout),
            _ => RespError::Io(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A reply sent one byte at a time is read whole; a command is written as bulk strings.
    #[test]
    fn a_reply_split_into_single_bytes_is_read_whole() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let want = b"*2\r\n$3\r\nGET\r\n$11\r\nhello world\r\n";
            let mut got = vec![0; want.len()];
            s.read_exact(&mut got).unwrap();
            assert_eq!(got, want);
            for b in b"*2\r\n$5\r\nhello\r\n:42\r\n+OK\r\n" {
                s.write_all(&[*b]).unwrap();
            }
        });
        let mut c = Client::connect(&addr).unwrap();
        assert_eq!(
            c.call(&[b"GET", b"hello world"]).unwrap(),
            Reply::Array(vec![Reply::bulk("hello"), Reply::Int(42)])
        );
        let mut raw = Vec::new();
        c.read_raw(&mut raw).unwrap();
        assert_eq!(raw, b"+OK\r\n");
        server.join().unwrap();
        assert!(matches!(c.read(), Err(RespError::Closed)));
    }

    #[test]
    fn a_silent_server_times_out_and_a_long_reply_is_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let mut c = Client::connect_timeout(&addr, Duration::from_millis(50)).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        assert!(matches!(c.read(), Err(RespError::Timeout(_))));
        c.set_max_reply(10);
        s.write_all(b"$100\r\n0123456789abcdef").unwrap();
        assert!(matches!(c.read(), Err(RespError::TooLarge { limit: 10 })));
    }
}
