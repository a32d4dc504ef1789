//! The command line, environment and configuration file of the real binary: flags, `TIDEWAY_*`
//! variables, `--config` (mongod's YAML format, keys from MongoDB's "Configuration File Options"
//! page; refusals worded as mongod's options parser words them), `--outputConfig`, `--help`, and
//! the slow-command log.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bson::{doc, Bson, Document};
use common::command_error;
use common::process::{free_port, tideway, Process};

/// `text` as `tideway.conf` in `dir`.
fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("tideway.conf");
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `command` to its exit (at most 20 s: a server that starts instead is killed, and the test
/// fails), with its output captured.
fn run_to_exit(mut command: Command) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("tideway kept running instead of exiting");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

async fn parsed_options(server: &Process) -> Document {
    let admin = server.client().database("admin");
    let opts = admin.run_command(doc! {"getCmdLineOpts": 1}).await.unwrap();
    opts.get_document("parsed").unwrap().clone()
}

#[tokio::test]
async fn a_config_file_configures_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = write_config(
        dir.path(),
        &format!(
            "# mongod's format\nnet:\n  port: {port}\n  bindIp: 127.0.0.1\n  maxIncomingConnections: 55\nstorage:\n  engine: memory\noperationProfiling:\n  slowOpThresholdMs: 250\nsecurity:\n  javascriptEnabled: false\nsetParameter:\n  ttlMonitorSleepSecs: 5\n"
        ),
    );
    let mut command = tideway();
    command.arg("-f").arg(&path);
    let server = Process::spawn(command, port);
    let parsed = parsed_options(&server).await;
    assert_eq!(parsed.get_str("config"), Ok(path.to_str().unwrap()));
    let net = parsed.get_document("net").unwrap();
    assert_eq!(net.get_i32("port"), Ok(i32::from(port)));
    assert_eq!(net.get_i64("maxIncomingConnections"), Ok(55));
    assert_eq!(
        parsed.get_document("storage").unwrap().get_str("engine"),
        Ok("memory")
    );
    assert_eq!(
        parsed
            .get_document("operationProfiling")
            .unwrap()
            .get_i64("slowOpThresholdMs"),
        Ok(250)
    );
    let client = server.client();
    let admin = client.database("admin");
    let sleep = admin
        .run_command(doc! {"getParameter": 1, "ttlMonitorSleepSecs": 1})
        .await
        .unwrap();
    assert_eq!(sleep.get_i32("ttlMonitorSleepSecs"), Ok(5));
    // security.javascriptEnabled: false is --noscripting: $where fails as mongod's does without
    // a script engine (6108304).
    let (code, _, message) = command_error(
        client
            .database("cfg")
            .run_command(doc! {"find": "c", "filter": {"$where": "true"}})
            .await,
    );
    assert_eq!(code, 6108304, "{message}");
    server.terminate();
}

#[tokio::test]
async fn flags_beat_variables_and_variables_beat_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let path = write_config(
        dir.path(),
        "net:\n  port: 1\n  maxIncomingConnections: 300\nstorage:\n  engine: memory\noperationProfiling:\n  mode: slowOp\n  slowOpThresholdMs: 300\n",
    );
    let mut command = tideway();
    command
        .env("TIDEWAY_CONFIG", &path)
        .env("TIDEWAY_SLOWMS", "200")
        .env("TIDEWAY_MAX_CONNS", "201")
        .args(["--port", &port.to_string(), "--slowms", "100"]);
    let server = Process::spawn(command, port);
    let parsed = parsed_options(&server).await;
    let profiling = parsed.get_document("operationProfiling").unwrap();
    assert_eq!(profiling.get_i64("slowOpThresholdMs"), Ok(100), "flag");
    assert_eq!(
        parsed
            .get_document("net")
            .unwrap()
            .get_i64("maxIncomingConnections"),
        Ok(201),
        "variable"
    );
    assert_eq!(profiling.get_str("mode"), Ok("slowOp"), "file");
    assert_eq!(
        parsed.get_document("storage").unwrap().get_str("engine"),
        Ok("memory"),
        "file"
    );
    server.terminate();
}

#[test]
fn refused_config_files_stop_startup_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (text, expected) in [
        ("net:\n  bogus: 1\n", "Unrecognized option: net.bogus"),
        (
            "replication:\n  enableMajorityReadConcern: true\n",
            "replication.enableMajorityReadConcern",
        ),
        (
            "security:\n  authorization: maybe\n",
            "Bad value for security.authorization: maybe",
        ),
        (
            "net:\n  tls:\n    CRLFile: /etc/crl.pem\n",
            "net.tls.CRLFile",
        ),
        (
            "net:\n  tls:\n    mode: requireSSL\n",
            "unsupported value for tlsMode requireSSL",
        ),
        (
            "net:\n  tls:\n    mode: requireTLS\n",
            "need tlsCertificateKeyFile or certificateSelector when TLS is enabled",
        ),
        (
            "net:\n  port: abc\n",
            "Error parsing option \"net.port\" as int",
        ),
        (
            "security:\n  javascriptEnabled: 0\n",
            "Expected boolean but found string: 0 for option: security.javascriptEnabled",
        ),
        (
            "setParameter:\n  nosuchParameter: 1\n",
            "Illegal --setParameter parameter: \"nosuchParameter\"",
        ),
    ] {
        let path = write_config(dir.path(), text);
        let mut command = Command::new(env!("CARGO_BIN_EXE_tideway"));
        command
            .args([
                "--storage",
                "memory",
                "--port",
                &free_port().to_string(),
                "-f",
            ])
            .arg(&path);
        let output = run_to_exit(command);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{text}: {stderr}");
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
}

/// mongod's startup checks of the TLS options (`ssl_options_server.cpp`), exit code 2.
#[test]
fn inconsistent_tls_flags_stop_startup() {
    for (args, expected) in [
        (
            &["--tlsMode", "requireTLS"][..],
            "need tlsCertificateKeyFile or certificateSelector when TLS is enabled",
        ),
        (
            &["--tlsCAFile", "/etc/ca.pem"][..],
            "need to enable TLS via the sslMode/tlsMode flag when using TLS configuration parameters",
        ),
        (
            &["--tlsAllowConnectionsWithoutCertificates"][..],
            "need to enable TLS via the sslMode/tlsMode flag when using TLS configuration parameters",
        ),
        (&["--tlsMode", "requireSSL"][..], "requireSSL"),
        // mongod flags tideway does not implement are refused by name, never ignored.
        (
            &["--tlsCRLFile", "/etc/crl.pem"][..],
            "tideway does not support --tlsCRLFile (net.tls.CRLFile)",
        ),
        (
            &["--tlsCertificateKeyFilePassword=secret"][..],
            "tideway does not support --tlsCertificateKeyFilePassword",
        ),
    ] {
        let mut command = Command::new(env!("CARGO_BIN_EXE_tideway"));
        command
            .args(["--storage", "memory", "--port", &free_port().to_string()])
            .args(args);
        let output = run_to_exit(command);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn output_config_prints_the_effective_configuration_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(
        dir.path(),
        "storage:\n  engine: memory\noperationProfiling:\n  slowOpThresholdMs: 250\n",
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_tideway"));
    command
        .args(["--outputConfig", "--port", "27123", "--config"])
        .arg(&path);
    let output = run_to_exit(command);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    for line in [
        "  port: 27123",
        "  engine: memory",
        "  slowOpThresholdMs: 250",
        "  javascriptEnabled: true",
    ] {
        assert!(
            stdout.lines().any(|got| got == line),
            "{line} in:\n{stdout}"
        );
    }
    // What it prints is a configuration file tideway reads.
    let printed = write_config(dir.path(), &stdout);
    let mut again = Command::new(env!("CARGO_BIN_EXE_tideway"));
    again.args(["--outputConfig", "-f"]).arg(&printed);
    let output = run_to_exit(again);
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout), stdout);
}

#[tokio::test]
async fn environment_variables_configure_the_server() {
    let port = free_port();
    let mut command = tideway();
    command
        .env("TIDEWAY_PORT", port.to_string())
        .env("TIDEWAY_STORAGE", "memory")
        .env("TIDEWAY_MAX_CONNS", "77");
    let server = Process::spawn(command, port);
    let admin = server.client().database("admin");
    let opts = admin.run_command(doc! {"getCmdLineOpts": 1}).await.unwrap();
    let parsed = opts.get_document("parsed").unwrap();
    assert_eq!(
        parsed.get_document("net").unwrap().get_i32("port"),
        Ok(i32::from(port))
    );
    assert_eq!(
        parsed
            .get_document("net")
            .unwrap()
            .get_i64("maxIncomingConnections"),
        Ok(77)
    );
    assert_eq!(
        parsed.get_document("storage").unwrap().get_str("engine"),
        Ok("memory")
    );
    server.terminate();
}

#[test]
fn help_lists_every_flag_and_its_variable() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tideway"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--port",
        "--bind_ip",
        "--dbpath",
        "--storage",
        "--syncdelay-ms",
        "--maxConns",
        "--log-format",
        "--log-level",
        "--slowms",
        "--enableTestCommands",
        "--setParameter",
        "--config",
        "--outputConfig",
        "--tlsMode",
        "--tlsCertificateKeyFile",
        "--tlsCAFile",
        "--tlsAllowConnectionsWithoutCertificates",
        "TIDEWAY_TLS_MODE",
        "TIDEWAY_CONFIG",
        "TIDEWAY_PORT",
        "TIDEWAY_DBPATH",
    ] {
        assert!(help.contains(flag), "--help mentions {flag}:\n{help}");
    }
}

#[tokio::test]
async fn slow_commands_are_logged() {
    let port = free_port();
    let mut command = tideway();
    command.args([
        "--port",
        &port.to_string(),
        "--storage",
        "memory",
        "--slowms",
        "0",
    ]);
    let server = Process::spawn(command, port);
    let admin = server.client().database("admin");
    admin.run_command(doc! {"ping": 1}).await.unwrap();
    let log = admin.run_command(doc! {"getLog": "global"}).await.unwrap();
    let lines: Vec<&str> = log
        .get_array("log")
        .unwrap()
        .iter()
        .filter_map(Bson::as_str)
        .collect();
    let slow = lines
        .iter()
        .find(|line| line.contains("Slow query") && line.contains("\"ping\""));
    assert!(slow.is_some(), "a slow-query line for ping in {lines:#?}");
    server.terminate();
}
