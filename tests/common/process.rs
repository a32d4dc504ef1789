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
    /// Spawns `command` and waits until it accepts connections on `port`; panics if it exits
    /// first.
    pub fn spawn(command: Command, port: u16) -> Process {
        Process::try_spawn(command, port).expect("tideway exited before it listened")
    }

    /// Spawns `command` and waits until it accepts connections on `port`; `None` if it exits
    /// instead, or within a moment of a successful connection (then something else answered
    /// on the port: another test's server took it between `free_port` and the bind).
    fn try_spawn(mut command: Command, port: u16) -> Option<Process> {
        let mut child = command.spawn().expect("start tideway");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if child.try_wait().expect("poll tideway").is_some() {
                return None;
            }
            assert!(Instant::now() < deadline, "tideway did not start listening");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(100));
        if child.try_wait().expect("poll tideway").is_some() {
            return None;
        }
        Some(Process { child, port })
    }

    /// A disk server on `dbpath` and a free port, with `extra` arguments (another port if the
    /// first was taken meanwhile).
    pub fn start_disk(dbpath: &Path, extra: &[&str]) -> Process {
        for _ in 0..5 {
            let port = free_port();
            let mut command = tideway();
            command
                .args(["--port", &port.to_string(), "--dbpath"])
                .arg(dbpath)
                .args(extra);
            if let Some(process) = Process::try_spawn(command, port) {
                return process;
            }
        }
        panic!(
            "tideway did not start on {} after 5 ports",
            dbpath.display()
        );
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
