//! The `tideway` binary as a child process, for tests of what only the real process shows: the
//! command line, environment variables, signals, restarts and crashes.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mongodb::Client;

pub struct Process {
    child: Child,
    pub port: u16,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `tideway` with its output discarded (an unread pipe would block it).
pub fn tideway() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tideway"));
    command.stdout(Stdio::null()).stderr(Stdio::null());
    command
}

impl Process {
    /// Spawns `command` and waits until it accepts connections on `port`.
    pub fn spawn(mut command: Command, port: u16) -> Process {
        let child = command.spawn().expect("start tideway");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "tideway did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        Process { child, port }
    }

    /// A disk server on `dbpath` and a free port, with `extra` arguments.
    pub fn start_disk(dbpath: &Path, extra: &[&str]) -> Process {
        let port = free_port();
        let mut command = tideway();
        command
            .args(["--port", &port.to_string(), "--dbpath"])
            .arg(dbpath)
            .args(extra);
        Process::spawn(command, port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn client(&self) -> Client {
        super::client_for(&format!("127.0.0.1:{}", self.port).parse().unwrap())
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn terminate(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = self.child.wait().unwrap();
        assert!(exit.success(), "graceful shutdown exits 0, got {exit:?}");
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        let _ = self.child.wait();
    }
}
